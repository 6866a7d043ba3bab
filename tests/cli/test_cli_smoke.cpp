// The other subcommands run and exit 0 on tiny shapes; bench --json is one JSON object with the
// documented keys (docs/cli.md). No timing assertions.
#include <gtest/gtest.h>

#include <map>

#include "cli_test_support.hpp"

namespace tileattn::cli_test {
namespace {

TEST(CliSmoke, Info) {
  TempDir dir;
  const CliResult r = run_cli({"info"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tileattn"), std::string::npos);
  EXPECT_NE(r.out.find("CUDA"), std::string::npos);
}

TEST(CliSmoke, Verify) {
  TempDir dir;
  const CliResult r = run_cli({"verify", "--lq", "33", "--lk", "47", "--dim", "32"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST(CliSmoke, VerifyBf16WithCausalAndIsaCap) {
  TempDir dir;
  const CliResult r = run_cli({"verify", "--lq", "40", "--lk", "40", "--dim", "32", "--dtype",
                               "bf16", "--causal", "bottom-right", "--isa", "avx2"},
                              dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(CliSmoke, VerifyFailsOverTolerance) {  // an impossible tolerance makes it exit non-zero
  TempDir dir;
  const CliResult r =
      run_cli({"verify", "--lq", "16", "--dim", "16", "--dtype", "bf16", "--tolerance", "1e-30"},
              dir.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(CliSmoke, BenchJson) {
  TempDir dir;
  const CliResult r =
      run_cli({"bench", "--batch", "1", "--heads", "2", "--lq", "64", "--dim", "32", "--causal",
               "bottom-right", "--iters", "1", "--warmup", "0", "--json"},
              dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> members;
  ASSERT_TRUE(parse_json_object(r.out, members)) << r.out;
  for (const char* key : {"version",      "backend",     "isa",
                          "dtype",        "threads",     "batch",
                          "heads",        "kv_heads",    "lq",
                          "lk",           "dim",         "dim_v",
                          "causal",       "window_left", "window_right",
                          "softcap",      "seed",        "iters",
                          "warmup",       "flops",       "flash_median_s",
                          "flash_gflops", "dropout",     "backward_gflops",
                          "deterministic"})
    EXPECT_TRUE(members.count(key)) << "missing key " << key << " in " << r.out;
  EXPECT_EQ(members["lq"], "64");
  EXPECT_EQ(members["causal"], "\"bottom-right\"");
  EXPECT_EQ(members["flops"], "524288");  // 2*1*2*64*64*(32+32) / 2 (causal, Lq == Lk)
  EXPECT_GT(std::stod(members["flash_gflops"]), 0.0) << r.out;
  EXPECT_EQ(members["backward_gflops"], "null");  // no --backward
  // The naive baseline and the FMA peak are developer benchmarks (bench/baselines).
  EXPECT_EQ(members.count("baseline_gflops"), 0u) << r.out;
  EXPECT_EQ(members.count("peak_gflops"), 0u) << r.out;
}

TEST(CliSmoke, BenchText) {
  TempDir dir;
  const CliResult r = run_cli({"bench", "--heads", "2", "--kv-heads", "1", "--lq", "32", "--lk",
                               "48", "--dim", "16", "--iters", "1", "--warmup", "0"},
                              dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GFLOP/s"), std::string::npos) << r.out;
}

TEST(CliSmoke, VerifyBackward) {
  TempDir dir;
  for (const char* deterministic : {"", "--deterministic"}) {
    std::vector<std::string> args = {"verify",   "--backward", "--lq",      "50",         "--lk",
                                     "70",       "--dim",      "24",        "--kv-heads", "2",
                                     "--causal", "top-left",   "--dropout", "0.25"};
    if (*deterministic) args.push_back(deterministic);
    const CliResult r = run_cli(args, dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    for (const char* line : {"dq ", "dk ", "dv ", "PASS"})
      EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  }
}

TEST(CliSmoke, VerifyBackwardFailsOverTolerance) {
  TempDir dir;
  const CliResult r = run_cli({"verify", "--backward", "--lq", "16", "--dim", "16", "--dtype",
                               "f16", "--tolerance", "1e-30"},
                              dir.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(CliSmoke, BenchBackwardJson) {
  TempDir dir;
  const CliResult r = run_cli({"bench", "--backward", "--heads", "2", "--lq", "64", "--dim", "32",
                               "--iters", "1", "--warmup", "0", "--json"},
                              dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> members;
  ASSERT_TRUE(parse_json_object(r.out, members)) << r.out;
  EXPECT_EQ(members["flops"], "1.04858e+06");           // 2*1*2*64*64*(32+32)
  EXPECT_EQ(members["backward_flops"], "2.62144e+06");  // 2.5x
  EXPECT_EQ(members["deterministic"], "false");
  for (const char* key : {"backward_median_s", "backward_gflops", "backward_forward_ratio"}) {
    ASSERT_TRUE(members.count(key)) << key << " missing: " << r.out;
    EXPECT_GT(std::stod(members[key]), 0.0) << key;
  }
}

TEST(CliSmoke, BenchBackwardText) {
  TempDir dir;
  const CliResult r = run_cli({"bench", "--backward", "--deterministic", "--heads", "2", "--lq",
                               "40", "--dim", "16", "--iters", "1", "--warmup", "0"},
                              dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("backward / forward"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("deterministic"), std::string::npos) << r.out;
}

TEST(CliSmoke, DeterministicNeedsBackward) {
  TempDir dir;
  EXPECT_NE(
      run_cli({"bench", "--deterministic", "--lq", "16", "--dim", "16"}, dir.path()).exit_code, 0);
  EXPECT_NE(
      run_cli({"verify", "--deterministic", "--lq", "16", "--dim", "16"}, dir.path()).exit_code, 0);
}

TEST(CliSmoke, DemoSmallShape) {
  TempDir dir;
  const CliResult r = run_cli({"demo", "--heads", "4", "--kv-heads", "2", "--lq", "96", "--dim",
                               "32", "--check-rows", "40"},
                              dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST(CliSmoke, HelpExitsZero) {
  TempDir dir;
  EXPECT_EQ(run_cli({"--help"}, dir.path()).exit_code, 0);
  EXPECT_EQ(run_cli({"run", "--help"}, dir.path()).exit_code, 0);
}

}  // namespace
}  // namespace tileattn::cli_test
