// The naive three-stage attention on OpenBLAS sgemm, the baseline the CPU bars measure the flash
// kernel against (bench_baselines.cpp). Per (batch, query head): S = scale·Q·Kᵀ into a full
// Lq×Lk f32 buffer (sgemm), softcap/causal/window/key-length masking and a row softmax on it,
// then O = P·V (sgemm). It is "naive" in storing the score matrix, not in its parts: sgemm is
// OpenBLAS's and the softmax loop is vectorised, so the ratio to it measures what tiling and
// fusion buy. It reads the library's validated parameters and visible-key ranges (src/api), so
// its masking is the library's by construction.
#pragma once

#include <cstdint>
#include <vector>

#include "common/params.hpp"
#include "tensor_io.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::bench {

// How the baseline uses the cores.
enum class BaselineThreading : std::uint8_t {
  heads,  // OpenMP over (batch, head) pairs, OpenBLAS single-threaded; one score matrix per thread
  blas,   // one (batch, head) at a time, OpenBLAS threads inside each sgemm, OpenMP over softmax
          // rows
};
const char* to_string(BaselineThreading t) noexcept;

class NaiveBaseline {
 public:
  // Prepares the baseline for `buffers` and the options in `args` (tensors ignored). Inputs of
  // f16/bf16 storage are copied to f32 (sgemm has no 16-bit type). Masks and ALiBi are not
  // supported (bench does not generate them).
  NaiveBaseline(const tools::AttentionBuffers& buffers, const AttentionArgs& args,
                BaselineThreading threading, int threads);

  // Bytes the baseline allocates for this problem (score matrices, out, f32 input copies).
  static double bytes_needed(std::int64_t batch, std::int64_t heads, std::int64_t len_q,
                             std::int64_t len_k, std::int64_t dim, std::int64_t dim_v,
                             std::int64_t kv_heads, DType dtype, BaselineThreading threading,
                             int threads);

  void run();  // writes out() (f32, same shape as the buffers' out)
  const tools::HostTensor& out() const noexcept { return out_; }
  // Bytes of the score matrices it keeps (one Lq×Lk per thread in `heads` mode).
  std::size_t score_bytes() const noexcept { return scores_.size() * sizeof(float); }

 private:
  void head(std::int64_t b, std::int64_t h, float* scores, bool parallel_rows);

  tools::HostTensor q32_, k32_, v32_, out_;
  AttentionArgs args_;
  detail::AttnParams params_;  // validated args_
  BaselineThreading threading_;
  int threads_;
  std::vector<float> scores_;
};

}  // namespace tileattn::bench
