// The KV-cache modes: bench --decode runs and reports its fields (text and JSON; no timing
// assertions), demo --decode runs and its check passes, and options that do not apply to a mode
// are refused with one line on stderr naming them.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"

namespace tileattn::cli_test {
namespace {

// A small decode shape; a small ceiling buffer so that the test is quick (the default, 1 GiB,
// is meant to be larger than the last-level cache).
std::vector<std::string> bench_decode(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "bench", "--decode", "--heads", "4", "--kv-heads", "2", "--dim",         "32",
      "--lk",  "300",      "--iters", "1", "--warmup",   "0", "--ceiling-mib", "8"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(CliDecode, BenchText) {
  TempDir dir;
  const CliResult r = run_cli(bench_decode({"--threads", "2"}), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* field :
       {"Lq=1 Lk=300", "cache: contiguous", "K+V read per call: 150.00 KiB", "attention ",
        "memory ceiling", "sum of 8.00 MiB of f32 on 2 threads", "attention / ceiling"})
    EXPECT_NE(r.out.find(field), std::string::npos) << field << " missing in\n" << r.out;
}

TEST(CliDecode, BenchPagedText) {
  TempDir dir;
  const CliResult r = run_cli(bench_decode({"--block-size", "16", "--dtype", "bf16"}), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("paged, 19 blocks of 16 rows"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("B*Lk*Hkv*(D+Dv)*2 bytes"), std::string::npos) << r.out;
}

TEST(CliDecode, BenchJson) {
  TempDir dir;
  // Speculative decoding's shape: 3 query rows, causal, split keys, a paged f16 cache.
  const CliResult r = run_cli(bench_decode({"--lq", "3", "--causal", "bottom-right", "--block-size",
                                            "32", "--num-splits", "2", "--dtype", "f16", "--json"}),
                              dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> members;
  ASSERT_TRUE(parse_json_object(r.out, members)) << r.out;
  for (const char* key : {"version",
                          "backend",
                          "isa",
                          "dtype",
                          "threads",
                          "batch",
                          "heads",
                          "kv_heads",
                          "lq",
                          "lk",
                          "dim",
                          "dim_v",
                          "causal",
                          "seed",
                          "decode",
                          "block_size",
                          "num_blocks",
                          "num_splits",
                          "iters",
                          "warmup",
                          "kv_bytes",
                          "decode_median_s",
                          "decode_gbps",
                          "ceiling",
                          "ceiling_bytes",
                          "ceiling_median_s",
                          "ceiling_gbps",
                          "decode_ceiling_ratio"})
    EXPECT_TRUE(members.count(key)) << "missing key " << key << " in " << r.out;
  EXPECT_EQ(members["decode"], "true");
  EXPECT_EQ(members["lq"], "3");
  EXPECT_EQ(members["lk"], "300");
  EXPECT_EQ(members["block_size"], "32");
  EXPECT_EQ(members["num_blocks"], "10");  // ceil(300 / 32)
  EXPECT_EQ(members["num_splits"], "2");
  EXPECT_EQ(members["kv_bytes"], "76800");  // 1 * 300 * 2 * (32 + 32) * 2 bytes
  EXPECT_EQ(members["ceiling"], "\"cpu_read\"");
  EXPECT_EQ(members["ceiling_bytes"], "8.38861e+06");  // 8 MiB read
  for (const char* key : {"decode_gbps", "ceiling_gbps", "decode_ceiling_ratio"})
    EXPECT_GT(std::stod(members[key]), 0.0) << key << " in " << r.out;
}

TEST(CliDecode, Demo) {
  TempDir dir;
  for (const char* dtype : {"f32", "bf16"}) {
    const CliResult r = run_cli(
        {"demo", "--decode", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--prompt-lengths",
         "5,20,33", "--steps", "4", "--block-size", "8", "--dtype", dtype},
        dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    for (const char* field : {"1. Prefill  3 prompts (5, 20, 33 tokens)", "step   4",
                              "lengths 9 24 37", "max abs error", "PASS"})
      EXPECT_NE(r.out.find(field), std::string::npos) << field << " missing in\n" << r.out;
  }
}

TEST(CliDecode, DemoDefaults) {
  TempDir dir;
  const CliResult r = run_cli({"demo", "--decode"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("step  16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

// A refusal: non-zero exit, one line on stderr that contains `names`.
void expect_refused(const std::vector<std::string>& args, const std::string& names) {
  TempDir dir;
  std::string command;
  for (const std::string& a : args) command += " " + a;
  SCOPED_TRACE("tileattn" + command);
  const CliResult r = run_cli(args, dir.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find(names), std::string::npos) << r.err;
}

TEST(CliDecode, BenchArgumentErrors) {
  // Decode options without --decode, and the forward benchmark's options with it.
  expect_refused({"bench", "--block-size", "16"}, "--block-size needs --decode");
  expect_refused({"bench", "--num-splits", "2"}, "--num-splits needs --decode");
  expect_refused({"bench", "--ceiling-mib", "8"}, "--ceiling-mib needs --decode");
  for (const char* option : {"--backward", "--f32-via-bf16"})
    expect_refused(bench_decode({option}), std::string(option) + " does not apply");
  expect_refused(bench_decode({"--varlen", "1:4"}), "--varlen does not apply");
  expect_refused(bench_decode({"--dropout", "0.1"}), "--dropout does not apply");
  expect_refused(bench_decode({"--causal", "top-left"}), "--causal");
  // Values out of range: the tool's checks, then the library's (which name its argument).
  expect_refused(bench_decode({"--block-size", "-1"}), "--block-size");
  expect_refused(bench_decode({"--num-splits", "-1"}), "--num-splits");
  expect_refused(bench_decode({"--ceiling-mib", "0"}), "--ceiling-mib");
  expect_refused({"bench", "--decode", "--lk", "0"}, "--lk");
  expect_refused(bench_decode({"--num-splits", "100000"}), "num_splits");
  expect_refused(
      {"bench", "--decode", "--heads", "3", "--kv-heads", "2", "--lk", "16", "--ceiling-mib", "1"},
      "kv heads");
  expect_refused(bench_decode({"--backend", "nope"}), "--backend");
}

TEST(CliDecode, DemoArgumentErrors) {
  expect_refused({"demo", "--steps", "3"}, "--steps needs --decode");
  expect_refused({"demo", "--prompt-lengths", "3,4"}, "--prompt-lengths needs --decode");
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
           {"--lq", "4"}, {"--batch", "2"}, {"--causal", "bottom-right"}, {"--check-rows", "4"}})
    expect_refused({"demo", "--decode", option, value}, option + " does not apply");
  expect_refused({"demo", "--decode", "--prompt-lengths", "5,0"}, "--prompt-lengths");
  expect_refused({"demo", "--decode", "--steps", "0"}, "--steps");
  expect_refused({"demo", "--decode", "--block-size", "0"}, "--block-size");
  expect_refused({"demo", "--decode", "--heads", "4", "--kv-heads", "3"}, "kv heads");
}

}  // namespace
}  // namespace tileattn::cli_test
