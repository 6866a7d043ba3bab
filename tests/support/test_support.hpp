// Shared test utilities: seeded random tensors in any storage dtype and layout, output poisoning,
// padding canaries, error measures, and the naive same-precision attention used as the error
// bar for 16-bit storage (FlashAttention's rule).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tileattn/tileattn.hpp"

namespace tileattn::test {

// ---- Seeds and test size ----------------------------------------------------------------------

// One seed per process: TILEATTN_TEST_SEED when set, else fresh from std::random_device.
std::uint64_t run_seed();
// run_seed() mixed with the running test's full name, so tests draw independent data and a
// failing test reproduces with TILEATTN_TEST_SEED=<run seed> whatever the filter or order.
std::uint64_t test_seed();
// "seed 123 (rerun with TILEATTN_TEST_SEED=123)": put in every failure via TILEATTN_TRACE_SEED.
std::string seed_note();
#define TILEATTN_TRACE_SEED() SCOPED_TRACE(::tileattn::test::seed_note())

// TILEATTN_TEST_SCALE (clamped to [0.01, 1]) shrinks the large cases and the exhaustive sweeps.
// The default is 1, or 0.1 in sanitizer builds (TILEATTN_SANITIZE); set it to 1 there for the
// full-size run.
double test_scale();
// n scaled by test_scale(), at least `minimum`.
std::int64_t scaled(std::int64_t n, std::int64_t minimum = 1);

using Rng = std::mt19937_64;
inline Rng make_rng() {
  return Rng(test_seed());
}

// ---- Elements ---------------------------------------------------------------------------------

// Reads/writes element `index` of a buffer of any DType as float (boolean reads 0/1).
float load_element(const void* base, DType dtype, std::int64_t index);
void store_element(void* base, DType dtype, std::int64_t index, float value);
// The value after a round trip through `dtype` storage (identity for f32).
float round_to(DType dtype, float value);

// ---- Host tensors -----------------------------------------------------------------------------

// Memory orders for a logical [B, L, H, D] operand.
enum class Layout : std::uint8_t {
  bshd,         // contiguous [B, L, H, D]
  bhsd,         // contiguous [B, H, L, D] seen through bhsd_as_bshd
  padded,       // [B, H, L, D] order with gaps after every row, head and batch entry
  padded_bshd,  // [B, L, H, D] order with gaps after every head, row and batch entry (as in a
                // slice of a fused QKV tensor)
};
const char* to_string(Layout layout);

// An owning strided buffer. Elements the logical view does not reach are padding: they hold a
// NaN canary so that a kernel reading them produces NaN, and padding_intact() checks none was
// written. Copyable; view() always points into this object's storage.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides);
  static HostTensor contiguous(DType dtype, std::vector<std::int64_t> shape);
  // A logical [B, L, H, D] attention operand stored in `layout`.
  static HostTensor operand(DType dtype, std::int64_t B, std::int64_t L, std::int64_t H,
                            std::int64_t D, Layout layout);
  // Logical [B, H, L] (lse) stored contiguously or, for Layout::padded, with gaps.
  static HostTensor lse(std::int64_t B, std::int64_t H, std::int64_t L, Layout layout);

  Tensor view() const;
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(offsets_.size()); }

  // Element access by row-major logical index.
  float get(std::int64_t logical) const;
  void set(std::int64_t logical, float value);
  std::vector<float> to_f32() const;

  // Logical elements ~ N(0, stddev) rounded to the dtype; padding gets the canary.
  void fill_normal(Rng& rng, float stddev = 1.0f);
  void fill(float value);
  // Logical elements NaN (the output poison), padding the canary.
  void poison();
  bool padding_intact() const;
  std::int64_t count_nan() const;
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  std::uint8_t* data() { return bytes_.data(); }

 private:
  void fill_padding();

  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_, strides_;
  std::vector<std::int64_t> offsets_;  // element offset of each logical element
  std::vector<bool> is_logical_;       // per storage element
  std::vector<std::uint8_t> bytes_;
};

// ---- Error measures ---------------------------------------------------------------------------

// got vs ref (ref finite). Non-finite `got` where ref is finite are counted, not summed.
struct ErrorStats {
  double rel_l2 = 0.0;   // ||got - ref|| / ||ref|| (absolute when ||ref|| == 0)
  double max_abs = 0.0;  // max |got - ref|
  double ref_max = 0.0;  // max |ref|
  std::int64_t nonfinite = 0;
  std::int64_t worst = -1;  // logical index of max_abs (or of the first non-finite)
  std::string str() const;
};
ErrorStats compare(const std::vector<float>& got, const std::vector<float>& ref);

// lse: absolute error over finite entries; -inf in ref must be -inf in got and vice versa.
struct LseStats {
  double max_abs = 0.0;
  std::int64_t mismatched_inf = 0;  // ref -inf but got not, or ref finite but got not finite
  std::int64_t worst = -1;
  std::string str() const;
};
LseStats compare_lse(const std::vector<float>& got, const std::vector<float>& ref);

// ---- Naive same-precision attention -----------------------------------------------------------

// Three-stage attention the way a naive low-precision framework computes it: inputs in the
// storage dtype; q.k accumulated in f32 and rounded to the storage dtype; the score modifications
// applied and rounded again; softmax in f32; probabilities rounded to the storage dtype; P.V
// accumulated in f32; the output rounded to the storage dtype, then to out's dtype. For f32
// storage this is plain f32 attention. Honours every option of `args` (validated first).
struct NaiveResult {
  std::vector<float> out;  // logical [B, Lq, Hq, Dv]
  std::vector<float> lse;  // [B, Hq, Lq], -inf for fully masked rows
};
NaiveResult naive_attention(const AttentionArgs& args);

// The backward the same naive way (the error bar of the CPU backward for 16-bit storage): the
// probabilities recomputed as naive_attention does, dO V^T, dS and every gradient rounded to the
// storage dtype, accumulation in f32. Logical BSHD order. delta is rowsum(P o dP) from the
// naive's own probabilities, or (NaiveDelta::given_out) rowsum(dO o out) from the out the call
// passes, as the flash backward computes it: then the naive carries out's rounding too.
struct NaiveGradients {
  std::vector<float> dq, dk, dv;
};
enum class NaiveDelta : std::uint8_t { probabilities, given_out };
NaiveGradients naive_attention_backward(const AttentionBackwardArgs& args,
                                        NaiveDelta delta_source = NaiveDelta::probabilities);

// Runs `call`, which must throw tileattn::Error whose message names `argument` (as
// 'argument') and contains `fragment`; anything else is a test failure.
void expect_argument_error(const std::function<void()>& call, const std::string& argument,
                           const std::string& fragment);

// Mentions names used in failure messages.
std::string describe(const AttentionArgs& args);

}  // namespace tileattn::test
