#include "memory_stream.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#if defined(TILEATTN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

#include "options.hpp"

namespace tileattn::tools {
namespace {

constexpr std::int64_t kChunk = 16384;  // floats a thread sums at a time (64 KiB)
constexpr std::int64_t kLanes = 64;     // independent partial sums (several vector registers)

// The sum of one chunk, kLanes partial sums wide so that the adds form no dependency chain. A
// clone per vector width, picked at load time: wider loads keep more cache lines in flight per
// core (SSE2 reached 24 GB/s on the 2-core development VM where AVX-512 reached 31).
__attribute__((target_clones("avx512f", "avx2", "default"))) float chunk_sum(const float* chunk) {
  float lanes[kLanes] = {};
  for (std::int64_t i = 0; i < kChunk; i += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] += chunk[i + j];  // independent lanes
  float sum = 0.0f;
  for (const float lane : lanes) sum += lane;
  return sum;
}

#if defined(TILEATTN_WITH_CUDA)
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw ToolError(std::string("--backend cuda: ") + what + ": " + cudaGetErrorString(status));
}
#endif

}  // namespace

MemoryStream::MemoryStream(const Context& ctx, std::size_t bytes, int threads)
    : cuda_(ctx.backend == Backend::cuda),
      bytes_(bytes / (kChunk * sizeof(float)) * (kChunk * sizeof(float))),
      threads_(threads > 0 ? threads : 1),
      stream_(ctx.cuda_stream) {
  if (bytes_ == 0) throw ToolError("the memory ceiling's buffer must hold at least 64 KiB");
  if (cuda_) {
#if defined(TILEATTN_WITH_CUDA)
    check(cudaMalloc(&source_, bytes_), "cudaMalloc");
    check(cudaMalloc(&destination_, bytes_), "cudaMalloc");
    check(cudaMemset(source_, 0, bytes_), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaMemset");
#else
    throw ToolError(
        "--backend cuda: this build has no CUDA backend (configure with "
        "-DTILEATTN_CUDA=ON)");
#endif
    return;
  }
  const auto n = static_cast<std::int64_t>(bytes_ / sizeof(float));
  host_ = HostTensor(DType::f32, {n}, HostTensor::Uninitialized{});
  float* x = host_.data_as<float>();
  // Written by the threads that will read it (first touch: their NUMA nodes' memory).
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (std::int64_t c = 0; c < n / kChunk; ++c)
    for (std::int64_t i = 0; i < kChunk; ++i) x[c * kChunk + i] = 1.0f;
}

MemoryStream::~MemoryStream() {
#if defined(TILEATTN_WITH_CUDA)
  if (source_ != nullptr) cudaFree(source_);
  if (destination_ != nullptr) cudaFree(destination_);
#endif
}

void MemoryStream::pass() {
  if (cuda_) {
#if defined(TILEATTN_WITH_CUDA)
    const auto stream = static_cast<cudaStream_t>(stream_);
    check(cudaMemcpyAsync(destination_, source_, bytes_, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaMemcpyAsync");
#endif
    return;
  }
  const float* x = host_.data_as<float>();
  const std::int64_t chunks = host_.numel() / kChunk;
  double total = 0.0;
  // Each thread reads one contiguous range (static schedule): the loads set the pace.
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(+ : total)
  for (std::int64_t c = 0; c < chunks; ++c) total += chunk_sum(x + c * kChunk);
  checksum_ += total;
}

double MemoryStream::bytes_credited() const {
  return cuda_ ? 2.0 * static_cast<double>(bytes_) : static_cast<double>(bytes_);
}

std::string MemoryStream::describe() const {
  char text[160];
  if (cuda_)
    std::snprintf(text, sizeof text,
                  "device-to-device cudaMemcpy of %s: (read + write bytes) / time",
                  format_bytes(static_cast<double>(bytes_)).c_str());
  else
    std::snprintf(text, sizeof text, "sum of %s of f32 on %d thread%s: bytes read / time",
                  format_bytes(static_cast<double>(bytes_)).c_str(), threads_,
                  threads_ == 1 ? "" : "s");
  return text;
}

const char* MemoryStream::kind() const {
  return cuda_ ? "cuda_copy" : "cpu_read";
}

}  // namespace tileattn::tools
