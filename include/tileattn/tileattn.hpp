// tileattn: attention operators for CPUs and NVIDIA GPUs.
// Umbrella header: everything a user needs is declared here.
//
// out = softmax(scale * Q K^T + masks) V, computed the flash way: no Lq x Lk score matrix is ever
// stored (except by the reference backend, which is the oracle). docs/semantics.md is the
// normative description of every option; the comments below summarise it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>

namespace tileattn {

// Every invalid argument and every backend failure is reported as tileattn::Error. The message
// names the argument and says what was expected. When attention_forward throws, nothing has been
// written to the outputs.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType : std::uint8_t {
  f32,
  f16,
  bf16,
  boolean,  // one byte per element, 0 = false, anything else = true
  i32,
  i64,
};

enum class Device : std::uint8_t { cpu, cuda };

const char* to_string(DType dtype) noexcept;
std::size_t size_of(DType dtype) noexcept;

// A non-owning view of a strided tensor of rank 1..4. Strides are in elements, not bytes.
// An absent optional argument is `Tensor{}` (rank 0, no data); a shape without data is an error.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int device_index = 0;
  int rank = 0;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t stride[4] = {0, 0, 0, 0};

  bool present() const noexcept { return data != nullptr; }
};

// Contiguous (row-major) view helpers. make_tensor({B, L, H, D}) gives a BSHD tensor.
Tensor make_tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                   Device device = Device::cpu, int device_index = 0);
Tensor make_tensor(const void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                   Device device = Device::cpu, int device_index = 0);
// The same storage seen as [B, H, L, D] memory, exposed with the logical [B, L, H, D] shape that
// AttentionArgs expects (a zero-copy permutation of the strides).
Tensor bhsd_as_bshd(Tensor bhsd);

// How query row i lines up with key column j for causal masking, windows and ALiBi.
//   bottom_right: query i sits at key position i + (Lk - Lq)   (FlashAttention >= 2.1, FlashInfer)
//   top_left:     query i sits at key position i               (PyTorch is_causal)
// Lk is the valid key length of the batch entry (key_lengths[b] when given).
enum class Alignment : std::uint8_t { bottom_right, top_left };

struct AttentionArgs {
  // Required. Logical shapes (any element strides; the last dimension must be contiguous):
  //   q   [B, Lq, Hq,  D]    f32 | f16 | bf16
  //   k   [B, Lk, Hkv, D]    same dtype as q
  //   v   [B, Lk, Hkv, Dv]   same dtype as q
  //   out [B, Lq, Hq,  Dv]   f32 | f16 | bf16, must not overlap any input
  // Hq % Hkv == 0 (GQA/MQA: query head h reads kv head h / (Hq / Hkv)). 1 <= D, Dv <= 256.
  Tensor q, k, v, out;

  // Optional output: natural-log softmax denominator, f32 [B, Hq, Lq]; -inf for a fully masked row.
  Tensor lse;

  // Multiplier of q.k; not given (the default) means 1/sqrt(D). A given value is used as it is
  // (0 included: every visible key weighs the same); it must be finite.
  std::optional<float> scale;

  // Causal masking: key j is visible to query i only if j <= pos(i) (see Alignment).
  bool causal = false;
  Alignment alignment = Alignment::bottom_right;

  // Sliding window: key j is visible only if pos(i) - window_left <= j <= pos(i) + window_right.
  // -1 means unbounded on that side. Causal is the window (.., 0); both may be combined.
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;

  // Optional mask, broadcastable to [B, Hq, Lq, Lk] (rank 2..4, numpy right-aligned broadcasting:
  // a dimension of size 1 or a stride of 0 repeats). dtype boolean: true = attend. dtype f32:
  // added to the scores (use -inf to mask).
  Tensor mask;

  // Optional valid key lengths, i32 or i64 [B]: keys j >= key_lengths[b] are masked, and Lk in the
  // alignment and ALiBi formulas is key_lengths[b]. Each value must be in [0, Lk].
  Tensor key_lengths;

  // Softcap c > 0: s = c * tanh(s / c) applied to the scaled scores. 0 disables.
  float softcap = 0.0f;

  // Optional ALiBi slopes, f32 [Hq] or [B, Hq]: adds -slope * |pos(i) - j| (bottom-right pos)
  // to the scores.
  Tensor alibi_slopes;

  // Dropout on the probabilities, 0 <= dropout_p < 1 (0 disables): element (b, h, i, j) is kept
  // or dropped by a Philox4x32-10 counter-based generator keyed by (dropout_seed,
  // dropout_offset, b, h, i, j), the same on every backend; kept probabilities are scaled by
  // 1 / (1 - dropout_p). lse is not affected. docs/semantics.md gives the exact mapping; calls
  // that should draw independent masks advance dropout_offset by at least B * Hq.
  float dropout_p = 0.0f;
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_offset = 0;
};

// The backward pass: the forward's arguments and options (every option must be the one the
// forward used, dropout seed and offset included), with out and lse as inputs, plus:
//   dout [B, Lq, Hq, Dv]   gradient of the loss w.r.t. out; f32 | f16 | bf16
//   dq   [B, Lq, Hq, D]    outputs: gradients w.r.t. q, k, v; f32 | f16 | bf16 each, the shapes
//   dk   [B, Lk, Hkv, D]   of q, k and v, non-overlapping with every input and with each other.
//   dv   [B, Lk, Hkv, Dv]  GQA/MQA: dk and dv sum over the query heads that share a kv head.
// lse (f32 [B, Hq, Lq], the forward's output) is required. Fully masked rows contribute nothing.
struct AttentionBackwardArgs : AttentionArgs {
  Tensor dout;
  Tensor dq, dk, dv;
  // Bitwise-identical gradients from run to run (CPU: also for any thread count). dq then takes
  // its key blocks' contributions in a fixed order, so threads (CPU) or CTAs (CUDA) sometimes
  // wait for each other (costs in docs/semantics.md); without it dk and dv are still
  // deterministic but dq's summation order follows the schedule.
  bool deterministic = false;
};

enum class Backend : std::uint8_t {
  automatic,  // CUDA for device tensors, else the CPU flash kernel
  cpu,        // the CPU flash kernel (SIMD + OpenMP)
  reference,  // the double-precision three-stage oracle (stores the score matrix; slow)
  cuda,       // the CUDA flash kernel
};

// CPU instruction-set levels, best first. The CPU backend picks the best one the machine supports
// unless Context::cpu_isa caps it (used by tests to exercise every path).
//   amx_bf16:    Intel AMX tiles for bf16 storage (Sapphire Rapids and later); f32/f16 storage
//                uses the avx512 kernels at this level
//   avx512_bf16: AVX-512 with the bf16 dot product (Zen 4, Cooper Lake and later)
//   avx512:      AVX-512 F/BW/DQ/VL
//   avx2:        AVX2 + FMA + F16C
//   portable:    no SIMD assumptions beyond the compiler's baseline
enum class CpuIsa : std::uint8_t { amx_bf16, avx512_bf16, avx512, avx2, portable, best = 255 };

// The largest Context::threads a call accepts. Above the core count of any machine the library
// targets (more threads than cores only add overhead), and a count OpenMP on Linux creates
// without trouble; a much larger one (65536) can exhaust the process's thread or memory limits,
// and OpenMP aborts the process when it cannot start a thread.
inline constexpr int kMaxThreads = 1024;

struct Context {
  Backend backend = Backend::automatic;
  int threads = 0;  // CPU threads, 0..kMaxThreads; 0 = OpenMP default
  CpuIsa cpu_isa =
      CpuIsa::best;             // cap on the CPU instruction set (best available if not supported)
  void* cuda_stream = nullptr;  // cudaStream_t for the CUDA backend; nullptr = default stream
  // CUDA, f32 storage (q, k, v): false (the default) computes at f32 accuracy (every product an
  // f32 FMA; relative error ~1e-6 against float64, as PyTorch's f32 SDPA). true opts in to the
  // bf16 tensor-core kernels, in the spirit of PyTorch's allow_tf32: each tile is rounded to
  // bf16 when loaded and multiplied with f32 accumulation, ~3e-3 relative error, the fastest.
  // No effect on other dtypes or backends.
  bool cuda_f32_via_bf16 = false;
};

// Computes out (and lse when given). Throws tileattn::Error on invalid arguments (nothing written).
void attention_forward(const AttentionArgs& args, const Context& ctx = {});

// Computes dq, dk, dv (FlashAttention-2's algorithm: the probabilities are recomputed blockwise
// from q, k and lse; no Lq x Lk buffer on the CPU). Throws tileattn::Error on invalid arguments
// (nothing written). The cuda backend enqueues on ctx.cuda_stream and takes a stream-ordered f32
// workspace (about 4 x B x Hq x Lq x D bytes) from a pool the library keeps per device.
void attention_backward(const AttentionBackwardArgs& args, const Context& ctx = {});

// What the library was built with and what this machine offers.
struct BuildInfo {
  std::string version;
  std::string compiler;
  bool openmp = false;
  bool cuda = false;
  CpuIsa best_cpu_isa = CpuIsa::portable;  // detected at run time
  int max_threads = 1;
};
BuildInfo build_info();
const char* to_string(CpuIsa isa) noexcept;
const char* to_string(Backend backend) noexcept;

}  // namespace tileattn
