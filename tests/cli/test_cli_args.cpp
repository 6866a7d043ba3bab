// `tileattn run` passes --scale through as typed or refuses it, and keeps --threads within
// [0, tileattn::kMaxThreads]: a refused value means a non-zero exit, one line on stderr naming
// the option, and no output file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace tileattn::cli_test {
namespace {

constexpr std::int64_t B = 1, Lq = 9, Lk = 11, H = 2, D = 8;

class CliArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    write_f32(dir_.file("q.npy"), {B, Lq, H, D}, random_normal(rng, B * Lq * H * D));
    write_f32(dir_.file("k.npy"), {B, Lk, H, D}, random_normal(rng, B * Lk * H * D));
    v_ = random_normal(rng, B * Lk * H * D);
    write_f32(dir_.file("v.npy"), {B, Lk, H, D}, v_);
    inputs_ = dir_.entries();
  }

  std::vector<std::string> args_with(const std::string& option, const std::string& value) const {
    return {"run",
            "--q",
            dir_.file("q.npy"),
            "--k",
            dir_.file("k.npy"),
            "--v",
            dir_.file("v.npy"),
            "--out",
            dir_.file("out.npy"),
            option,
            value};
  }

  // A refusal: non-zero exit, one stderr line that names `option`, nothing written.
  void expect_refused(const std::string& option, const std::string& value) {
    SCOPED_TRACE(option + " " + value + ", " + seed_note());
    const CliResult r = run_cli(args_with(option, value), dir_.path());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err_lines(), 1) << r.err;
    EXPECT_NE(r.err.find(option), std::string::npos) << r.err;
    EXPECT_EQ(dir_.entries(), inputs_) << "a refused run must write no file";
  }

  TempDir dir_;
  std::vector<float> v_;
  std::vector<std::string> inputs_;
};

// Values that parse but are not the finite, non-zero f32 the text asks for.
TEST_F(CliArgs, ScaleNotRepresentableIsRefused) {
  for (const char* value : {"1e-50", "-1e-46", "1e-400", "1e39", "-3.5e38", "1e400", "inf", "nan",
                            "-inf", "abc", "0.5x", ""})
    expect_refused("--scale", value);
}

// --scale 0 is honoured: all scores 0, each output row the mean of the v rows of its head.
TEST_F(CliArgs, ScaleZeroIsUniformAttention) {
  SCOPED_TRACE(seed_note());
  for (const char* zero : {"0", "0.0", "-0", "0e-50"}) {
    SCOPED_TRACE(zero);
    const CliResult r = run_cli(args_with("--scale", zero), dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::int64_t> shape;
    const std::vector<float> out = read_f32(dir_.file("out.npy"), &shape);
    ASSERT_EQ(shape, (std::vector<std::int64_t>{B, Lq, H, D}));
    for (std::int64_t i = 0; i < Lq; ++i)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t e = 0; e < D; ++e) {
          double mean = 0.0;
          for (std::int64_t j = 0; j < Lk; ++j)
            mean += v_[static_cast<std::size_t>((j * H + h) * D + e)];
          mean /= static_cast<double>(Lk);
          EXPECT_NEAR(out[static_cast<std::size_t>((i * H + h) * D + e)], mean, 1e-5)
              << "i " << i << " h " << h << " e " << e;
        }
  }
}

// A tiny but representable scale is used as given, not replaced by the default.
TEST_F(CliArgs, TinyScaleIsHonoured) {
  SCOPED_TRACE(seed_note());
  ASSERT_EQ(run_cli(args_with("--scale", "1e-30"), dir_.path()).exit_code, 0);
  const std::vector<float> tiny = read_f32(dir_.file("out.npy"));
  const std::vector<std::string> no_scale = {"run",
                                             "--q",
                                             dir_.file("q.npy"),
                                             "--k",
                                             dir_.file("k.npy"),
                                             "--v",
                                             dir_.file("v.npy"),
                                             "--out",
                                             dir_.file("out.npy")};
  ASSERT_EQ(run_cli(no_scale, dir_.path()).exit_code, 0);
  const std::vector<float> by_default = read_f32(dir_.file("out.npy"));
  ASSERT_EQ(tiny.size(), by_default.size());
  EXPECT_GT(rel_l2(tiny, by_default), 1e-3) << "--scale 1e-30 behaved like the default";
  for (std::int64_t i = 0; i < Lq; ++i)  // nearly uniform: row i of head 0 ~ mean of v's rows
    for (std::int64_t e = 0; e < D; ++e) {
      double mean = 0.0;
      for (std::int64_t j = 0; j < Lk; ++j) mean += v_[static_cast<std::size_t>(j * H * D + e)];
      EXPECT_NEAR(tiny[static_cast<std::size_t>(i * H * D + e)], mean / Lk, 1e-5);
    }
}

TEST_F(CliArgs, ThreadsOutOfRangeAreRefused) {
  for (const char* value : {"65536", "-1", "1025", "2147483648", "many"})
    expect_refused("--threads", value);
}

TEST_F(CliArgs, ManyThreadsWork) {
  SCOPED_TRACE(seed_note());
  const CliResult r = run_cli(args_with("--threads", "64"), dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_f32(dir_.file("out.npy")).size(), static_cast<std::size_t>(B * Lq * H * D));
}

}  // namespace
}  // namespace tileattn::cli_test
