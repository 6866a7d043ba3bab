// make_tensor, bhsd_as_bshd, to_string, size_of and build_info.
#include <cstring>
#include <string>

#include "test_support.hpp"

namespace tileattn::test {
namespace {

TEST(MakeTensor, ContiguousRowMajorStrides) {
  float buffer[1];
  const Tensor t = make_tensor(buffer, DType::bf16, {2, 3, 4, 5});
  EXPECT_EQ(t.data, buffer);
  EXPECT_EQ(t.dtype, DType::bf16);
  EXPECT_EQ(t.device, Device::cpu);
  EXPECT_EQ(t.device_index, 0);
  ASSERT_EQ(t.rank, 4);
  const std::int64_t shape[] = {2, 3, 4, 5}, stride[] = {60, 20, 5, 1};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(t.shape[d], shape[d]) << d;
    EXPECT_EQ(t.stride[d], stride[d]) << d;
  }
  EXPECT_TRUE(t.present());
}

TEST(MakeTensor, EveryRank) {
  int buffer = 0;
  const Tensor r1 = make_tensor(&buffer, DType::i32, {7});
  EXPECT_EQ(r1.rank, 1);
  EXPECT_EQ(r1.shape[0], 7);
  EXPECT_EQ(r1.stride[0], 1);
  const Tensor r2 = make_tensor(&buffer, DType::boolean, {3, 9});
  EXPECT_EQ(r2.rank, 2);
  EXPECT_EQ(r2.stride[0], 9);
  EXPECT_EQ(r2.stride[1], 1);
  const Tensor r3 = make_tensor(&buffer, DType::f32, {2, 3, 4});
  EXPECT_EQ(r3.rank, 3);
  EXPECT_EQ(r3.stride[0], 12);
  EXPECT_EQ(r3.stride[1], 4);
  EXPECT_EQ(r3.stride[2], 1);
  // Unused dimensions stay zero.
  EXPECT_EQ(r1.shape[1], 0);
  EXPECT_EQ(r3.shape[3], 0);
}

TEST(MakeTensor, ConstDataAndDevice) {
  const float buffer[2] = {1.0f, 2.0f};
  const Tensor t = make_tensor(buffer, DType::f32, {2}, Device::cuda, 3);
  EXPECT_EQ(t.data, static_cast<const void*>(buffer));
  EXPECT_EQ(t.device, Device::cuda);
  EXPECT_EQ(t.device_index, 3);
}

TEST(MakeTensor, NullDataIsAbsent) {
  const Tensor t = make_tensor(static_cast<void*>(nullptr), DType::f32, {1});
  EXPECT_FALSE(t.present());
  EXPECT_FALSE(Tensor{}.present());
}

TEST(MakeTensor, RankOutOfRangeThrows) {
  float buffer[1];
  EXPECT_THROW(make_tensor(buffer, DType::f32, {}), Error);
  EXPECT_THROW(make_tensor(buffer, DType::f32, {1, 2, 3, 4, 5}), Error);
  try {
    make_tensor(buffer, DType::f32, {1, 1, 1, 1, 1});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
}

TEST(BhsdAsBshd, SwapsSequenceAndHeadAxes) {
  float buffer[1];
  const Tensor bhsd = make_tensor(buffer, DType::f16, {2, 3, 5, 8});  // [B, H, L, D]
  const Tensor t = bhsd_as_bshd(bhsd);
  EXPECT_EQ(t.data, buffer);
  EXPECT_EQ(t.dtype, DType::f16);
  ASSERT_EQ(t.rank, 4);
  const std::int64_t shape[] = {2, 5, 3, 8}, stride[] = {120, 8, 40, 1};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(t.shape[d], shape[d]) << d;
    EXPECT_EQ(t.stride[d], stride[d]) << d;
  }
  // Applying it twice gives the original view back.
  const Tensor back = bhsd_as_bshd(t);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(back.shape[d], bhsd.shape[d]);
    EXPECT_EQ(back.stride[d], bhsd.stride[d]);
  }
}

TEST(BhsdAsBshd, AddressesTheSameElements) {
  // Element (b, l, h, d) of the BSHD view is element (b, h, l, d) of the BHSD storage.
  constexpr std::int64_t B = 2, H = 3, L = 4, D = 5;
  float storage[B * H * L * D];
  for (std::int64_t n = 0; n < B * H * L * D; ++n) storage[n] = static_cast<float>(n);
  const Tensor t = bhsd_as_bshd(make_tensor(storage, DType::f32, {B, H, L, D}));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t offset =
              b * t.stride[0] + l * t.stride[1] + h * t.stride[2] + d * t.stride[3];
          EXPECT_EQ(storage[offset], static_cast<float>(((b * H + h) * L + l) * D + d));
        }
}

TEST(BhsdAsBshd, RejectsOtherRanks) {
  float buffer[1];
  EXPECT_THROW(bhsd_as_bshd(make_tensor(buffer, DType::f32, {2, 3, 4})), Error);
  EXPECT_THROW(bhsd_as_bshd(make_tensor(buffer, DType::f32, {2})), Error);
}

TEST(ToString, DTypes) {
  EXPECT_STREQ(to_string(DType::f32), "f32");
  EXPECT_STREQ(to_string(DType::f16), "f16");
  EXPECT_STREQ(to_string(DType::bf16), "bf16");
  EXPECT_STREQ(to_string(DType::boolean), "boolean");
  EXPECT_STREQ(to_string(DType::i32), "i32");
  EXPECT_STREQ(to_string(DType::i64), "i64");
  EXPECT_STREQ(to_string(static_cast<DType>(200)), "unknown");
}

TEST(ToString, CpuIsasAndBackends) {
  EXPECT_STREQ(to_string(CpuIsa::amx_bf16), "amx_bf16");
  EXPECT_STREQ(to_string(CpuIsa::avx512_bf16), "avx512_bf16");
  EXPECT_STREQ(to_string(CpuIsa::avx512), "avx512");
  EXPECT_STREQ(to_string(CpuIsa::avx2), "avx2");
  EXPECT_STREQ(to_string(CpuIsa::portable), "portable");
  EXPECT_STREQ(to_string(CpuIsa::best), "best");
  EXPECT_STREQ(to_string(Backend::automatic), "auto");
  EXPECT_STREQ(to_string(Backend::cpu), "cpu");
  EXPECT_STREQ(to_string(Backend::reference), "reference");
  EXPECT_STREQ(to_string(Backend::cuda), "cuda");
}

TEST(SizeOf, EveryDType) {
  EXPECT_EQ(size_of(DType::f32), 4u);
  EXPECT_EQ(size_of(DType::f16), 2u);
  EXPECT_EQ(size_of(DType::bf16), 2u);
  EXPECT_EQ(size_of(DType::boolean), 1u);
  EXPECT_EQ(size_of(DType::i32), 4u);
  EXPECT_EQ(size_of(DType::i64), 8u);
}

TEST(BuildInfo, IsConsistent) {
  const BuildInfo info = build_info();
  EXPECT_FALSE(info.version.empty());
  EXPECT_FALSE(info.compiler.empty());
  EXPECT_GE(info.max_threads, 1);
  EXPECT_NE(info.best_cpu_isa, CpuIsa::best);
  std::cout << "[ info ] tileattn " << info.version << ", " << info.compiler << ", best CPU ISA "
            << to_string(info.best_cpu_isa) << ", max threads " << info.max_threads << ", openmp "
            << info.openmp << ", cuda " << info.cuda << "\n";
}

}  // namespace
}  // namespace tileattn::test
