// Every error path of attention_forward (src/api/validate.cpp and src/api/attention.cpp): the
// call throws tileattn::Error, the message names the argument, and no buffer is written.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace tileattn::test {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A valid call: GQA 4:2 heads, cross attention 5 x 7, D = 8, Dv = 6, with lse, a boolean mask,
// key lengths and ALiBi slopes available for the tests that need them.
class Validation : public ::testing::Test {
 protected:
  static constexpr std::int64_t B = 2, Lq = 5, Lk = 7, Hq = 4, Hkv = 2, D = 8, Dv = 6;

  void SetUp() override {
    Rng rng = make_rng();
    q_.fill_normal(rng);
    k_.fill_normal(rng);
    v_.fill_normal(rng);
    mask_.fill(1.0f);
    key_lengths_.set(0, 3.0f);
    key_lengths_.set(1, 7.0f);
    alibi_.fill(0.25f);
    buffers_ = {&q_, &k_, &v_, &out_, &lse_, &mask_, &key_lengths_, &alibi_, &scratch_};
  }

  AttentionArgs args() const {
    AttentionArgs a;
    a.q = q_.view();
    a.k = k_.view();
    a.v = v_.view();
    a.out = out_.view();
    a.lse = lse_.view();
    return a;
  }

  static Tensor on_cuda(Tensor t) {
    t.device = Device::cuda;
    return t;
  }

  // The call must throw Error whose message names `argument` (as 'argument') and contains
  // `fragment`, and must leave every buffer (outputs poisoned beforehand) bit-for-bit unchanged.
  void expect_error(const AttentionArgs& a, const std::string& argument,
                    const std::string& fragment = "", const Context& ctx = {}) {
    TILEATTN_TRACE_SEED();
    out_.poison();
    lse_.poison();
    std::vector<std::vector<std::uint8_t>> before;
    for (const HostTensor* t : buffers_) before.push_back(t->bytes());
    expect_argument_error([&] { attention_forward(a, ctx); }, argument, fragment);
    for (std::size_t i = 0; i < buffers_.size(); ++i)
      EXPECT_TRUE(buffers_[i]->bytes() == before[i]) << "buffer " << i << " was written";
    EXPECT_EQ(out_.count_nan(), out_.numel()) << "out was written";
  }

  HostTensor q_ = HostTensor::contiguous(DType::f32, {B, Lq, Hq, D});
  HostTensor k_ = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, D});
  HostTensor v_ = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, Dv});
  HostTensor out_ = HostTensor::contiguous(DType::f32, {B, Lq, Hq, Dv});
  HostTensor lse_ = HostTensor::contiguous(DType::f32, {B, Hq, Lq});
  HostTensor mask_ = HostTensor::contiguous(DType::boolean, {B, Hq, Lq, Lk});
  HostTensor key_lengths_ = HostTensor::contiguous(DType::i32, {B});
  HostTensor alibi_ = HostTensor::contiguous(DType::f32, {B, Hq});
  HostTensor scratch_ = HostTensor::contiguous(DType::f32, {4096});  // for aliasing tests
  std::vector<const HostTensor*> buffers_;
};

// The fixture's call itself is valid: every failure below comes from the one change it makes.
TEST_F(Validation, BaselineIsValid) {
  TILEATTN_TRACE_SEED();
  AttentionArgs a = args();
  a.mask = mask_.view();
  a.key_lengths = key_lengths_.view();
  a.alibi_slopes = alibi_.view();
  out_.poison();
  EXPECT_NO_THROW(attention_forward(a, {Backend::reference}));
  EXPECT_NO_THROW(attention_forward(a, {Backend::cpu}));
  EXPECT_EQ(out_.count_nan(), 0);
}

// Empty problems are valid: no query rows is a no-op; no keys gives zero rows and -inf lse.
TEST_F(Validation, EmptyLengthsAreAccepted) {
  TILEATTN_TRACE_SEED();
  HostTensor q = HostTensor::contiguous(DType::f32, {B, 0, Hq, D});
  HostTensor out = HostTensor::contiguous(DType::f32, {B, 0, Hq, Dv});
  HostTensor lse = HostTensor::contiguous(DType::f32, {B, Hq, 0});
  AttentionArgs a = args();
  a.q = q.view(), a.out = out.view(), a.lse = lse.view();
  for (const Backend backend : {Backend::cpu, Backend::reference})
    EXPECT_NO_THROW(attention_forward(a, {backend})) << to_string(backend);

  HostTensor k = HostTensor::contiguous(DType::f32, {B, 0, Hkv, D});
  HostTensor v = HostTensor::contiguous(DType::f32, {B, 0, Hkv, Dv});
  a = args();
  a.k = k.view(), a.v = v.view();
  for (const Backend backend : {Backend::cpu, Backend::reference}) {
    out_.poison();
    lse_.poison();
    EXPECT_NO_THROW(attention_forward(a, {backend})) << to_string(backend);
    for (const float x : out_.to_f32()) EXPECT_EQ(x, 0.0f) << to_string(backend);
    for (const float x : lse_.to_f32()) EXPECT_EQ(x, -kInf) << to_string(backend);
  }
}

// ---- Required tensors -------------------------------------------------------------------------

TEST_F(Validation, MissingTensors) {
  for (const char* name : {"q", "k", "v", "out"}) {
    SCOPED_TRACE(name);
    AttentionArgs a = args();
    Tensor* t = name[0] == 'q' ? &a.q : name[0] == 'k' ? &a.k : name[0] == 'v' ? &a.v : &a.out;
    t->data = nullptr;
    expect_error(a, name, "is required");
  }
}

TEST_F(Validation, WrongRanks) {
  for (const char* name : {"q", "k", "v", "out"}) {
    for (const int rank : {1, 3}) {
      SCOPED_TRACE(std::string(name) + " rank " + std::to_string(rank));
      AttentionArgs a = args();
      Tensor* t = name[0] == 'q' ? &a.q : name[0] == 'k' ? &a.k : name[0] == 'v' ? &a.v : &a.out;
      t->rank = rank;
      expect_error(a, name, "expected rank 4");
    }
  }
}

TEST_F(Validation, BadDtypes) {
  for (const DType bad : {DType::boolean, DType::i32, DType::i64}) {
    SCOPED_TRACE(to_string(bad));
    AttentionArgs a = args();
    a.q.dtype = bad;
    expect_error(a, "q", "dtype must be f32, f16 or bf16");
    a = args();
    a.out.dtype = bad;
    expect_error(a, "out", "dtype must be f32, f16 or bf16");
  }
}

TEST_F(Validation, KvDtypesMustMatchQ) {
  AttentionArgs a = args();
  a.k.dtype = DType::f16;
  expect_error(a, "k", "differs from q's");
  a = args();
  a.v.dtype = DType::bf16;
  expect_error(a, "v", "differs from q's");
  a = args();  // q 16-bit, k and v f32
  a.q.dtype = DType::bf16;
  expect_error(a, "k", "differs from q's");
}

TEST_F(Validation, DeviceMismatch) {
  AttentionArgs a = args();
  a.k = on_cuda(a.k);
  expect_error(a, "k", "same device");
  a = args();
  a.v = on_cuda(a.v);
  expect_error(a, "v", "same device");
  a = args();
  a.out = on_cuda(a.out);
  expect_error(a, "out", "same device");
  a = args();  // same device kind, different index
  a.q = on_cuda(a.q), a.k = on_cuda(a.k), a.v = on_cuda(a.v), a.out = on_cuda(a.out);
  a.lse = on_cuda(a.lse);
  a.v.device_index = 1;
  expect_error(a, "v", "same device");
}

TEST_F(Validation, NegativeCudaDeviceIndex) {
  AttentionArgs a = args();
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) {
    *t = on_cuda(*t);
    t->device_index = -1;
  }
  expect_error(a, "q", "device index");
}

// ---- Sizes ------------------------------------------------------------------------------------

TEST_F(Validation, BatchMustBePositive) {
  AttentionArgs a = args();
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.out}) t->shape[0] = 0;
  a.lse = {};
  expect_error(a, "q", "batch size");
}

TEST_F(Validation, NegativeQueryLength) {
  AttentionArgs a = args();
  a.q.shape[1] = -1;
  a.out.shape[1] = -1;
  expect_error(a, "q", "query length");
}

// Kernels index rows and keys with 32-bit lanes: lengths must stay below 2^31.
TEST_F(Validation, LengthsBeyond32Bits) {
  AttentionArgs a = args();
  a.q.shape[1] = a.out.shape[1] = std::int64_t{1} << 31;
  a.lse = {};
  expect_error(a, "q", "query length");
  a = args();
  a.k.shape[1] = a.v.shape[1] = std::int64_t{1} << 31;
  expect_error(a, "k", "key length");
}

TEST_F(Validation, QueryHeadsMustBePositive) {
  AttentionArgs a = args();
  a.q.shape[2] = 0;
  expect_error(a, "q", "query heads");
}

TEST_F(Validation, HeadDimOutOfRange) {
  for (const std::int64_t dim : {std::int64_t{0}, std::int64_t{-3}, std::int64_t{257}}) {
    SCOPED_TRACE(dim);
    AttentionArgs a = args();
    a.q.shape[3] = a.k.shape[3] = dim;
    expect_error(a, "q", "head dim D");
    a = args();
    a.v.shape[3] = a.out.shape[3] = dim;
    expect_error(a, "v", "head dim Dv");
  }
}

TEST_F(Validation, KeyShapeMismatch) {
  AttentionArgs a = args();
  a.k.shape[0] = B + 1;
  expect_error(a, "k", "batch");
  a = args();
  a.k.shape[3] = D + 1;
  expect_error(a, "k", "head dim");
  a = args();
  a.k.shape[2] = 0;
  a.v.shape[2] = 0;
  expect_error(a, "k", "kv heads");
  a = args();
  a.k.shape[2] = a.v.shape[2] = 3;  // Hq = 4 is not a multiple of 3
  expect_error(a, "k", "multiple of kv heads");
  a = args();
  a.k.shape[1] = a.v.shape[1] = -1;
  expect_error(a, "k", "key length");
}

TEST_F(Validation, ValueShapeMismatch) {
  AttentionArgs a = args();
  a.v.shape[0] = B + 1;
  expect_error(a, "v", "batch");
  a = args();
  a.v.shape[1] = Lk - 1;
  expect_error(a, "v", "key length");
  a = args();
  a.v.shape[2] = Hkv * 2;
  expect_error(a, "v", "kv heads");
}

TEST_F(Validation, OutShapeMismatch) {
  const char* what[] = {"batch", "query length", "query heads", "head dim Dv"};
  for (int d = 0; d < 4; ++d) {
    SCOPED_TRACE(d);
    AttentionArgs a = args();
    a.out.shape[d] += 1;
    expect_error(a, "out", what[d]);
  }
}

// ---- Strides ----------------------------------------------------------------------------------

TEST_F(Validation, NonUnitInnerStride) {
  for (const char* name : {"q", "k", "v", "out"}) {
    SCOPED_TRACE(name);
    AttentionArgs a = args();
    Tensor* t = name[0] == 'q' ? &a.q : name[0] == 'k' ? &a.k : name[0] == 'v' ? &a.v : &a.out;
    t->stride[3] = 2;
    expect_error(a, name, "contiguous");
  }
}

TEST_F(Validation, NegativeStrides) {
  for (const char* name : {"q", "k", "v", "out"}) {
    for (int d = 0; d < 3; ++d) {
      SCOPED_TRACE(std::string(name) + " dim " + std::to_string(d));
      AttentionArgs a = args();
      Tensor* t = name[0] == 'q' ? &a.q : name[0] == 'k' ? &a.k : name[0] == 'v' ? &a.v : &a.out;
      t->stride[d] = -t->stride[d];
      expect_error(a, name, "negative");
    }
  }
}

TEST_F(Validation, OverflowingStrides) {
  for (const char* name : {"q", "k", "v", "out"}) {
    SCOPED_TRACE(name);
    AttentionArgs a = args();
    Tensor* t = name[0] == 'q' ? &a.q : name[0] == 'k' ? &a.k : name[0] == 'v' ? &a.v : &a.out;
    t->stride[1] = kMax / 2;  // (L - 1) * stride overflows int64 element offsets
    expect_error(a, name, "overflows");
    a = args();
    t->stride[0] = kMax / 4;  // element offsets fit, byte offsets (x4 for f32) do not
    expect_error(a, name, "overflows");
  }
}

// ---- Aliasing ---------------------------------------------------------------------------------

TEST_F(Validation, OutOverlapsInputs) {
  AttentionArgs a = args();
  a.out.data = a.q.data;
  expect_error(a, "out", "overlaps");
  a = args();
  a.out.data = a.k.data;
  expect_error(a, "out", "overlaps");
  a = args();  // out starts on v's last element
  a.out.data = static_cast<float*>(a.v.data) + (v_.numel() - 1);
  expect_error(a, "out", "overlaps");
  a = args();  // q starts on out's last element
  a.out.data = scratch_.data();
  a.q.data = scratch_.data() + 4 * (out_.numel() - 1);
  expect_error(a, "out", "overlaps");
  a = args();  // out starts on q's last element
  a.q.data = scratch_.data();
  a.out.data = scratch_.data() + 4 * (q_.numel() - 1);
  expect_error(a, "out", "overlaps");
}

TEST_F(Validation, OutAdjacentToInputIsAccepted) {
  TILEATTN_TRACE_SEED();
  AttentionArgs a = args();
  float* base = reinterpret_cast<float*>(scratch_.data());
  std::memcpy(base, q_.bytes().data(), q_.bytes().size());
  a.q.data = base;
  a.out.data = base + q_.numel();  // one past q's last element
  EXPECT_NO_THROW(attention_forward(a, {Backend::reference}));
}

// ---- lse --------------------------------------------------------------------------------------

TEST_F(Validation, LseErrors) {
  AttentionArgs a = args();
  a.lse.rank = 2;
  expect_error(a, "lse", "rank 3");
  a = args();
  a.lse.rank = 4;
  expect_error(a, "lse", "rank 3");
  a = args();
  a.lse.dtype = DType::f16;
  expect_error(a, "lse", "dtype must be f32");
  a = args();
  a.lse = on_cuda(a.lse);
  expect_error(a, "lse", "same device");
  const char* what[] = {"batch", "query heads", "query length"};
  for (int d = 0; d < 3; ++d) {
    SCOPED_TRACE(d);
    a = args();
    a.lse.shape[d] += 1;
    expect_error(a, "lse", what[d]);
  }
  a = args();
  a.lse.stride[1] = -a.lse.stride[1];
  expect_error(a, "lse", "negative");
  a = args();
  a.lse.stride[0] = kMax / 2;
  expect_error(a, "lse", "overflows");
}

TEST_F(Validation, LseOverlaps) {
  for (const char* other : {"q", "k", "v", "out"}) {
    SCOPED_TRACE(other);
    AttentionArgs a = args();
    a.lse.data = other[0] == 'q'   ? a.q.data
                 : other[0] == 'k' ? a.k.data
                 : other[0] == 'v' ? a.v.data
                                   : a.out.data;
    expect_error(a, "lse", "overlaps");
  }
}

// ---- Scalars ----------------------------------------------------------------------------------

TEST_F(Validation, NonFiniteScale) {
  for (const float scale : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(scale);
    AttentionArgs a = args();
    a.scale = scale;
    expect_error(a, "scale", "finite");
  }
}

TEST_F(Validation, BadSoftcap) {
  for (const float softcap : {-1.0f, -1e-30f, kNaN, kInf}) {
    SCOPED_TRACE(softcap);
    AttentionArgs a = args();
    a.softcap = softcap;
    expect_error(a, "softcap", ">= 0");
  }
  // Subnormal caps (no finite f32 reciprocal; a fuzz finding gave NaN on the CPU backend) are
  // refused; the smallest normal one is accepted.
  for (const float softcap : {1e-40f, std::numeric_limits<float>::denorm_min()}) {
    SCOPED_TRACE(softcap);
    AttentionArgs a = args();
    a.softcap = softcap;
    expect_error(a, "softcap", "smallest normal");
  }
  AttentionArgs a = args();
  a.softcap = std::numeric_limits<float>::min();
  out_.poison();
  EXPECT_NO_THROW(attention_forward(a, {Backend::cpu}));
  EXPECT_EQ(out_.count_nan(), 0);
}

TEST_F(Validation, WindowBelowMinusOne) {
  AttentionArgs a = args();
  a.window_left = -2;
  expect_error(a, "window_left", "-1");
  a = args();
  a.window_right = -5;
  a.causal = true;
  expect_error(a, "window_right", "-1");
  a = args();
  a.window_left = std::numeric_limits<std::int64_t>::min();
  expect_error(a, "window_left", "-1");
}

TEST_F(Validation, BadAlignment) {
  AttentionArgs a = args();
  a.causal = true;
  a.alignment = static_cast<Alignment>(7);
  expect_error(a, "alignment", "bottom_right or top_left");
}

// ---- Mask -------------------------------------------------------------------------------------

TEST_F(Validation, MaskRank) {
  AttentionArgs a = args();
  a.mask = mask_.view();
  a.mask.rank = 1;
  a.mask.shape[0] = Lk;
  expect_error(a, "mask", "rank 2..4");
  a.mask.rank = 0;  // with data: not the absent Tensor{}
  expect_error(a, "mask", "rank must be 1..4");
}

TEST_F(Validation, MaskDtype) {
  for (const DType bad : {DType::i32, DType::i64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(to_string(bad));
    AttentionArgs a = args();
    a.mask = mask_.view();
    a.mask.dtype = bad;
    expect_error(a, "mask", "dtype must be boolean");
  }
}

TEST_F(Validation, MaskDevice) {
  AttentionArgs a = args();
  a.mask = on_cuda(mask_.view());
  expect_error(a, "mask", "same device");
}

TEST_F(Validation, MaskDoesNotBroadcast) {
  struct Bad {
    std::vector<std::int64_t> shape;
  };
  const Bad bad[] = {
      {{Lq, Lk + 1}},         // rank 2, Lk wrong
      {{Lq + 1, Lk}},         // rank 2, Lq wrong
      {{3, Lq, Lk}},          // rank 3, heads neither Hq nor 1
      {{Hkv, Lq, Lk}},        // rank 3 with kv heads instead of query heads
      {{B + 1, 1, Lq, Lk}},   // rank 4, batch wrong
      {{1, Hq, Lq, 2}},       // rank 4, Lk wrong
      {{B, Hq, Lq, Lk * 2}},  // rank 4, Lk doubled
  };
  for (const Bad& m : bad) {
    HostTensor mask = HostTensor::contiguous(DType::boolean, m.shape);
    SCOPED_TRACE(::testing::PrintToString(m.shape));
    AttentionArgs a = args();
    a.mask = mask.view();
    expect_error(a, "mask", "does not broadcast");
  }
}

TEST_F(Validation, MaskStridesAndOverlap) {
  AttentionArgs a = args();
  a.mask = mask_.view();
  a.mask.stride[2] = -a.mask.stride[2];
  expect_error(a, "mask", "negative");
  a = args();
  a.mask = mask_.view();
  a.mask.stride[0] = kMax - 10;
  expect_error(a, "mask", "overflows");
  a = args();  // an additive f32 mask that is the out buffer
  a.mask = out_.view();
  a.mask.rank = 2;
  a.mask.shape[0] = Lq, a.mask.shape[1] = Lk;
  a.mask.stride[0] = Lk, a.mask.stride[1] = 1;
  expect_error(a, "mask", "overlaps");
}

TEST_F(Validation, MaskOverlapsLse) {
  AttentionArgs a = args();
  a.mask = lse_.view();  // f32 [B, Hq, Lq] seen as an additive mask [Lq, Lk]
  a.mask.rank = 2;
  a.mask.shape[0] = Lq, a.mask.shape[1] = Lk;
  a.mask.stride[0] = Lk, a.mask.stride[1] = 1;
  expect_error(a, "mask", "overlaps");
}

// ---- Key lengths ------------------------------------------------------------------------------

TEST_F(Validation, KeyLengthsShapeDtypeDevice) {
  AttentionArgs a = args();
  a.key_lengths = key_lengths_.view();
  a.key_lengths.rank = 2;
  a.key_lengths.shape[1] = 1;
  expect_error(a, "key_lengths", "rank 1");
  for (const DType bad : {DType::f32, DType::boolean, DType::f16}) {
    SCOPED_TRACE(to_string(bad));
    a = args();
    a.key_lengths = key_lengths_.view();
    a.key_lengths.dtype = bad;
    expect_error(a, "key_lengths", "dtype must be i32 or i64");
  }
  a = args();
  a.key_lengths = on_cuda(key_lengths_.view());
  expect_error(a, "key_lengths", "same device");
  a = args();
  a.key_lengths = key_lengths_.view();
  a.key_lengths.shape[0] = B + 1;
  expect_error(a, "key_lengths", "batch");
  a = args();
  a.key_lengths = key_lengths_.view();
  a.key_lengths.shape[0] = 1;
  expect_error(a, "key_lengths", "batch");
}

TEST_F(Validation, KeyLengthsStridesAndOverlap) {
  HostTensor spread = HostTensor(DType::i32, {B}, {2});
  spread.fill(1.0f);
  AttentionArgs a = args();
  a.key_lengths = spread.view();
  expect_error(a, "key_lengths", "contiguous");
  a = args();
  a.key_lengths = key_lengths_.view();
  a.key_lengths.stride[0] = -1;  // caught by the contiguity check
  expect_error(a, "key_lengths", "contiguous");
  a = args();
  a.key_lengths = out_.view();
  a.key_lengths.dtype = DType::i32;
  a.key_lengths.rank = 1;
  a.key_lengths.shape[0] = B;
  a.key_lengths.stride[0] = 1;
  expect_error(a, "key_lengths", "overlaps");
}

TEST_F(Validation, KeyLengthsOverlapLse) {
  AttentionArgs a = args();
  a.key_lengths = lse_.view();
  a.key_lengths.dtype = DType::i32;
  a.key_lengths.rank = 1;
  a.key_lengths.shape[0] = B;
  a.key_lengths.stride[0] = 1;
  expect_error(a, "key_lengths", "overlaps");
}

TEST_F(Validation, KeyLengthsOutOfRange) {
  for (const DType dtype : {DType::i32, DType::i64}) {
    for (const float bad : {-1.0f, static_cast<float>(Lk + 1), -1e9f}) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " value " + std::to_string(bad));
      HostTensor lengths = HostTensor::contiguous(dtype, {B});
      lengths.set(0, 0.0f);  // 0 and Lk are valid
      lengths.set(1, bad);
      AttentionArgs a = args();
      a.key_lengths = lengths.view();
      expect_error(a, "key_lengths", "expected a value in [0, 7]");
      lengths.set(0, bad);
      lengths.set(1, static_cast<float>(Lk));
      expect_error(a, "key_lengths", "entry 0");
    }
  }
  HostTensor huge = HostTensor::contiguous(DType::i64, {B});
  huge.fill(0.0f);
  static_cast<std::int64_t*>(huge.view().data)[1] = std::int64_t{1} << 40;
  AttentionArgs a = args();
  a.key_lengths = huge.view();
  expect_error(a, "key_lengths", "entry 1");
}

// ---- ALiBi ------------------------------------------------------------------------------------

TEST_F(Validation, AlibiErrors) {
  AttentionArgs a = args();
  a.alibi_slopes = alibi_.view();
  a.alibi_slopes.rank = 3;
  a.alibi_slopes.shape[2] = 1;
  expect_error(a, "alibi_slopes", "rank");
  for (const DType bad : {DType::f16, DType::bf16, DType::i32}) {
    SCOPED_TRACE(to_string(bad));
    a = args();
    a.alibi_slopes = alibi_.view();
    a.alibi_slopes.dtype = bad;
    expect_error(a, "alibi_slopes", "dtype must be f32");
  }
  a = args();
  a.alibi_slopes = on_cuda(alibi_.view());
  expect_error(a, "alibi_slopes", "same device");
  a = args();  // rank 1 must be [Hq]
  a.alibi_slopes = alibi_.view();
  a.alibi_slopes.rank = 1;
  a.alibi_slopes.shape[0] = Hkv;
  expect_error(a, "alibi_slopes", "query heads");
  a = args();  // rank 2 must be [B, Hq]
  a.alibi_slopes = alibi_.view();
  a.alibi_slopes.shape[0] = 1;
  expect_error(a, "alibi_slopes", "batch");
  a = args();
  a.alibi_slopes = alibi_.view();
  a.alibi_slopes.shape[1] = Hq + 1;
  expect_error(a, "alibi_slopes", "query heads");
  a = args();
  a.alibi_slopes = alibi_.view();
  a.alibi_slopes.stride[0] = -Hq;
  expect_error(a, "alibi_slopes", "negative");
  a = args();
  a.alibi_slopes = out_.view();
  a.alibi_slopes.rank = 1;
  a.alibi_slopes.shape[0] = Hq;
  a.alibi_slopes.stride[0] = 1;
  expect_error(a, "alibi_slopes", "overlaps");
  a = args();
  a.alibi_slopes = lse_.view();
  a.alibi_slopes.rank = 1;
  a.alibi_slopes.shape[0] = Hq;
  a.alibi_slopes.stride[0] = 1;
  expect_error(a, "alibi_slopes", "overlaps");
}

// ---- Context and backends ---------------------------------------------------------------------

TEST_F(Validation, NegativeThreads) {
  for (const Backend backend : {Backend::automatic, Backend::cpu, Backend::reference}) {
    SCOPED_TRACE(to_string(backend));
    Context ctx;
    ctx.backend = backend;
    ctx.threads = -1;
    expect_error(args(), "ctx.threads", "must be in [0, 1024]", ctx);
  }
}

TEST_F(Validation, CudaBackendInCpuOnlyBuild) {
  if (build_info().cuda) GTEST_SKIP() << "this build has the CUDA backend";
  Context ctx;
  ctx.backend = Backend::cuda;
  expect_error(args(), "ctx.backend", "no CUDA backend", ctx);
  AttentionArgs a = args();  // device tensors with the automatic backend pick CUDA
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) *t = on_cuda(*t);
  expect_error(a, "ctx.backend", "no CUDA backend");
}

TEST_F(Validation, HostBackendsWithCudaTensors) {
  AttentionArgs a = args();
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) *t = on_cuda(*t);
  expect_error(a, "ctx.backend", "reference backend needs host tensors", {Backend::reference});
  expect_error(a, "ctx.backend", "cpu backend needs host tensors", {Backend::cpu});
}

TEST_F(Validation, CudaBackendWithHostTensors) {
  if (!build_info().cuda) GTEST_SKIP() << "CPU-only build";
  expect_error(args(), "ctx.backend", "needs device tensors", {Backend::cuda});
}

// ---- Tensor headers: rank, absent optionals, enum values, alignment ---------------------------

// A rank outside 1..4 is refused before shape[] or stride[] is read (the message builders
// included): rank 1000 must not make anything read past shape[3].
TEST_F(Validation, RankOutOfRange) {
  for (const char* name : {"q", "k", "v", "out", "lse", "mask", "key_lengths", "alibi_slopes"})
    for (const int rank : {1000, -1, 5}) {
      SCOPED_TRACE(std::string(name) + " rank " + std::to_string(rank));
      AttentionArgs a = args();
      a.mask = mask_.view();
      a.key_lengths = key_lengths_.view();
      a.alibi_slopes = alibi_.view();
      Tensor& t = name == std::string("q")     ? a.q
                  : name == std::string("k")   ? a.k
                  : name == std::string("v")   ? a.v
                  : name == std::string("out") ? a.out
                  : name == std::string("lse") ? a.lse
                  : name == std::string("mask")
                      ? a.mask
                      : (name == std::string("key_lengths") ? a.key_lengths : a.alibi_slopes);
      t.rank = rank;
      expect_error(a, name, "rank must be 1..4, got " + std::to_string(rank));
    }
}

// An optional tensor is absent only as Tensor{}: a shape with a null data pointer is an error.
TEST_F(Validation, OptionalWithShapeButNoData) {
  for (const char* name : {"lse", "mask", "key_lengths", "alibi_slopes"}) {
    SCOPED_TRACE(name);
    AttentionArgs a = args();
    a.mask = mask_.view();
    a.key_lengths = key_lengths_.view();
    a.alibi_slopes = alibi_.view();
    Tensor& t = name == std::string("lse")           ? a.lse
                : name == std::string("mask")        ? a.mask
                : name == std::string("key_lengths") ? a.key_lengths
                                                     : a.alibi_slopes;
    t.data = nullptr;
    expect_error(a, name, "has a shape but no data pointer");
  }
  // What the helpers build for a null pointer is such a tensor, not an absent one.
  AttentionArgs a = args();
  a.lse = make_tensor(static_cast<void*>(nullptr), DType::f32, {B, Hq, Lq});
  expect_error(a, "lse", "has a shape but no data pointer");
  // Tensor{} is absent: the call runs without lse.
  a.lse = Tensor{};
  EXPECT_NO_THROW(attention_forward(a, {Backend::reference}));
  EXPECT_EQ(out_.count_nan(), 0);
}

TEST_F(Validation, EnumValuesOutOfRange) {
  {
    AttentionArgs a = args();
    a.q.dtype = static_cast<DType>(17);
    expect_error(a, "q", "dtype value 17 is not a tileattn::DType");
  }
  {
    AttentionArgs a = args();
    a.mask = mask_.view();
    a.mask.dtype = static_cast<DType>(200);
    expect_error(a, "mask", "dtype value 200 is not a tileattn::DType");
  }
  {
    AttentionArgs a = args();
    a.v.device = static_cast<Device>(9);
    expect_error(a, "v", "device value 9 is not a tileattn::Device");
  }
  {
    AttentionArgs a = args();
    a.alignment = static_cast<Alignment>(2);
    expect_error(a, "alignment", "value 2 is not a tileattn::Alignment");
  }
  Context ctx;
  ctx.backend = static_cast<Backend>(42);
  expect_error(args(), "ctx.backend", "value 42 is not a tileattn::Backend", ctx);
  for (const int isa : {5, 6, 254}) {
    SCOPED_TRACE(isa);
    ctx = {};
    ctx.cpu_isa = static_cast<CpuIsa>(isa);
    expect_error(args(), "ctx.cpu_isa",
                 "value " + std::to_string(isa) + " is not a tileattn::CpuIsa", ctx);
  }
  // Every named value is accepted, best (255) included.
  for (const CpuIsa isa : {CpuIsa::amx_bf16, CpuIsa::avx512_bf16, CpuIsa::avx512, CpuIsa::avx2,
                           CpuIsa::portable, CpuIsa::best}) {
    ctx = {};
    ctx.backend = Backend::cpu;
    ctx.cpu_isa = isa;
    EXPECT_NO_THROW(attention_forward(args(), ctx)) << static_cast<int>(isa);
  }
}

TEST_F(Validation, MisalignedPointers) {
  const auto misalign = [](Tensor& t) {
    t.data = static_cast<void*>(static_cast<std::uint8_t*>(t.data) + 1);
  };
  for (const char* name : {"q", "k", "v", "out", "lse", "key_lengths", "alibi_slopes"}) {
    SCOPED_TRACE(name);
    AttentionArgs a = args();
    a.key_lengths = key_lengths_.view();
    a.alibi_slopes = alibi_.view();
    Tensor& t = name == std::string("q")             ? a.q
                : name == std::string("k")           ? a.k
                : name == std::string("v")           ? a.v
                : name == std::string("out")         ? a.out
                : name == std::string("lse")         ? a.lse
                : name == std::string("key_lengths") ? a.key_lengths
                                                     : a.alibi_slopes;
    misalign(t);
    expect_error(a, name, "is not aligned to its element size");
  }
  AttentionArgs a = args();  // an f16 tensor needs 2-byte alignment only
  a.q.dtype = a.k.dtype = a.v.dtype = DType::f16;
  a.q.data = static_cast<void*>(static_cast<std::uint8_t*>(a.q.data) + 2);
  EXPECT_NO_THROW(attention_forward(a, {Backend::reference}));
}

// ---- Outputs whose strides alias their own elements -------------------------------------------

TEST_F(Validation, OutWithInternalOverlap) {
  const std::vector<std::vector<std::int64_t>> bad = {
      {0, Hq * Dv, Dv, 1},                 // batches share rows
      {Lq * Hq * Dv, 0, Dv, 1},            // every query row written to one place
      {Lq * Hq * Dv, Hq * Dv, Dv - 1, 1},  // heads overlap by one element
      {Lq * Hq * Dv, Dv, Dv, 1},           // rows and heads on one stride
      {Lq * Hq * Dv, Dv, Lq * Dv - 1, 1},  // BHSD-like with heads one element short
  };
  for (const auto& strides : bad) {
    SCOPED_TRACE(::testing::PrintToString(strides));
    AttentionArgs a = args();
    for (int d = 0; d < 4; ++d) a.out.stride[d] = strides[static_cast<std::size_t>(d)];
    expect_error(a, "out", "share memory");
  }
  AttentionArgs a = args();
  a.lse.stride[2] = 0;
  expect_error(a, "lse", "share memory");
  a = args();
  a.lse.stride[1] = Lq - 1;
  expect_error(a, "lse", "share memory");

  // A permuted (BHSD) output overlaps nothing and is accepted.
  HostTensor bhsd = HostTensor::contiguous(DType::f32, {B * Hq * Lq * Dv});
  bhsd.poison();
  a = args();
  a.out.data = bhsd.data();
  const std::int64_t permuted[4] = {Hq * Lq * Dv, Dv, Lq * Dv, 1};
  for (int d = 0; d < 4; ++d) a.out.stride[d] = permuted[d];
  EXPECT_NO_THROW(attention_forward(a, {Backend::reference}));
  EXPECT_EQ(bhsd.count_nan(), 0);
  // Broadcast inputs (stride 0) are legitimate: k and v shared by both batches.
  a = args();
  a.k.stride[0] = 0;
  a.v.stride[0] = 0;
  EXPECT_NO_THROW(attention_forward(a, {Backend::cpu}));
}

// ---- Threads ----------------------------------------------------------------------------------

TEST_F(Validation, ThreadsAboveTheCap) {
  static_assert(kMaxThreads == 1024);
  for (const int threads :
       {kMaxThreads + 1, 65536, std::numeric_limits<int>::max(), std::numeric_limits<int>::min()}) {
    SCOPED_TRACE(threads);
    Context ctx;
    ctx.threads = threads;
    expect_error(args(), "ctx.threads", "must be in [0, 1024]", ctx);
  }
}

TEST_F(Validation, ManyThreadsOnATinyProblem) {
  TILEATTN_TRACE_SEED();
  for (const Backend backend : {Backend::cpu, Backend::reference}) {
    SCOPED_TRACE(to_string(backend));
    out_.poison();
    attention_forward(args(), {backend, 1});
    const std::vector<float> one = out_.to_f32();
    out_.poison();
    EXPECT_NO_THROW(attention_forward(args(), {backend, 64}));
    const std::vector<float> many = out_.to_f32();
    ASSERT_EQ(many.size(), one.size());
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(many[i], one[i], 1e-6f) << i;
  }
}

// ---- scale ------------------------------------------------------------------------------------

// scale = 0 is honoured: every score is 0, so each row is the mean of the visible v rows (here
// the first key_lengths[b] keys of the row's kv head).
TEST_F(Validation, ZeroScaleIsUniformAttention) {
  TILEATTN_TRACE_SEED();
  AttentionArgs a = args();
  a.key_lengths = key_lengths_.view();
  a.scale = 0.0f;
  const std::int64_t lengths[B] = {3, 7};
  for (const Backend backend : {Backend::reference, Backend::cpu}) {
    SCOPED_TRACE(to_string(backend));
    out_.poison();
    attention_forward(a, {backend});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < Lq; ++i)
        for (std::int64_t h = 0; h < Hq; ++h)
          for (std::int64_t e = 0; e < Dv; ++e) {
            double mean = 0.0;
            for (std::int64_t j = 0; j < lengths[b]; ++j)
              mean += v_.get(((b * Lk + j) * Hkv + h / (Hq / Hkv)) * Dv + e);
            mean /= static_cast<double>(lengths[b]);
            EXPECT_NEAR(out_.get(((b * Lq + i) * Hq + h) * Dv + e), mean, 1e-5)
                << "b " << b << " i " << i << " h " << h << " e " << e;
          }
  }
}

// Not given means 1/sqrt(D); a negative scale is used as given (the rows differ from the
// default's).
TEST_F(Validation, DefaultAndNegativeScale) {
  TILEATTN_TRACE_SEED();
  AttentionArgs a = args();
  attention_forward(a, {Backend::reference});
  const std::vector<float> by_default = out_.to_f32();
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  attention_forward(a, {Backend::reference});
  EXPECT_TRUE(out_.to_f32() == by_default);
  a.scale = -1.0f / std::sqrt(static_cast<float>(D));
  attention_forward(a, {Backend::reference});
  EXPECT_FALSE(out_.to_f32() == by_default);
  EXPECT_EQ(out_.count_nan(), 0);
}

}  // namespace
}  // namespace tileattn::test
