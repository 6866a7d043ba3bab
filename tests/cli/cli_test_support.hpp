// Helpers for the CLI tests: a private temp directory, running the tileattn binary, seeded
// random inputs written as .npy, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "npy.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::cli_test {

// TILEATTN_TEST_SEED when set, else fresh; mixed with the test name so tests draw independent data.
std::uint64_t test_seed();
// "seed N (rerun with TILEATTN_TEST_SEED=M)" for SCOPED_TRACE.
std::string seed_note();

// A fresh directory removed (with its contents) at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const;  // file names, sorted

 private:
  std::filesystem::path path_;
};

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  int err_lines() const;  // number of '\n'-terminated lines on stderr
};

// Runs TILEATTN_CLI_PATH with `args`; stdout/stderr captured through files in `scratch`.
CliResult run_cli(const std::vector<std::string>& args, const std::filesystem::path& scratch);

// N(0, 1) floats.
std::vector<float> random_normal(std::mt19937_64& rng, std::int64_t count);

std::int64_t product(const std::vector<std::int64_t>& shape);
void write_f32(const std::string& path, const std::vector<std::int64_t>& shape,
               const std::vector<float>& data);
// Rounds to f16 and writes "<f2"; returns the f16 bits.
std::vector<std::uint16_t> write_f16(const std::string& path,
                                     const std::vector<std::int64_t>& shape,
                                     const std::vector<float>& data);
std::vector<float> read_f32(const std::string& path, std::vector<std::int64_t>* shape = nullptr);

// ||x - ref|| / ||ref||; equal infinities count as exact, NaN or a one-sided inf gives inf.
double rel_l2(const std::vector<float>& x, const std::vector<float>& ref);

Tensor contiguous(void* data, DType dtype, const std::vector<std::int64_t>& shape);

// A minimal JSON reader, enough to check that bench --json prints one valid object: true when
// `text` is one, with its top-level keys and their raw values (strings keep their quotes) in
// `members`.
bool parse_json_object(const std::string& text, std::map<std::string, std::string>& members);

}  // namespace tileattn::cli_test
