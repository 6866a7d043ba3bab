// Timing helpers shared by bench and demo: the median of timed runs after warm-up, with progress
// on stderr when runs are long.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tileattn::tools {

struct Timing {
  double median_s = 0.0;
  double min_s = 0.0;
  int runs = 0;
};

// Runs `body` warmup + iters times and returns the median (and minimum) of the timed runs.
// Prints "label: run i/n ..." lines on stderr once a run has taken more than a second.
// Stops early once max_seconds have passed (after at least one timed run); Timing::runs says
// how many timed runs were made.
Timing time_runs(const std::string& label, int warmup, int iters, const std::function<void()>& body,
                 double max_seconds = 1e300);

// time_runs for measurements that must see the same machine state (a kernel and the memory
// ceiling it is set against): each round runs every body once, in order, and each body's
// Timing is the median (and minimum) of its timed rounds. A round counts as one run for the
// progress lines and max_seconds (which all the bodies' time spends).
std::vector<Timing> time_interleaved(const std::string& label, int warmup, int iters,
                                     const std::vector<std::function<void()>>& bodies,
                                     double max_seconds = 1e300);

double seconds_since(const std::function<void()>& body);  // wall time of one call

}  // namespace tileattn::tools
