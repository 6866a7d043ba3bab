#include "bench_report.hpp"

#include <cstdio>
#include <sstream>

namespace tileattn::tools {

double gflops(double flops, double seconds) {
  return seconds > 0.0 ? flops / seconds / 1e9 : 0.0;
}

std::string json_number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

std::string problem_json_members(const Problem& p, const std::string& isa, int threads) {
  std::int64_t window_left = -1, window_right = -1;
  parse_window(p.window, window_left, window_right);
  std::ostringstream os;
  os << "\"version\": \"" << build_info().version << "\", \"backend\": \"" << p.backend
     << "\", \"isa\": \"" << isa << "\", \"dtype\": \"" << p.dtype << "\", \"out_dtype\": \""
     << p.out_dtype << "\", \"threads\": " << threads << ", \"batch\": " << p.batch
     << ", \"heads\": " << p.heads << ", \"kv_heads\": " << p.kv_heads << ", \"lq\": " << p.len_q
     << ", \"lk\": " << p.len_k << ", \"dim\": " << p.dim << ", \"dim_v\": " << p.dim_v
     << ", \"causal\": \"" << p.causal << "\", \"window_left\": " << window_left
     << ", \"window_right\": " << window_right << ", \"softcap\": " << json_number(p.softcap)
     << ", \"dropout\": " << json_number(p.dropout) << ", \"seed\": " << p.seed << ", \"varlen\": ";
  if (p.is_varlen())
    os << "\"" << p.varlen << "\", \"sequences\": " << p.sequence_lengths.size();
  else
    os << "null, \"sequences\": null";
  return os.str();
}

}  // namespace tileattn::tools
