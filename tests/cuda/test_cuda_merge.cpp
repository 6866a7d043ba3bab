// merge_attention_states on the device equals the host merge (the same special rows: a part with
// lse = -inf never read, all parts empty, poisoned parts), for 16-bit and f32 parts, padded
// and varlen shapes.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_case.hpp"

namespace tileattn::test {
namespace {

TEST(CudaMerge, MatchesHostMerge) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool packed : {false, true}) {
      const std::int64_t B = 2, L = 37, H = 3, D = 72, parts = 3;
      const std::vector<std::int64_t> out_shape =
          packed ? std::vector<std::int64_t>{L, H, D} : std::vector<std::int64_t>{B, L, H, D};
      const std::vector<std::int64_t> lse_shape =
          packed ? std::vector<std::int64_t>{H, L} : std::vector<std::int64_t>{B, H, L};
      std::vector<HostTensor> outs, lses;
      for (int i = 0; i < parts; ++i) {
        outs.push_back(HostTensor::contiguous(dtype, out_shape));
        lses.push_back(HostTensor::contiguous(DType::f32, lse_shape));
        outs.back().fill_normal(rng);
        lses.back().fill_normal(rng, 4.0f);
      }
      // Special rows: part 0 empty in row 0 with NaN out there; every part empty in row 1;
      // part 2 poisoned in row 2.
      for (std::int64_t d = 0; d < D; ++d) outs[0].set(d, NAN);
      lses[0].set(0, -INFINITY);
      for (int i = 0; i < parts; ++i) lses[static_cast<std::size_t>(i)].set(1, -INFINITY);
      lses[2].set(2, NAN);
      std::vector<Tensor> host_outs, host_lses;
      std::vector<std::unique_ptr<DeviceTensor>> dev;
      std::vector<Tensor> dev_outs, dev_lses;
      for (int i = 0; i < parts; ++i) {
        host_outs.push_back(outs[static_cast<std::size_t>(i)].view());
        host_lses.push_back(lses[static_cast<std::size_t>(i)].view());
        dev.push_back(std::make_unique<DeviceTensor>(outs[static_cast<std::size_t>(i)]));
        dev_outs.push_back(dev.back()->view());
        dev.push_back(std::make_unique<DeviceTensor>(lses[static_cast<std::size_t>(i)]));
        dev_lses.push_back(dev.back()->view());
      }
      HostTensor want = HostTensor::contiguous(dtype, out_shape);
      HostTensor want_lse = HostTensor::contiguous(DType::f32, lse_shape);
      merge_attention_states(host_outs, host_lses, want.view(), want_lse.view());
      HostTensor got = HostTensor::contiguous(dtype, out_shape);
      HostTensor got_lse = HostTensor::contiguous(DType::f32, lse_shape);
      got.poison();
      got_lse.poison();
      DeviceTensor d_out(got), d_lse(got_lse);
      merge_attention_states(dev_outs, dev_lses, d_out.view(), d_lse.view());
      TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
      d_out.download(got);
      d_lse.download(got_lse);
      const std::vector<float> g = got.to_f32(), w = want.to_f32();
      std::int64_t bad = 0;
      for (std::size_t e = 0; e < g.size(); ++e) {
        const bool both_nan = std::isnan(g[e]) && std::isnan(w[e]);
        // expf / logf differ by an ulp or two between host and device.
        if (!both_nan && !(std::abs(g[e] - w[e]) <= 1e-5f + 8e-3f * std::abs(w[e]))) ++bad;
      }
      EXPECT_EQ(bad, 0) << to_string(dtype) << (packed ? " varlen" : " padded");
      const std::vector<float> gl = got_lse.to_f32(), wl = want_lse.to_f32();
      for (std::size_t e = 0; e < gl.size(); ++e)
        EXPECT_TRUE((std::isnan(gl[e]) && std::isnan(wl[e])) || gl[e] == wl[e] ||
                    std::abs(gl[e] - wl[e]) <= 1e-5f)
            << "lse " << e << ": " << gl[e] << " vs " << wl[e];
    }
  }
}

}  // namespace
}  // namespace tileattn::test
