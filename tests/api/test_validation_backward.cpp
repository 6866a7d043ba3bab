// Every error path of attention_backward (src/api/validate.cpp validate_backward, the dropout
// check shared with the forward, and the dispatch in src/api/attention.cpp): the call throws
// tileattn::Error, the message names the argument, and no buffer is written.
#include <limits>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace tileattn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A valid call: GQA 4:2 heads, cross attention 5 x 7, D = 8, Dv = 6, out and lse from the
// forward, a boolean mask available.
class BackwardValidation : public ::testing::Test {
 protected:
  static constexpr std::int64_t B = 2, Lq = 5, Lk = 7, Hq = 4, Hkv = 2, D = 8, Dv = 6;

  void SetUp() override {
    Rng rng = make_rng();
    for (HostTensor* t : {&q_, &k_, &v_, &dout_}) t->fill_normal(rng);
    mask_.fill(1.0f);
    AttentionArgs forward = args();
    attention_forward(forward, {Backend::cpu});
    buffers_ = {&q_, &k_, &v_, &out_, &lse_, &dout_, &dq_, &dk_, &dv_, &mask_, &scratch_};
  }

  AttentionBackwardArgs args() const {
    AttentionBackwardArgs a;
    a.q = q_.view(), a.k = k_.view(), a.v = v_.view(), a.out = out_.view(), a.lse = lse_.view();
    a.dout = dout_.view(), a.dq = dq_.view(), a.dk = dk_.view(), a.dv = dv_.view();
    return a;
  }

  void poison_gradients() {
    dq_.poison();
    dk_.poison();
    dv_.poison();
  }

  void expect_error(const AttentionBackwardArgs& a, const std::string& argument,
                    const std::string& fragment = "", const Context& ctx = {}) {
    TILEATTN_TRACE_SEED();
    poison_gradients();
    std::vector<std::vector<std::uint8_t>> before;
    for (const HostTensor* t : buffers_) before.push_back(t->bytes());
    expect_argument_error([&] { attention_backward(a, ctx); }, argument, fragment);
    for (std::size_t i = 0; i < buffers_.size(); ++i)
      EXPECT_TRUE(buffers_[i]->bytes() == before[i]) << "buffer " << i << " was written";
    EXPECT_EQ(dq_.count_nan(), dq_.numel()) << "dq was written";
  }

  // The gradient-side tensors by name, with their logical shapes.
  Tensor AttentionBackwardArgs::*member(const std::string& name) const {
    if (name == "dout") return &AttentionBackwardArgs::dout;
    if (name == "dq") return &AttentionBackwardArgs::dq;
    if (name == "dk") return &AttentionBackwardArgs::dk;
    return &AttentionBackwardArgs::dv;
  }

  HostTensor q_ = HostTensor::contiguous(DType::f32, {B, Lq, Hq, D});
  HostTensor k_ = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, D});
  HostTensor v_ = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, Dv});
  HostTensor out_ = HostTensor::contiguous(DType::f32, {B, Lq, Hq, Dv});
  HostTensor lse_ = HostTensor::contiguous(DType::f32, {B, Hq, Lq});
  HostTensor dout_ = HostTensor::contiguous(DType::f32, {B, Lq, Hq, Dv});
  HostTensor dq_ = HostTensor::contiguous(DType::f32, {B, Lq, Hq, D});
  HostTensor dk_ = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, D});
  HostTensor dv_ = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, Dv});
  HostTensor mask_ = HostTensor::contiguous(DType::boolean, {B, Hq, Lq, Lk});
  HostTensor scratch_ = HostTensor::contiguous(DType::f32, {4096});  // for aliasing tests
  std::vector<const HostTensor*> buffers_;
};

const char* const kGradientSide[] = {"dout", "dq", "dk", "dv"};

TEST_F(BackwardValidation, BaselineIsValid) {
  TILEATTN_TRACE_SEED();
  for (const Backend backend : {Backend::reference, Backend::cpu})
    for (const bool deterministic : {false, true}) {
      poison_gradients();
      AttentionBackwardArgs a = args();
      a.mask = mask_.view();
      a.deterministic = deterministic;
      EXPECT_NO_THROW(attention_backward(a, {backend}));
      EXPECT_EQ(dq_.count_nan() + dk_.count_nan() + dv_.count_nan(), 0);
    }
}

// attention_backward_workspace_bytes: 0 for host calls (the CPU backends take no device
// workspace), and the arguments are validated as attention_backward validates them.
TEST_F(BackwardValidation, WorkspaceBytes) {
  TILEATTN_TRACE_SEED();
  for (const Backend backend : {Backend::automatic, Backend::reference, Backend::cpu})
    EXPECT_EQ(attention_backward_workspace_bytes(args(), {backend}), 0u);
  AttentionBackwardArgs a = args();
  a.lse = Tensor{};
  expect_argument_error([&] { attention_backward_workspace_bytes(a); }, "lse", "required");
  a = args();
  a.dq = k_.view();
  expect_argument_error([&] { attention_backward_workspace_bytes(a); }, "dq", "");
  Context ctx;
  ctx.threads = -1;
  expect_argument_error([&] { attention_backward_workspace_bytes(args(), ctx); }, "ctx.threads",
                        "");
}

// No query rows: dk and dv are zero. No keys: dq is zero.
TEST_F(BackwardValidation, EmptyLengthsGiveZeroGradients) {
  TILEATTN_TRACE_SEED();
  HostTensor q = HostTensor::contiguous(DType::f32, {B, 0, Hq, D});
  HostTensor out = HostTensor::contiguous(DType::f32, {B, 0, Hq, Dv});
  HostTensor lse = HostTensor::contiguous(DType::f32, {B, Hq, 0});
  HostTensor dq = HostTensor::contiguous(DType::f32, {B, 0, Hq, D});
  HostTensor k = HostTensor::contiguous(DType::f32, {B, 0, Hkv, D});
  HostTensor v = HostTensor::contiguous(DType::f32, {B, 0, Hkv, Dv});
  HostTensor dk = HostTensor::contiguous(DType::f32, {B, 0, Hkv, D});
  HostTensor dv = HostTensor::contiguous(DType::f32, {B, 0, Hkv, Dv});
  for (const Backend backend : {Backend::cpu, Backend::reference})
    for (const bool deterministic : {false, true}) {
      SCOPED_TRACE(to_string(backend));
      poison_gradients();
      AttentionBackwardArgs a = args();
      a.q = q.view(), a.out = out.view(), a.lse = lse.view(), a.dq = dq.view();
      a.deterministic = deterministic;
      HostTensor empty_dout = HostTensor::contiguous(DType::f32, {B, 0, Hq, Dv});
      a.dout = empty_dout.view();
      EXPECT_NO_THROW(attention_backward(a, {backend}));
      for (const float x : dk_.to_f32()) EXPECT_EQ(x, 0.0f);
      for (const float x : dv_.to_f32()) EXPECT_EQ(x, 0.0f);

      poison_gradients();
      HostTensor out_no_keys = HostTensor::contiguous(DType::f32, {B, Lq, Hq, Dv});
      HostTensor lse_no_keys = HostTensor::contiguous(DType::f32, {B, Hq, Lq});
      a = args();
      a.k = k.view(), a.v = v.view(), a.dk = dk.view(), a.dv = dv.view();
      a.out = out_no_keys.view(), a.lse = lse_no_keys.view();
      attention_forward(a, {backend});
      a.deterministic = deterministic;
      EXPECT_NO_THROW(attention_backward(a, {backend}));
      for (const float x : dq_.to_f32()) EXPECT_EQ(x, 0.0f);
    }
}

TEST_F(BackwardValidation, LseIsRequired) {
  AttentionBackwardArgs a = args();
  a.lse = {};
  expect_error(a, "lse", "required");
}

TEST_F(BackwardValidation, ForwardArgumentsAreChecked) {
  AttentionBackwardArgs a = args();
  HostTensor k16 = HostTensor::contiguous(DType::f16, {B, Lk, Hkv, D});
  a.k = k16.view();
  expect_error(a, "k", "differs from q's");
  a = args();
  a.causal = true, a.window_left = -2;
  expect_error(a, "window_left");
}

TEST_F(BackwardValidation, MissingGradientTensors) {
  for (const char* name : kGradientSide) {
    SCOPED_TRACE(name);
    AttentionBackwardArgs a = args();
    a.*member(name) = {};
    expect_error(a, name, "required");
  }
}

TEST_F(BackwardValidation, WrongRanks) {
  for (const char* name : kGradientSide) {
    SCOPED_TRACE(name);
    AttentionBackwardArgs a = args();
    Tensor& t = a.*member(name);
    t.rank = 3;
    expect_error(a, name, "expected rank 4");
  }
}

TEST_F(BackwardValidation, BadDtypes) {
  for (const char* name : kGradientSide) {
    SCOPED_TRACE(name);
    AttentionBackwardArgs a = args();
    (a.*member(name)).dtype = DType::i32;
    expect_error(a, name, "dtype must be f32, f16 or bf16");
  }
}

TEST_F(BackwardValidation, MixedGradientDtypesAreAccepted) {
  TILEATTN_TRACE_SEED();
  HostTensor dq16 = HostTensor::contiguous(DType::bf16, {B, Lq, Hq, D});
  HostTensor dout16 = HostTensor::contiguous(DType::f16, {B, Lq, Hq, Dv});
  dout16.fill(0.5f);
  AttentionBackwardArgs a = args();
  a.dq = dq16.view(), a.dout = dout16.view();
  EXPECT_NO_THROW(attention_backward(a, {Backend::cpu}));
  EXPECT_EQ(dq16.count_nan(), 0);
}

TEST_F(BackwardValidation, ShapeMismatches) {
  const struct {
    const char* name;
    int dim;
    const char* model;
  } cases[] = {{"dout", 3, "out"}, {"dout", 1, "out"}, {"dq", 3, "q"}, {"dq", 2, "q"},
               {"dk", 1, "k"},     {"dk", 0, "k"},     {"dv", 2, "v"}, {"dv", 3, "v"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " dim " + std::to_string(c.dim));
    AttentionBackwardArgs a = args();
    Tensor& t = a.*member(c.name);
    t.shape[c.dim] += 1;
    expect_error(a, c.name, std::string("must equal ") + c.model + "'s");
  }
}

TEST_F(BackwardValidation, DeviceMismatch) {
  for (const char* name : kGradientSide) {
    SCOPED_TRACE(name);
    AttentionBackwardArgs a = args();
    (a.*member(name)).device = Device::cuda;
    expect_error(a, name, "same device as q");
  }
}

TEST_F(BackwardValidation, StridesAreChecked) {
  for (const char* name : kGradientSide) {
    SCOPED_TRACE(name);
    AttentionBackwardArgs a = args();
    (a.*member(name)).stride[3] = 2;
    expect_error(a, name, "contiguous");
  }
  AttentionBackwardArgs a = args();
  a.dk.stride[1] = -1;
  expect_error(a, "dk", "negative");
  a = args();
  a.dq.stride[0] = std::numeric_limits<std::int64_t>::max() / 2;
  expect_error(a, "dq", "overflows");
}

TEST_F(BackwardValidation, GradientsMustNotOverlap) {
  const struct {
    const char* gradient;
    const HostTensor* target;
    const char* fragment;
  } cases[] = {{"dq", &q_, "overlaps an input"},    {"dk", &dout_, "overlaps an input"},
               {"dv", &lse_, "overlaps an input"},  {"dq", &out_, "overlaps an input"},
               {"dv", &mask_, "overlaps an input"}, {"dk", &k_, "overlaps an input"},
               {"dk", &dq_, "another gradient"},    {"dv", &dk_, "another gradient"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.gradient);
    AttentionBackwardArgs a = args();
    a.mask = mask_.view();
    Tensor& t = a.*member(c.gradient);
    t.data = const_cast<std::uint8_t*>(c.target->bytes().data());
    expect_error(a, c.gradient, c.fragment);
  }
}

TEST_F(BackwardValidation, BadDropout) {
  for (const float p : {-0.1f, 1.0f, 1.5f, kNaN}) {
    SCOPED_TRACE(p);
    AttentionBackwardArgs a = args();
    a.dropout_p = p;
    expect_error(a, "dropout_p", "[0, 1)");
    out_.poison();
    expect_argument_error([&] { attention_forward(a, {Backend::cpu}); }, "dropout_p", "[0, 1)");
    EXPECT_EQ(out_.count_nan(), out_.numel()) << "the forward wrote out";
  }
}

TEST_F(BackwardValidation, CudaBackendWithHostTensors) {
  expect_error(args(), "ctx.backend",
               build_info().cuda ? "needs device tensors" : "no CUDA backend", {Backend::cuda});
}

TEST_F(BackwardValidation, NegativeThreads) {
  Context ctx;
  ctx.threads = -1;
  expect_error(args(), "ctx.threads", "must be in [0, 1024]", ctx);
}

// Rank outside 1..4, a shape with no data, a misaligned pointer, an enum value out of range:
// refused for the gradient-side tensors as for the forward's.
TEST_F(BackwardValidation, GradientTensorHeaders) {
  for (const char* name : kGradientSide) {
    SCOPED_TRACE(name);
    for (const int rank : {1000, -1, 5}) {
      AttentionBackwardArgs a = args();
      (a.*member(name)).rank = rank;
      expect_error(a, name, "rank must be 1..4, got " + std::to_string(rank));
    }
    AttentionBackwardArgs a = args();
    (a.*member(name)).data = nullptr;
    expect_error(a, name, "is required but has no data pointer");
    a = args();
    Tensor& t = a.*member(name);
    t.data = static_cast<void*>(static_cast<std::uint8_t*>(t.data) + 2);
    expect_error(a, name, "is not aligned to its element size");
    a = args();
    (a.*member(name)).dtype = static_cast<DType>(99);
    expect_error(a, name, "dtype value 99 is not a tileattn::DType");
  }
  AttentionBackwardArgs a = args();  // lse with a shape and no data is not "missing"
  a.lse.data = nullptr;
  expect_error(a, "lse", "has a shape but no data pointer");
}

TEST_F(BackwardValidation, GradientsWithInternalOverlap) {
  for (const char* name : {"dq", "dk", "dv"}) {
    SCOPED_TRACE(name);
    for (const int d : {0, 1, 2}) {
      AttentionBackwardArgs a = args();
      (a.*member(name)).stride[d] = 0;
      expect_error(a, name, "share memory");
    }
    AttentionBackwardArgs a = args();
    Tensor& t = a.*member(name);
    t.stride[2] = t.shape[3] - 1;  // heads overlap by one element
    expect_error(a, name, "share memory");
  }
  // dout is an input: a broadcast dout (one row for every query) is accepted.
  AttentionBackwardArgs a = args();
  a.dout.stride[1] = 0;
  EXPECT_NO_THROW(attention_backward(a, {Backend::reference}));
  EXPECT_EQ(dq_.count_nan(), 0);
}

TEST_F(BackwardValidation, ThreadsAboveTheCap) {
  Context ctx;
  ctx.threads = kMaxThreads + 1;
  expect_error(args(), "ctx.threads", "must be in [0, 1024]", ctx);
  ctx.threads = 64;
  poison_gradients();
  EXPECT_NO_THROW(attention_backward(args(), ctx));
  EXPECT_EQ(dq_.count_nan(), 0);
}

}  // namespace
}  // namespace tileattn::test
