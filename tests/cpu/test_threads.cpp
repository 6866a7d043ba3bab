// Thread count and determinism: the CPU result with 1 and 2 threads, and on repeated runs.
#include <cstdint>
#include <string>
#include <tuple>

#include "attention_case.hpp"

namespace tileattn::test {
namespace {

using Param = std::tuple<CpuIsa, DType>;

class CpuThreads : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto& [isa, dtype] = GetParam();
    if (static_cast<std::uint8_t>(isa) < static_cast<std::uint8_t>(build_info().best_cpu_isa))
      GTEST_SKIP() << to_string(isa) << " is not supported by this CPU";
  }

  // Several query tiles and key blocks per head, causal with a window and ragged key lengths so
  // that the work per tile is uneven.
  static Case problem_case() {
    Case c;
    c.name = "determinism";
    c.B = 3, c.Lq = scaled(300, 40), c.Lk = scaled(333, 40), c.Hq = 4, c.Hkv = 2, c.D = 64;
    c.causal = true, c.window_left = 150, c.key_lengths = KeyLengths::i32;
    return c;
  }

  static std::pair<std::vector<std::uint8_t>, std::vector<std::uint8_t>> run(const Problem& p,
                                                                             int threads) {
    HostTensor out = p.make_out(), lse = p.make_lse();
    Context ctx;
    ctx.backend = Backend::cpu;
    ctx.threads = threads;
    ctx.cpu_isa = std::get<0>(GetParam());
    attention_forward(p.args(out, &lse), ctx);
    EXPECT_EQ(out.count_nan(), 0) << "threads " << threads;
    return {out.bytes(), lse.bytes()};
  }
};

// The kernel partitions work over (batch, head, query tile) and reduces each output row in one
// thread in a fixed key order, so the thread count must not change a single bit.
TEST_P(CpuThreads, OneAndTwoThreadsAreBitwiseIdentical) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const Problem p(problem_case(), std::get<1>(GetParam()), rng);
  const auto one = run(p, 1), two = run(p, 2), again = run(p, 2), many = run(p, 3);
  EXPECT_TRUE(one.first == two.first) << "out differs between 1 and 2 threads";
  EXPECT_TRUE(one.second == two.second) << "lse differs between 1 and 2 threads";
  EXPECT_TRUE(two.first == again.first) << "out differs between two runs with 2 threads";
  EXPECT_TRUE(two.second == again.second) << "lse differs between two runs with 2 threads";
  EXPECT_TRUE(one.first == many.first) << "out differs between 1 and 3 threads";
}

// Whatever the thread count, the result is right.
TEST_P(CpuThreads, EveryThreadCountMatchesReference) {
  TILEATTN_TRACE_SEED();
  Case c = problem_case();
  for (const int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    c.threads = threads;
    run_case(c, std::get<1>(GetParam()), std::get<0>(GetParam()));
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(to_string(std::get<0>(info.param))) + "_" + to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, CpuThreads,
                         ::testing::Combine(::testing::Values(CpuIsa::amx_bf16, CpuIsa::avx512_bf16,
                                                              CpuIsa::avx512, CpuIsa::avx2,
                                                              CpuIsa::portable),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16)),
                         param_name);

}  // namespace
}  // namespace tileattn::test
