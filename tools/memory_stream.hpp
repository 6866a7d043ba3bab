// The memory-bandwidth ceiling that bench --decode sets attention_with_kvcache against, measured
// in the same run on the same backend:
//   CPU:  a multithreaded, vectorised read of a buffer larger than the last-level cache (the sum
//         of its floats, on the attention's thread count); credited the bytes read.
//   CUDA: a device-to-device cudaMemcpy of a buffer into a second one; credited the bytes read
//         plus the bytes written.
#pragma once

#include <cstddef>
#include <string>

#include "tensor_io.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::tools {

class MemoryStream {
 public:
  // ctx.backend == Backend::cuda: two device buffers of `bytes` on device 0, copied on
  // ctx.cuda_stream; otherwise one host buffer of `bytes`, read by `threads` threads.
  MemoryStream(const Context& ctx, std::size_t bytes, int threads);
  ~MemoryStream();
  MemoryStream(const MemoryStream&) = delete;
  MemoryStream& operator=(const MemoryStream&) = delete;

  void pass();                    // one read (CPU) or copy (CUDA), complete when it returns
  double bytes_credited() const;  // per pass: bytes read (CPU), read + written (CUDA)
  std::string describe() const;   // what a pass does, for the report
  const char* kind() const;       // "cpu_read" | "cuda_copy"

 private:
  bool cuda_ = false;
  std::size_t bytes_ = 0;
  int threads_ = 1;
  HostTensor host_;        // CPU: the buffer read
  double checksum_ = 0.0;  // the CPU sums land here (so that they are not optimised away)
  // CUDA: the stream and the buffers copied (unused in builds without CUDA).
  [[maybe_unused]] void* stream_ = nullptr;
  [[maybe_unused]] void* source_ = nullptr;
  [[maybe_unused]] void* destination_ = nullptr;
};

}  // namespace tileattn::tools
