// Pieces of a benchmark report shared by `tileattn bench` and the baseline benchmark of
// bench/baselines: rates, numbers and the problem's description as JSON members.
#pragma once

#include <string>

#include "options.hpp"

namespace tileattn::tools {

// GFLOP/s of `flops` in `seconds` (0 when no time was measured).
double gflops(double flops, double seconds);

// A JSON number with 6 significant digits.
std::string json_number(double x);

// The problem's members, comma-separated without braces: "version", "backend", "isa", "dtype",
// "threads", the shape ("batch" ... "dim_v"), "causal", "window_left", "window_right",
// "softcap", "dropout" and "seed". `isa` is the CPU level used ("none" off the CPU).
std::string problem_json_members(const Problem& p, const std::string& isa, int threads);

}  // namespace tileattn::tools
