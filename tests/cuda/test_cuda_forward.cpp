// The CUDA flash forward (Backend::cuda) against the double-precision reference: every feature,
// every head-dim bucket and the awkward shapes, for f16, bf16 and f32 storage. The "Small" cases
// are the ones scripts/gpu/check.sh runs under compute-sanitizer.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda_case.hpp"

namespace tileattn::test {
namespace {

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& tweak) {
    Case c;
    c.name = name;
    tweak(c);
    cases.push_back(c);
  };
  // Small shapes (also the sanitizer set).
  add("Small_plain", [](Case& c) { c.B = 2, c.Lq = c.Lk = 64, c.Hq = c.Hkv = 3, c.D = 64; });
  add("Small_single_query_key", [](Case& c) { c.Lq = c.Lk = 1, c.Hq = c.Hkv = 4; });
  add("Small_causal_window_mask", [](Case& c) {
    c.B = 2, c.Lq = 70, c.Lk = 150, c.D = 64, c.causal = true, c.window_left = 40;
    c.mask = MaskKind::bool_batch;
  });
  add("Small_odd_dim_padded", [](Case& c) {
    c.Lq = 33, c.Lk = 70, c.D = 100, c.layout = Layout::padded, c.key_lengths = KeyLengths::i32;
    c.B = 3;
  });
  add("Small_gqa_softcap_alibi", [](Case& c) {
    c.Lq = 65, c.Lk = 130, c.Hq = 4, c.Hkv = 2, c.D = 128, c.softcap = 2.0f, c.alibi = Alibi::heads;
  });

  // The fast kernels' key-block loop (at D 128 unrolled by two) with odd and even block counts.
  add("Small_fast_d128_odd_blocks", [](Case& c) { c.Lq = 130, c.Lk = 530, c.D = 128; });
  add("Small_fast_d128_even_blocks", [](Case& c) { c.Lq = 70, c.Lk = 400, c.D = 128; });
  // At D 256 (block_n 64) a causal tile's last key block holds no key for warpgroup 0 (rows
  // 0-63 of the tile): the sm90 fast kernel skips it there. 320 rows: the last tile has 64, so
  // warpgroup 1 has none. Lq > Lk bottom-right: a tile whose only block warpgroup 0 skips.
  add("Small_causal_skip_block_d256",
      [](Case& c) { c.B = 2, c.Lq = c.Lk = 320, c.Hq = 4, c.Hkv = 2, c.D = 256, c.causal = true; });
  add("Small_causal_skip_block_d256_lq_gt_lk",
      [](Case& c) { c.Lq = 300, c.Lk = 100, c.D = 256, c.causal = true; });
  add("Small_dropout", [](Case& c) {
    c.B = 2, c.Lq = 70, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.D = 64, c.dropout = 0.3f;
  });
  // Dropout: the same Philox decisions as the reference (a different mask fails the tolerance).
  add("dropout_causal_long",
      [](Case& c) { c.Lq = 300, c.Lk = 300, c.D = 128, c.causal = true, c.dropout = 0.5f; });
  add("dropout_everything", [](Case& c) {
    c.B = 2, c.Lq = 77, c.Lk = 190, c.Hq = 4, c.Hkv = 2, c.D = 96, c.causal = true;
    c.window_left = 50, c.mask = MaskKind::bool_batch, c.key_lengths = KeyLengths::i32;
    c.softcap = 8.0f, c.alibi = Alibi::heads, c.dropout = 0.6f;
  });
  add("dropout_d256", [](Case& c) { c.Lq = 130, c.Lk = 260, c.D = 256, c.dropout = 0.1f; });

  // Plain attention; lengths and head dims that are multiples of nothing.
  add("plain_no_lse", [](Case& c) { c.Lq = c.Lk = 65, c.D = 64, c.lse = false; });
  add("single_query", [](Case& c) { c.Lq = 1, c.Lk = 300, c.D = 128; });
  add("single_key", [](Case& c) { c.Lq = 63, c.Lk = 1, c.D = 40; });
  add("no_keys", [](Case& c) { c.Lq = 5, c.Lk = 0, c.D = 16; });
  for (const std::int64_t L : {17, 63, 129, 257}) {
    add("len_" + std::to_string(L),
        [L](Case& c) { c.Lq = c.Lk = L, c.Hq = 2, c.Hkv = 1, c.D = 64; });
  }
  add("lq_17_lk_63", [](Case& c) { c.Lq = 17, c.Lk = 63, c.D = 96; });
  add("lq_129_lk_257", [](Case& c) { c.Lq = 129, c.Lk = 257, c.D = 128; });
  for (const std::int64_t D : {1, 24, 40, 64, 72, 96, 100, 128, 160, 192, 200, 256}) {
    add("dim_" + std::to_string(D), [D](Case& c) { c.Lq = 133, c.Lk = 170, c.D = D; });
  }
  add("dv_lt_d", [](Case& c) { c.Lq = 40, c.Lk = 150, c.D = 128, c.Dv = 64; });
  add("dv_gt_d", [](Case& c) { c.Lq = 40, c.Lk = 150, c.D = 24, c.Dv = 200; });
  add("dv_odd", [](Case& c) { c.Lq = 19, c.Lk = 137, c.D = 64, c.Dv = 3; });
  // The 256 bucket with the output's columns all in the first 128 (a staged epilogue's second
  // half writes nothing) and ending inside the second.
  add("Small_d256_dv_lt_128", [](Case& c) { c.Lq = 70, c.Lk = 150, c.D = 200, c.Dv = 64; });
  add("Small_d256_dv_200", [](Case& c) { c.Lq = 130, c.Lk = 90, c.D = 144, c.Dv = 200; });

  // Heads: GQA, MQA.
  add("gqa", [](Case& c) { c.B = 2, c.Lq = 100, c.Lk = 200, c.Hq = 8, c.Hkv = 2, c.D = 64; });
  add("mqa", [](Case& c) { c.Lq = 100, c.Lk = 200, c.Hq = 6, c.Hkv = 1, c.D = 128; });

  // Causal, both alignments, Lq != Lk (whole masked rows when Lq > Lk, bottom-right).
  add("causal_bottom_right", [](Case& c) { c.B = 2, c.Lq = c.Lk = 300, c.causal = true; });
  add("causal_top_left",
      [](Case& c) { c.Lq = c.Lk = 300, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_br_lq_gt_lk", [](Case& c) { c.Lq = 300, c.Lk = 100, c.causal = true, c.D = 64; });
  add("causal_br_lq_lt_lk", [](Case& c) { c.Lq = 100, c.Lk = 300, c.causal = true, c.D = 128; });
  add("causal_tl_lq_gt_lk",
      [](Case& c) { c.Lq = 300, c.Lk = 100, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_tl_lq_lt_lk", [](Case& c) {
    c.Lq = 100, c.Lk = 300, c.causal = true, c.alignment = Alignment::top_left, c.D = 64;
  });

  // Sliding windows.
  add("window_left", [](Case& c) { c.Lq = c.Lk = 400, c.window_left = 50, c.D = 64; });
  add("window_both",
      [](Case& c) { c.Lq = 200, c.Lk = 450, c.window_left = 20, c.window_right = 70; });
  add("window_zero", [](Case& c) { c.Lq = c.Lk = 130, c.window_left = 0, c.window_right = 0; });
  add("window_causal_tl", [](Case& c) {
    c.Lq = c.Lk = 333, c.causal = true, c.window_left = 100, c.alignment = Alignment::top_left;
  });

  // Masks, broadcast every way.
  add("mask_bool_2d", [](Case& c) { c.Lq = 70, c.Lk = 90, c.mask = MaskKind::bool_2d; });
  add("mask_bool_3d", [](Case& c) { c.Lq = 70, c.Lk = 90, c.mask = MaskKind::bool_3d; });
  add("mask_bool_batch",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.mask = MaskKind::bool_batch; });
  add("mask_bool_full",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.mask = MaskKind::bool_full; });
  add("mask_bool_stride0",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.mask = MaskKind::bool_stride0; });
  add("mask_key_padding", [](Case& c) {
    c.B = 3, c.Lq = 70, c.Lk = 190, c.mask = MaskKind::bool_key_padding, c.D = 128;
  });
  add("mask_additive_2d", [](Case& c) { c.Lq = 70, c.Lk = 190, c.mask = MaskKind::additive_2d; });
  add("mask_additive_full_causal", [](Case& c) {
    c.B = 2, c.Lq = 70, c.Lk = 90, c.mask = MaskKind::additive_full, c.causal = true;
  });

  // Key lengths (batch entries of full, zero and random length), with causal bottom-right.
  add("key_lengths_i32",
      [](Case& c) { c.B = 4, c.Lq = 100, c.Lk = 200, c.key_lengths = KeyLengths::i32; });
  add("key_lengths_i64_causal", [](Case& c) {
    c.B = 4, c.Lq = 100, c.Lk = 200, c.key_lengths = KeyLengths::i64, c.causal = true, c.D = 128;
  });

  // Softcap, ALiBi, scale.
  add("softcap", [](Case& c) { c.Lq = 100, c.Lk = 200, c.softcap = 1.5f; });
  add("alibi_heads_causal", [](Case& c) {
    c.Lq = 100, c.Lk = 200, c.Hq = 4, c.Hkv = 4, c.alibi = Alibi::heads, c.causal = true;
  });
  add("alibi_batch_heads",
      [](Case& c) { c.B = 2, c.Lq = 100, c.Lk = 80, c.alibi = Alibi::batch_heads; });
  add("everything", [](Case& c) {
    c.B = 3, c.Lq = 90, c.Lk = 150, c.Hq = 4, c.Hkv = 2, c.D = 72, c.causal = true;
    c.window_left = 60, c.mask = MaskKind::additive_full, c.key_lengths = KeyLengths::i32;
    c.softcap = 3.0f, c.alibi = Alibi::batch_heads, c.layout = Layout::bhsd;
  });
  add("scale_negative", [](Case& c) { c.Lq = 50, c.Lk = 77, c.scale = -0.2f; });
  add("scale_large", [](Case& c) { c.Lq = 50, c.Lk = 77, c.scale = 1.0f, c.D = 64; });
  // Running maxima that jump by more than 2^8, and by more than f32's range (2^128), from one
  // key block to the next: the sm90 kernels' speculative softmax must fall back.
  add("key_ramp_d64",
      [](Case& c) { c.Lq = 70, c.Lk = 900, c.D = 64, c.scale = 1.0f, c.key_ramp = 40; });
  add("key_ramp_causal_d128", [](Case& c) {
    c.Lq = c.Lk = 700, c.D = 128, c.scale = 1.0f, c.key_ramp = 40, c.causal = true;
  });
  // D 64 skips the second half of a masked block for warps that see none of its keys (the
  // causal diagonal's upper rows; a window's right edge): with the maxima in the diagonal block
  // (the ramp), and with a two-sided window off the diagonal.
  add("key_ramp_causal_d64", [](Case& c) {
    c.Lq = c.Lk = 700, c.D = 64, c.scale = 1.0f, c.key_ramp = 40, c.causal = true;
  });
  add("window_both_d64",
      [](Case& c) { c.Lq = 200, c.Lk = 450, c.window_left = 20, c.window_right = 37, c.D = 64; });
  add("key_ramp_d256",
      [](Case& c) { c.Lq = 140, c.Lk = 500, c.D = 256, c.scale = 0.5f, c.key_ramp = 40; });

  // Layouts and output dtypes.
  add("layout_bhsd",
      [](Case& c) { c.B = 2, c.Lq = 130, c.Lk = 130, c.layout = Layout::bhsd, c.D = 128; });
  add("layout_padded",
      [](Case& c) { c.B = 2, c.Lq = 130, c.Lk = 70, c.layout = Layout::padded, c.D = 64; });
  add("layout_padded_causal", [](Case& c) {
    c.Lq = 130, c.Lk = 170, c.layout = Layout::padded, c.D = 128, c.causal = true;
  });
  add("out_f32", [](Case& c) { c.Lq = 130, c.Lk = 170, c.out = OutDType::f32, c.D = 128; });
  add("out_bf16", [](Case& c) { c.Lq = 130, c.Lk = 170, c.out = OutDType::bf16, c.D = 64; });

  // Many K/V blocks: the cp.async pipeline, block skipping, L2 order.
  add("long_causal_d128",
      [](Case& c) { c.Lq = c.Lk = 1100, c.Hq = c.Hkv = 2, c.D = 128, c.causal = true; });
  add("long_d64", [](Case& c) { c.B = 2, c.Lq = 700, c.Lk = 1500, c.Hq = 2, c.Hkv = 1, c.D = 64; });
  // More tiles than SMs, so that each persistent CTA runs several in a row (the sm90 kernels'
  // hand-over from one tile to the next), with tiles that have no key block in between: zero
  // key lengths, and bottom-right causal rows above every key.
  add("many_tiles_key_lengths_d64", [](Case& c) {
    c.B = 4, c.Hq = 16, c.Hkv = 4, c.Lq = 520, c.Lk = 200, c.D = 64;
    c.key_lengths = KeyLengths::i32;
  });
  add("many_tiles_causal_br_d128", [](Case& c) {
    c.B = 2, c.Hq = c.Hkv = 24, c.Lq = 700, c.Lk = 300, c.D = 128, c.causal = true;
    c.alignment = Alignment::bottom_right;
  });
  add("long_d256_window",
      [](Case& c) { c.Lq = c.Lk = 900, c.D = 256, c.window_left = 300, c.causal = true; });
  return cases;
}

using Param = std::tuple<DType, Case>;

class CudaForward : public ::testing::TestWithParam<Param> {};

TEST_P(CudaForward, MatchesReference) {
  TILEATTN_REQUIRE_CUDA();
  const auto& [dtype, c] = GetParam();
  // f32 storage computes with bf16 operands: at the ramp's logits (hundreds) their rounding
  // alone moves a logit by ~1, which no kernel can match; the 16-bit inputs are exact.
  if (dtype == DType::f32 && c.key_ramp != 0.0f) GTEST_SKIP() << "bf16 operands of f32 inputs";
  TILEATTN_TRACE_SEED();
  const CaseResult result = run_cuda_case(c, dtype);
  if (c.key_ramp != 0.0f) {
    // The ramp's rows are nearly one-hot, and the naive computation rounds their large scores
    // to 16 bits, so the rule relative to it is loose here (naive rel L2 ~4e-2 in bf16). The
    // kernel keeps f32 scores: it must stay near its output's own rounding (the H200 gave
    // 6-8e-5 in f16 and 3-6e-4 in bf16).
    EXPECT_LE(result.kernel.rel_l2, dtype == DType::f16 ? 5e-4 : 4e-3) << result.kernel.str();
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [dtype, c] = info.param;
  return c.name + "_" + to_string(dtype);
}

INSTANTIATE_TEST_SUITE_P(All, CudaForward,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16, DType::f32),
                                            ::testing::ValuesIn(all_cases())),
                         param_name);

TEST(CudaForwardApi, Small_RunsOnAStream) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  cudaStream_t stream = nullptr;
  TILEATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Case c;
  c.name = "stream";
  c.B = 2, c.Lq = 90, c.Lk = 200, c.D = 64, c.causal = true;
  run_cuda_case(c, DType::bf16, stream);
  TILEATTN_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Two persistent CTAs for every tile of a launch while in scope (cuda::g_sm90_max_ctas; the sm80
// kernels ignore it), so that each CTA runs many tiles in a row.
struct TwoCtas {
  TwoCtas() { cuda::g_sm90_max_ctas.store(2); }
  ~TwoCtas() { cuda::g_sm90_max_ctas.store(0); }
  TwoCtas(const TwoCtas&) = delete;
  TwoCtas& operator=(const TwoCtas&) = delete;
};

// Many tiles per CTA, with tiles of no key block (key length 0) in between, small enough for
// the sanitizers.
TEST(CudaForwardApi, Small_TwoCtasManyTiles) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const TwoCtas two_ctas;
  for (const int dim : {64, 128, 256}) {
    for (const bool causal : {false, true}) {
      Case c;
      c.name = "two_ctas_d" + std::to_string(dim) + (causal ? "_causal" : "");
      c.B = 3, c.Hq = 2, c.Hkv = 1, c.Lq = 300, c.Lk = 200, c.D = dim, c.causal = causal;
      c.key_lengths = KeyLengths::i32;
      run_cuda_case(c, DType::bf16);
    }
  }
}

// Many tiles per CTA with each query block's scores on another scale (query_ramp): the sm90
// forward's first block per tile starts from the previous tile's running max, here far too
// high (the next query block down) or far too low (the next head's first block), and must
// fall back to the block's own max. bf16 and f16 (their different floors for a guess).
TEST(CudaForwardApi, Small_TwoCtasQueryRamp) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const TwoCtas two_ctas;
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const int dim : {64, 128, 256}) {
      for (const bool causal : {false, true}) {
        Case c;
        c.name = "two_ctas_query_ramp_d" + std::to_string(dim) + (causal ? "_causal" : "");
        c.B = 2, c.Hq = 3, c.Hkv = 1, c.Lq = 520, c.Lk = 390, c.D = dim, c.causal = causal;
        c.query_ramp = 40.0f;  // logits' spread up to ~40x the default scale's
        const CaseResult result = run_cuda_case(c, dtype);
        EXPECT_LE(result.kernel.rel_l2, dtype == DType::f16 ? 5e-4 : 4e-3) << result.kernel.str();
      }
    }
  }
}

TEST(CudaForwardApi, HostTensorsAreRejected) {
  TILEATTN_REQUIRE_CUDA();
  Rng rng = make_rng();
  Case c;
  const Problem problem(c, DType::bf16, rng);
  HostTensor out = problem.make_out();
  Context ctx;
  ctx.backend = Backend::cuda;
  EXPECT_THROW(attention_forward(problem.args(out, nullptr), ctx), Error);
}

// Device-resident key lengths are not validated on the host: the kernel clamps them into [0, Lk].
TEST(CudaForwardApi, Small_DeviceKeyLengthsAreClamped) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  Case c;
  c.B = 2, c.Lq = 40, c.Lk = 90, c.D = 64, c.key_lengths = KeyLengths::i32;
  Problem problem(c, DType::f16, rng);
  problem.key_lengths.set(0, 0.0f);
  problem.key_lengths.set(1, static_cast<float>(c.Lk));
  HostTensor ref = problem.make_out();
  attention_forward(problem.args(ref, nullptr), {Backend::reference, 0});

  HostTensor wild = HostTensor::contiguous(DType::i32, {2});
  wild.set(0, -7.0f);
  wild.set(1, static_cast<float>(c.Lk + 1000));
  HostTensor out = problem.make_out();
  const DeviceTensor q(problem.q), k(problem.k), v(problem.v), lengths(wild), out_dev(out);
  AttentionArgs args = problem.args(out, nullptr);
  args.q = q.view(), args.k = k.view(), args.v = v.view(), args.out = out_dev.view();
  args.key_lengths = lengths.view();
  attention_forward(args, {Backend::cuda});
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  out_dev.download(out);
  const ErrorStats e = compare(out.to_f32(), ref.to_f32());
  EXPECT_EQ(e.nonfinite, 0) << e.str();
  EXPECT_LE(e.rel_l2, 2e-3) << e.str();
}

}  // namespace
}  // namespace tileattn::test
