// The .npy reader/writer (tools/npy.cpp): round trips, header versions, and clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_test_support.hpp"

namespace tileattn::cli_test {
namespace {

template <typename T>
void round_trip(npy::ElementType type, const std::vector<std::int64_t>& shape) {
  TempDir dir;
  std::vector<T> data(static_cast<std::size_t>(product(shape)));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<T>(i % 7);
  npy::write(dir.file("a.npy"), type, shape, data.data());
  const npy::Array a = npy::read(dir.file("a.npy"));
  EXPECT_EQ(a.type, type);
  EXPECT_EQ(a.shape, shape);
  ASSERT_EQ(a.element_count(), static_cast<std::int64_t>(data.size()));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), a.as<T>()));
  // numpy's layout: the data starts at a multiple of 64 bytes
  EXPECT_EQ((std::filesystem::file_size(dir.file("a.npy")) - data.size() * sizeof(T)) % 64, 0u);
}

TEST(Npy, RoundTripEveryTypeAndRank) {
  round_trip<float>(npy::ElementType::f32, {2, 3, 4, 5});
  round_trip<std::uint16_t>(npy::ElementType::f16, {7});
  round_trip<std::uint8_t>(npy::ElementType::boolean, {3, 1, 4});
  round_trip<std::int32_t>(npy::ElementType::i32, {2, 2});
  round_trip<std::int64_t>(npy::ElementType::i64, {1, 2, 1, 2, 1, 2});
  round_trip<float>(npy::ElementType::f32, {});      // 0-d
  round_trip<float>(npy::ElementType::f32, {3, 0});  // empty
}

// Writes a file with a hand-made header in format `major`.0.
void write_raw(const std::string& path, int major, const std::string& dict,
               std::size_t data_bytes) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  f << "\x93NUMPY" << static_cast<char>(major) << '\0';
  const std::size_t len = header.size();
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
    f.put(static_cast<char>((len >> (8 * i)) & 0xff));
  f << header << std::string(data_bytes, '\0');
}

TEST(Npy, ReadsVersions2And3AndKeyOrder) {
  TempDir dir;
  for (const int major : {1, 2, 3}) {
    SCOPED_TRACE(major);
    write_raw(dir.file("a.npy"), major, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
              24);
    const npy::Array a = npy::read(dir.file("a.npy"));
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(a.type, npy::ElementType::f32);
  }
}

TEST(Npy, ClearErrors) {
  TempDir dir;
  const auto error_of = [&](const std::string& dict, std::size_t bytes) {
    write_raw(dir.file("e.npy"), 1, dict, bytes);
    try {
      npy::read(dir.file("e.npy"));
    } catch (const npy::NpyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      error_of("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8).find("fortran_order"),
      std::string::npos);
  EXPECT_NE(error_of("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8)
                .find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(error_of("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16)
                .find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(
      error_of("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 4).find("truncated"),
      std::string::npos);
  EXPECT_NE(error_of("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12)
                .find("unexpected bytes"),
            std::string::npos);
  EXPECT_NE(error_of("{'descr': '<f4', 'shape': (2,), }", 8).find("required"), std::string::npos);
  EXPECT_NE(
      error_of("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8).find("malformed"),
      std::string::npos);
  EXPECT_NE(error_of("not a dict", 0).find("malformed"), std::string::npos);
  EXPECT_THROW(npy::read(dir.file("missing.npy")), npy::NpyError);
  std::ofstream(dir.file("text.npy")) << "hello";
  EXPECT_THROW(npy::read(dir.file("text.npy")), npy::NpyError);
}

TEST(Npy, ErrorNamesTheFile) {
  TempDir dir;
  try {
    npy::read(dir.file("missing.npy"));
    FAIL();
  } catch (const npy::NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace tileattn::cli_test
