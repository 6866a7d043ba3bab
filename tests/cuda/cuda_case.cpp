#include "cuda_case.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

namespace tileattn::test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kNaiveFactor = 2.0, kRelL2Epsilon = 1e-6, kMaxAbsEpsilon = 1e-6;
constexpr double kLseEpsilon = 1e-4;

}  // namespace

bool cuda_available() {
  static const bool available = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return available;
}

DeviceTensor::DeviceTensor(const HostTensor& host) {
  view_ = host.view();
  if (!view_.present()) return;
  bytes_ = std::max<std::size_t>(host.bytes().size(), 16);  // never a null pointer for 0 elements
  if (cudaMalloc(&data_, bytes_) != cudaSuccess) throw Error("test: cudaMalloc failed");
  if (!host.bytes().empty() && cudaMemcpy(data_, host.bytes().data(), host.bytes().size(),
                                          cudaMemcpyHostToDevice) != cudaSuccess)
    throw Error("test: cudaMemcpy to the device failed");
  view_.data = data_;
  view_.device = Device::cuda;
  view_.device_index = 0;
}

DeviceTensor::~DeviceTensor() {
  if (data_ != nullptr) cudaFree(data_);
}

void DeviceTensor::download(HostTensor& host) const {
  if (data_ == nullptr || host.bytes().empty()) return;
  if (cudaMemcpy(host.data(), data_, host.bytes().size(), cudaMemcpyDeviceToHost) != cudaSuccess)
    throw Error("test: cudaMemcpy to the host failed");
}

CaseResult run_cuda_case(const Case& c, DType dtype, cudaStream_t stream) {
  Rng rng = make_rng();
  const Problem problem(c, dtype, rng);
  const std::int64_t Dv = problem.Dv;
  CaseResult result;

  const HostTensor ref_out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, Dv});
  const HostTensor ref_lse = HostTensor::contiguous(DType::f32, {c.B, c.Hq, c.Lq});
  {
    AttentionArgs a = problem.args(ref_out, &ref_lse);
    attention_forward(a, {Backend::reference, 0});
  }
  const std::vector<float> ref = ref_out.to_f32(), ref_lse_values = ref_lse.to_f32();

  HostTensor out = problem.make_out();  // poisoned: NaN in every logical element
  HostTensor lse = problem.make_lse();
  const AttentionArgs host_args = problem.args(out, c.lse ? &lse : nullptr);
  SCOPED_TRACE(describe(host_args));
  const NaiveResult naive = naive_attention(host_args);

  const DeviceTensor q(problem.q), k(problem.k), v(problem.v), mask(problem.mask),
      key_lengths(problem.key_lengths), alibi(problem.alibi), out_dev(out), lse_dev(lse);
  AttentionArgs args = host_args;
  args.q = q.view();
  args.k = k.view();
  args.v = v.view();
  args.out = out_dev.view();
  if (c.lse) args.lse = lse_dev.view();
  if (c.mask != MaskKind::none) args.mask = mask.view();
  if (c.key_lengths != KeyLengths::none) args.key_lengths = key_lengths.view();
  if (c.alibi != Alibi::none) args.alibi_slopes = alibi.view();

  Context ctx;
  ctx.backend = Backend::cuda;
  ctx.cuda_stream = stream;
  attention_forward(args, ctx);
  const cudaError_t status = cudaStreamSynchronize(stream);
  EXPECT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
  out_dev.download(out);
  if (c.lse) lse_dev.download(lse);
  EXPECT_TRUE(out.padding_intact()) << "out was written outside its logical elements";
  EXPECT_TRUE(lse.padding_intact()) << "lse was written outside its logical elements";

  const std::vector<float> got = out.to_f32();
  result.kernel = compare(got, ref);
  result.naive = compare(naive.out, ref);
  result.naive_lse = compare_lse(naive.lse, ref_lse_values);
  EXPECT_EQ(result.kernel.nonfinite, 0)
      << "out has NaN/inf (poison left unwritten?) where the reference is finite; "
      << result.kernel.str();

  std::int64_t masked_rows = 0, bad_masked = 0;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.Hq; ++h)
      for (std::int64_t i = 0; i < c.Lq; ++i) {
        if (ref_lse_values[static_cast<std::size_t>((b * c.Hq + h) * c.Lq + i)] != kNegInf)
          continue;
        ++masked_rows;
        for (std::int64_t d = 0; d < Dv; ++d) {
          const float x = got[static_cast<std::size_t>(((b * c.Lq + i) * c.Hq + h) * Dv + d)];
          if (x != 0.0f && bad_masked++ == 0)
            ADD_FAILURE() << "fully masked row (b " << b << ", h " << h << ", i " << i
                          << ") has out[" << d << "] = " << x << ", expected 0";
        }
      }
  EXPECT_EQ(bad_masked, 0) << "non-zero outputs in " << masked_rows << " fully masked rows";

  // Every storage dtype, f32 included (the f32 kernels compute in f32), within 2x the naive
  // computation at the storage precision.
  EXPECT_LE(result.kernel.rel_l2, kNaiveFactor * result.naive.rel_l2 + kRelL2Epsilon)
      << "kernel: " << result.kernel.str() << "\nnaive same-precision: " << result.naive.str();
  EXPECT_LE(result.kernel.max_abs, kNaiveFactor * result.naive.max_abs + kMaxAbsEpsilon)
      << "kernel: " << result.kernel.str() << "\nnaive same-precision: " << result.naive.str();
  if (c.lse) {
    result.kernel_lse = compare_lse(lse.to_f32(), ref_lse_values);
    EXPECT_EQ(result.kernel_lse.mismatched_inf, 0) << result.kernel_lse.str();
    const double bound = kNaiveFactor * result.naive_lse.max_abs + kLseEpsilon;
    EXPECT_LE(result.kernel_lse.max_abs, bound)
        << "kernel: " << result.kernel_lse.str() << "\nnaive: " << result.naive_lse.str();
  }

  std::cout << "[ stats ] cuda " << to_string(dtype) << " out " << to_string(problem.out_dtype)
            << " " << c.name << " rel_l2 " << result.kernel.rel_l2 << " max_abs "
            << result.kernel.max_abs << " naive_rel_l2 " << result.naive.rel_l2 << " naive_max_abs "
            << result.naive.max_abs << " lse_max_abs " << result.kernel_lse.max_abs
            << " naive_lse_max_abs " << result.naive_lse.max_abs << " masked_rows " << masked_rows
            << "\n";
  return result;
}

}  // namespace tileattn::test
