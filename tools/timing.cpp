#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace tileattn::tools {
namespace {

Timing summarise(std::vector<double> times) {
  Timing timing;
  timing.runs = static_cast<int>(times.size());
  if (times.empty()) return timing;
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  timing.median_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  timing.min_s = times.front();
  return timing;
}

}  // namespace

double seconds_since(const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Timing time_runs(const std::string& label, int warmup, int iters, const std::function<void()>& body,
                 double max_seconds) {
  return time_interleaved(label, warmup, iters, {body}, max_seconds).front();
}

std::vector<Timing> time_interleaved(const std::string& label, int warmup, int iters,
                                     const std::vector<std::function<void()>>& bodies,
                                     double max_seconds) {
  constexpr double kLongRun = 1.0;  // seconds; longer runs report progress
  if (bodies.empty()) return {};
  std::vector<std::vector<double>> times(bodies.size());
  bool verbose = false;
  double spent = 0.0;
  for (int run = 0; run < warmup + iters; ++run) {
    if (spent > max_seconds) {
      if (!times.front().empty()) {
        std::fprintf(stderr, "%s: stopping after %zu timed run(s): --max-seconds %.0f spent\n",
                     label.c_str(), times.front().size(), max_seconds);
        break;
      }
      run = std::max(run, warmup);  // skip the remaining warm-ups
    }
    const bool timed = run >= warmup;
    if (verbose)
      std::fprintf(stderr, "%s: %s %d/%d ...\n", label.c_str(), timed ? "run" : "warm-up",
                   timed ? run - warmup + 1 : run + 1, timed ? iters : warmup);
    double round = 0.0;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      const double t = seconds_since(bodies[i]);
      round += t;
      if (timed) times[i].push_back(t);
    }
    spent += round;
    if (!verbose && round > kLongRun) {
      verbose = true;
      std::fprintf(stderr, "%s: one run took %.2f s\n", label.c_str(), round);
    }
  }
  std::vector<Timing> timings;
  timings.reserve(times.size());
  for (std::vector<double>& t : times) timings.push_back(summarise(std::move(t)));
  return timings;
}

}  // namespace tileattn::tools
