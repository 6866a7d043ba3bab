// Bad input to `tileattn run`: a non-zero exit, exactly one line on stderr, and no OUT file
// (nor any temporary left behind).
#include <gtest/gtest.h>

#include <fstream>

#include "cli_test_support.hpp"

namespace tileattn::cli_test {
namespace {

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    write_f32(dir_.file("q.npy"), {1, 9, 2, 8}, random_normal(rng, 1 * 9 * 2 * 8));
    write_f32(dir_.file("k.npy"), {1, 11, 2, 8}, random_normal(rng, 1 * 11 * 2 * 8));
    write_f32(dir_.file("v.npy"), {1, 11, 2, 8}, random_normal(rng, 1 * 11 * 2 * 8));
    inputs_ = dir_.entries();
  }

  std::vector<std::string> base_args(const std::string& q = "q.npy", const std::string& k = "k.npy",
                                     const std::string& v = "v.npy") const {
    return {"run",        "--q",   dir_.file(q),         "--k",   dir_.file(k),        "--v",
            dir_.file(v), "--out", dir_.file("out.npy"), "--lse", dir_.file("lse.npy")};
  }

  // Runs and checks the error contract; returns stderr for message checks.
  std::string expect_failure(const std::vector<std::string>& args) {
    SCOPED_TRACE(seed_note());
    const CliResult r = run_cli(args, dir_.path());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err_lines(), 1) << r.err;
    EXPECT_FALSE(r.err.empty() || r.err.back() != '\n') << r.err;
    EXPECT_EQ(dir_.entries(), inputs_) << "a failed run must write no OUT/LSE (or temporary) file";
    return r.err;
  }

  TempDir dir_;
  std::vector<std::string> inputs_;
};

TEST_F(CliErrors, ValidInputsSucceed) {  // the fixture itself is fine
  const CliResult r = run_cli(base_args(), dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir_.file("out.npy")));
  EXPECT_TRUE(std::filesystem::exists(dir_.file("lse.npy")));
}

TEST_F(CliErrors, MissingFile) {
  const std::string err = expect_failure(base_args("no_such_file.npy"));
  EXPECT_NE(err.find("--q"), std::string::npos) << err;
}

TEST_F(CliErrors, MalformedNpyGarbage) {
  std::ofstream(dir_.file("bad.npy")) << "this is not a numpy file at all";
  inputs_ = dir_.entries();
  const std::string err = expect_failure(base_args("q.npy", "bad.npy"));
  EXPECT_NE(err.find("--k"), std::string::npos) << err;
}

TEST_F(CliErrors, MalformedNpyTruncatedData) {
  std::string bytes;
  {
    std::ifstream in(dir_.file("v.npy"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(dir_.file("short.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 10);
  inputs_ = dir_.entries();
  expect_failure(base_args("q.npy", "k.npy", "short.npy"));
}

TEST_F(CliErrors, FortranOrderRejected) {
  std::string header = "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 9, 2, 8), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(dir_.file("fortran.npy"), std::ios::binary);
  f << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xff)
    << static_cast<char>(header.size() >> 8) << header << std::string(9 * 2 * 8 * 4, '\0');
  f.close();
  inputs_ = dir_.entries();
  const std::string err = expect_failure(base_args("fortran.npy"));
  EXPECT_NE(err.find("fortran_order"), std::string::npos) << err;
}

TEST_F(CliErrors, MismatchedShapes) {
  std::mt19937_64 rng(test_seed());
  write_f32(dir_.file("k_wrong_dim.npy"), {1, 11, 2, 16}, random_normal(rng, 11 * 2 * 16));
  inputs_ = dir_.entries();
  const std::string err = expect_failure(base_args("q.npy", "k_wrong_dim.npy"));
  EXPECT_NE(err.find("'k'"), std::string::npos) << err;  // the library names the argument
}

TEST_F(CliErrors, WrongRank) {
  std::mt19937_64 rng(test_seed());
  write_f32(dir_.file("q3.npy"), {9, 2, 8}, random_normal(rng, 9 * 2 * 8));
  inputs_ = dir_.entries();
  expect_failure(base_args("q3.npy"));
}

TEST_F(CliErrors, IntegerInputRejected) {
  std::vector<std::int32_t> ints(9 * 2 * 8, 1);
  npy::write(dir_.file("qi.npy"), npy::ElementType::i32, {1, 9, 2, 8}, ints.data());
  inputs_ = dir_.entries();
  expect_failure(base_args("qi.npy"));
}

TEST_F(CliErrors, BadCausalValue) {
  auto args = base_args();
  args.insert(args.end(), {"--causal", "sideways"});
  expect_failure(args);
}

TEST_F(CliErrors, BadWindowSyntax) {
  for (const char* window : {"3", "a,b", "1,2,3", ""}) {
    SCOPED_TRACE(window);
    auto args = base_args();
    args.insert(args.end(), {"--window", window});
    expect_failure(args);
  }
}

TEST_F(CliErrors, BadWindowValue) {  // parsed, then rejected by the library
  auto args = base_args();
  args.insert(args.end(), {"--window", "-5,2"});
  expect_failure(args);
}

TEST_F(CliErrors, MaskWrongShape) {
  std::vector<std::uint8_t> mask(9 * 10, 1);
  npy::write(dir_.file("mask.npy"), npy::ElementType::boolean, {9, 10}, mask.data());
  inputs_ = dir_.entries();
  auto args = base_args();
  args.insert(args.end(), {"--mask", dir_.file("mask.npy")});
  expect_failure(args);
}

TEST_F(CliErrors, KeyLengthOutOfRange) {
  std::vector<std::int32_t> lens = {12};
  npy::write(dir_.file("lens.npy"), npy::ElementType::i32, {1}, lens.data());
  inputs_ = dir_.entries();
  auto args = base_args();
  args.insert(args.end(), {"--key-lengths", dir_.file("lens.npy")});
  expect_failure(args);
}

TEST_F(CliErrors, MissingRequiredOption) {
  expect_failure({"run", "--q", dir_.file("q.npy"), "--out", dir_.file("out.npy")});
}

TEST_F(CliErrors, OutputDirectoryMissing) {
  auto args = base_args();
  args[8] = dir_.file("no_such_dir/out.npy");
  const std::string err = expect_failure(args);
  EXPECT_NE(err.find("--out"), std::string::npos) << err;
}

TEST_F(CliErrors, UnknownOption) {
  auto args = base_args();
  args.push_back("--frobnicate");
  expect_failure(args);
}

}  // namespace
}  // namespace tileattn::cli_test
