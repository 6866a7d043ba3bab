// The .npy reader/writer (tools/npy.cpp): round trips, header versions, and a clean NpyError
// naming the file for every kind of lying or malformed file, found before anything is allocated.
#include <gtest/gtest.h>
#include <sys/stat.h>

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
  round_trip<float>(npy::ElementType::f32, std::vector<std::int64_t>(npy::kMaxRank, 1));
  // Beside a zero dimension, others may be as large as numpy allows (2^63 bytes without the 0).
  round_trip<float>(npy::ElementType::f32, {0, std::int64_t{1} << 60});
}

// Large data (1 MiB and more: a populated anonymous map) and small data alike: 64-byte aligned,
// read in full, deep copies.
TEST(Npy, LargeAndSmallBuffers) {
  TempDir dir;
  for (const std::int64_t rows : {1, 512, 513}) {
    SCOPED_TRACE(rows);
    const std::vector<std::int64_t> shape = {rows, 1024};
    std::vector<float> data(static_cast<std::size_t>(rows) * 1024);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    npy::write(dir.file("big.npy"), npy::ElementType::f32, shape, data.data());
    npy::Array a = npy::read(dir.file("big.npy"));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.bytes.data()) % 64, 0u);
    ASSERT_EQ(a.bytes.size(), data.size() * sizeof(float));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), a.as<float>()));
    npy::Buffer copy = a.bytes;
    EXPECT_TRUE(copy == a.bytes);
    copy.data()[copy.size() - 1] = std::byte{0xff};
    EXPECT_FALSE(copy == a.bytes);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), a.as<float>()));
  }
}

TEST(Npy, DataAtAnUnalignedOffset) {
  TempDir dir;
  // A valid header that numpy would have padded further: the data starts at byte 71.
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (262144,), }\n";
  std::string file = "\x93NUMPY\x01";
  file.push_back('\0');
  file.push_back(static_cast<char>(header.size()));
  file.push_back('\0');
  file += header;
  ASSERT_NE(file.size() % 64, 0u);
  std::vector<float> data(262144);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  file.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  std::ofstream(dir.file("odd.npy"), std::ios::binary) << file;
  const npy::Array a = npy::read(dir.file("odd.npy"));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.bytes.data()) % 64, 0u);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), a.as<float>()));
}

TEST(Npy, WriterRefusesWhatTheReaderWouldRefuse) {
  TempDir dir;
  const float x = 0.0f;
  EXPECT_THROW(npy::write(dir.file("a.npy"), npy::ElementType::f32,
                          std::vector<std::int64_t>(npy::kMaxRank + 1, 1), &x),
               npy::NpyError);
  EXPECT_THROW(npy::write(dir.file("a.npy"), npy::ElementType::f32, {-1}, &x), npy::NpyError);
  EXPECT_THROW(npy::write(dir.file("a.npy"), npy::ElementType::f32,
                          {std::int64_t{1} << 40, std::int64_t{1} << 40}, &x),
               npy::NpyError);
  EXPECT_TRUE(dir.entries().empty());
}

// A .npy file with the given header text stored verbatim (no padding or newline added).
std::string npy_bytes(const std::string& header, std::size_t data_bytes, int major = 1) {
  std::string f = "\x93NUMPY";
  f.push_back(static_cast<char>(major));
  f.push_back('\0');
  const std::size_t len = header.size();
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
    f.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  return f + header + std::string(data_bytes, '\0');
}

// The dictionary padded with spaces and a newline as numpy does.
std::string padded(const std::string& dict, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  return header + '\n';
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// What reading the file gives: "ok", the NpyError's text, or "not an NpyError: ..." for anything
// else (a std::bad_alloc among them), which every test below counts as a failure.
std::string outcome_of_read(const std::string& path) {
  try {
    npy::read(path);
    return "ok";
  } catch (const npy::NpyError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an NpyError: ") + e.what();
  }
}

std::string outcome_of_parse(const std::string& bytes, const std::string& name) {
  try {
    npy::parse(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), name);
    return "ok";
  } catch (const npy::NpyError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an NpyError: ") + e.what();
  }
}

// Reads `bytes` from a file and from memory: both must fail with an NpyError that names the file
// (resp. the name given) and contains `expected`.
void expect_refused(const std::string& bytes, const std::string& expected) {
  SCOPED_TRACE("expected: " + expected);
  TempDir dir;
  const std::string path = dir.file("lying.npy");
  write_file(path, bytes);
  const std::string from_file = outcome_of_read(path);
  EXPECT_EQ(from_file.rfind(path + ": ", 0), 0u) << from_file;
  EXPECT_NE(from_file.find(expected), std::string::npos) << from_file;
  const std::string from_memory = outcome_of_parse(bytes, "in-memory.npy");
  EXPECT_EQ(from_memory.rfind("in-memory.npy: ", 0), 0u) << from_memory;
  EXPECT_NE(from_memory.find(expected), std::string::npos) << from_memory;
}

void expect_accepted(const std::string& bytes, const std::vector<std::int64_t>& shape) {
  TempDir dir;
  write_file(dir.file("a.npy"), bytes);
  try {
    EXPECT_EQ(npy::read(dir.file("a.npy")).shape, shape);
    EXPECT_EQ(npy::parse(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "m").shape,
              shape);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

std::string f32_dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

TEST(Npy, ReadsVersions2And3AndKeyOrder) {
  for (const int major : {1, 2, 3}) {
    SCOPED_TRACE(major);
    expect_accepted(
        npy_bytes(padded("{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", major), 24,
                  major),
        {2, 3});
  }
}

TEST(Npy, AcceptsWhatPythonWritesForTheDictionary) {
  expect_accepted(npy_bytes(padded("{'descr':'<f4','fortran_order':False,'shape':(2,)}"), 8), {2});
  expect_accepted(
      npy_bytes(padded("{ \"shape\" : ( 2 , 3 , ) , 'descr' : \"<f4\" , 'fortran_order' : False }"),
                24),
      {2, 3});
  expect_accepted(npy_bytes(padded(f32_dict("()")), 4), {});
  expect_accepted(npy_bytes(padded(f32_dict("(0,)")), 0), {0});
  expect_accepted(npy_bytes(f32_dict("(1,)") + "\n", 4), {1});  // not padded to 64: still valid
}

TEST(Npy, DataSizeMustMatchTheFile) {
  // The case that used to allocate and zero 1 GiB before noticing.
  expect_refused(npy_bytes(padded(f32_dict("(16384, 16384)")), 128),
                 "claims 1073741824 bytes of data but the file holds 128");
  expect_refused(npy_bytes(padded(f32_dict("(2,)")), 12),
                 "claims 8 bytes of data but the file holds 12");
  expect_refused(npy_bytes(padded(f32_dict("(2,)")), 4),
                 "claims 8 bytes of data but the file holds 4");
  // Claims beyond any allocation: these used to end in std::bad_alloc.
  expect_refused(npy_bytes(padded(f32_dict("(1099511627776, 1024)")), 16), "claims");
  expect_refused(npy_bytes(padded(f32_dict("(4294967296, 4294967296, 4)")), 16),
                 "more than 2^63 bytes");
  expect_refused(npy_bytes(padded(f32_dict("(9223372036854775807,)")), 16), "more than 2^63 bytes");
  expect_refused(npy_bytes(padded(f32_dict("(3037000500, 3037000500)")), 16),
                 "more than 2^63 bytes");
  // numpy refuses these too: the non-zero dimensions overflow although the product is 0.
  expect_refused(npy_bytes(padded(f32_dict("(0, 4611686018427387904)")), 0),
                 "more than 2^63 bytes");
  expect_refused(npy_bytes(padded(f32_dict("(9223372036854775807, 2, 0)")), 0),
                 "more than 2^63 bytes");
}

TEST(Npy, ShapeMustBeATupleOfNonNegativeIntegers) {
  expect_refused(npy_bytes(padded(f32_dict("(99999999999999999999,)")), 4), "larger than 2^63 - 1");
  expect_refused(npy_bytes(padded(f32_dict("(-1, 2)")), 4), "negative shape dimension");
  expect_refused(npy_bytes(padded(f32_dict("(2.0,)")), 8), "non-negative decimal integers");
  expect_refused(npy_bytes(padded(f32_dict("(2e3,)")), 8), "non-negative decimal integers");
  expect_refused(npy_bytes(padded(f32_dict("(0x10,)")), 64), "non-negative decimal integers");
  expect_refused(npy_bytes(padded(f32_dict("((2,), 3)")), 24), "non-negative decimal integers");
  expect_refused(npy_bytes(padded(f32_dict("[2, 3]")), 24), "expected '(' to open the shape");
  expect_refused(npy_bytes(padded(f32_dict("(3)")), 12), "(n,)");
  expect_refused(npy_bytes(padded(f32_dict("(,)")), 0), "non-negative decimal integers");
  expect_refused(npy_bytes(padded(f32_dict("(2,,)")), 8), "non-negative decimal integers");
  expect_refused(npy_bytes(padded(f32_dict("(02,)")), 8), "leading zero");
  expect_refused(npy_bytes(padded(f32_dict("(2 3)")), 24), "expected ','");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}"), 24),
                 "expected ','");
  std::string rank65 = "(";
  for (std::size_t i = 0; i <= npy::kMaxRank; ++i) rank65 += "1, ";
  expect_refused(npy_bytes(padded(f32_dict(rank65 + ")")), 4), "more than 64 dimensions");
}

TEST(Npy, KeysMustBeExactlyDescrFortranOrderShape) {
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
                                  "'extra': 1}"),
                           8),
                 "unexpected key 'extra'");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'shape': (2,), }"), 8),
                 "missing key 'fortran_order'");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': False}"), 8),
                 "missing key 'shape'");
  expect_refused(npy_bytes(padded("{}"), 8), "missing key 'descr'");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                                  "'shape': (2,)}"),
                           8),
                 "key 'descr' appears twice");
  expect_refused(npy_bytes(padded("{'shape': (2,), 'fortran_order': False, 'shape': (2,), "
                                  "'descr': '<f4'}"),
                           8),
                 "key 'shape' appears twice");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }"), 8),
                 "fortran_order: True is not supported");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }"), 8),
                 "True or False");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,), }"), 8),
                 "True or False");
  expect_refused(npy_bytes(padded("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"), 8),
                 "unsupported dtype '>f4'");
  expect_refused(npy_bytes(padded("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }"), 16),
                 "unsupported dtype '<f8'");
  expect_refused(
      npy_bytes(padded("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), 8),
      "expected a quoted string");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2,),, }"), 8),
                 "expected a quoted string");
  expect_refused(npy_bytes(padded("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}"), 8),
                 "expected ',' between entries");
}

TEST(Npy, HeaderTextIsWhatNumpyWrites) {
  expect_refused(npy_bytes(padded("{'descr: '<f4', 'fortran_order': False, 'shape': (2,), }"), 8),
                 "unexpected key 'descr: '");
  expect_refused(npy_bytes(padded("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }"), 8),
                 "unsupported dtype");
  expect_refused(npy_bytes(padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'a"), 8),
                 "unterminated string");
  expect_refused(
      npy_bytes(padded("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}"), 8),
      "escape sequences");
  // Non-printable bytes are refused and shown escaped.
  expect_refused(
      npy_bytes(padded("{'descr': '<f4\x01', 'fortran_order': False, 'shape': (2,)}"), 8),
      "byte 14 is '\\x01', not printable ASCII");
  expect_refused(
      npy_bytes(padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'k\x93': 1}"), 8),
      "'\\x93'");
  expect_refused(npy_bytes(padded("{'descr':\t'<f4', 'fortran_order': False, 'shape': (2,)}"), 8),
                 "'\\x09'");
  expect_refused(npy_bytes(f32_dict("(2,)") + "   ", 8), "must end with a newline");
  expect_refused(npy_bytes(f32_dict("(2,)") + " \n\n", 8), "'\\x0a', not printable ASCII");
  expect_refused(npy_bytes(padded(" " + f32_dict("(2,)")), 8), "expected '{'");
  expect_refused(npy_bytes(padded(f32_dict("(2,)") + " x"), 8), "unexpected text after");
  expect_refused(npy_bytes(padded("not a dict"), 0), "expected '{'");
  expect_refused(npy_bytes("\n", 0), "expected '{'");
  expect_refused(npy_bytes("", 0), "must end with a newline");
}

TEST(Npy, PreambleIsChecked) {
  const std::string good = npy_bytes(padded(f32_dict("(2,)")), 8);
  expect_refused("", "truncated");
  expect_refused(good.substr(0, 3), "truncated");  // a prefix of the magic string
  expect_refused(good.substr(0, 7), "truncated");
  expect_refused(good.substr(0, 9), "truncated");
  expect_refused("hello, world", "not a .npy file: it starts with 'hello, w'");
  expect_refused(std::string("\x93NUMPZ\x01\x00", 8),
                 "it starts with '\\x93NUMPZ\\x01\\x00', not '\\x93NUMPY'");
  for (const char* version : {"\x04\x00", "\x01\x01", "\x00\x00"}) {
    std::string v = good;
    v.replace(6, 2, version, 2);
    expect_refused(v, "unsupported .npy format version");
  }
  // Header lengths beyond the file and beyond the cap, read from a short file.
  std::string beyond = good;
  beyond[8] = static_cast<char>(0xe8);  // 1000
  beyond[9] = 0x03;
  expect_refused(beyond, "header length 1000 runs past the end of the file (136 bytes)");
  const std::string huge_v2 =
      std::string("\x93NUMPY\x02\x00", 8) + std::string("\x00\x00\x00\x40", 4);
  expect_refused(huge_v2 + "{}", "header length 1073741824 exceeds the limit of 10000 bytes");
  expect_refused(npy_bytes(padded(f32_dict("(2,)") + std::string(10000, ' '), 2), 8, 2),
                 "exceeds the limit of 10000 bytes");
}

TEST(Npy, OnlyRegularFilesAreRead) {
  TempDir dir;
  EXPECT_NE(outcome_of_read(dir.path().string()).find("cannot read a directory"),
            std::string::npos);
  ASSERT_EQ(::mkfifo(dir.file("fifo.npy").c_str(), 0600), 0);
  // Must not wait for a writer.
  EXPECT_NE(outcome_of_read(dir.file("fifo.npy")).find("cannot read a pipe"), std::string::npos);
  EXPECT_NE(outcome_of_read("/dev/zero").find("/dev/zero: cannot read a character device"),
            std::string::npos);
  EXPECT_NE(outcome_of_read(dir.file("missing.npy")).find("missing.npy: cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace tileattn::cli_test
