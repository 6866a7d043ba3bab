// Hopper (sm_90a) asynchronous machinery used by the warp-specialised kernels:
//   - mbarrier: init, arrive, arrive with an expected transaction byte count, parity wait;
//   - TMA: cp.async.bulk.tensor 4-D loads and plain bulk copies that complete on an mbarrier,
//     tensor-map prefetch,
//     the generic-to-async proxy fence;
//   - register reallocation between warpgroups (setmaxnreg);
//   - named barriers (bar.sync / bar.arrive with a thread count);
//   - wgmma issue helpers (fence, commit, wait, shared-memory descriptors, operand pinning).
// Semantics follow the PTX ISA. Phases of an mbarrier alternate 0, 1, 0, ...; waiting for parity
// P returns once the phase with parity P has completed (a fresh barrier is in phase 0, so a wait
// for parity 1 returns at once: producers use that for the first pass over an empty ring).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace tileattn::cuda {

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals)
               : "memory");
}

// Makes barrier initialisation visible to the async proxy (TMA) and other threads.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}

// One arrival that also announces `bytes` of TMA transactions the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, unsigned parity) {
  const std::uint32_t addr = smem_address(bar);
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (done == 0);
}

// A 32-bit word of shared memory, always loaded (not merged with earlier loads or hoisted).
__device__ __forceinline__ int ld_shared_volatile(std::uint32_t addr) {
  int value;
  asm volatile("ld.volatile.shared.b32 %0, [%1];\n" : "=r"(value) : "r"(addr) : "memory");
  return value;
}

__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// TMA load of one box of a 4-D tensor map at coordinates (c0 innermost .. c3) into shared
// memory; completes `bar`'s transaction count by the box's bytes (out-of-bounds parts are
// zero-filled and counted too).
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const void* map, std::uint64_t* bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(smem_address(bar))
      : "memory");
}

// The same with an L2 eviction-priority hint (a policy from l2_evict_first / l2_evict_last).
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const void* map, std::uint64_t* bar,
                                            int c0, int c1, int c2, int c3, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(smem_address(bar)), "l"(policy)
      : "memory");
}

// Asks L2 for one box of a 4-D tensor map at coordinates (c0 innermost .. c3), without a
// destination in shared memory or a barrier: a later TMA load of the box then hits L2.
__device__ __forceinline__ void tma_prefetch_4d(const void* map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// TMA store of one box of a 4-D tensor map at coordinates (c0 innermost .. c3) from shared
// memory, in the issuing thread's bulk async-group; out-of-bounds parts of the box are not
// written. The shared memory must not change until bulk_wait_all<true> says it was read.
__device__ __forceinline__ void tma_store_4d(const void* map, const void* smem_src, int c0, int c1,
                                             int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<std::uint64_t>(map)),
      "r"(smem_address(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Bulk (non-tensor) copy of `bytes` contiguous bytes from global to shared memory, completing
// on `bar` like a TMA load (addresses 16-byte aligned, bytes a multiple of 16).
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* src, unsigned bytes,
                                          std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<std::uint64_t>(src)), "r"(bytes), "r"(smem_address(bar))
      : "memory");
}

// Bulk reduction global[i] += shared[i] over `bytes` contiguous bytes of f32 (16-byte aligned,
// a multiple of 16), in the issuing thread's bulk async-group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const void* smem_src,
                                                    unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(dst)),
               "r"(smem_address(smem_src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until every committed bulk group has finished reading shared memory (kRead) or has
// completed.
template <bool kRead>
__device__ __forceinline__ void bulk_wait_all() {
  if constexpr (kRead)
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  else
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// 16-byte shared-memory store (an explicit st.shared: a generic pointer would cost a generic
// store, and `address` is a shared-window address as smem_address gives it).
__device__ __forceinline__ void store_shared_v4(std::uint32_t address, float a, float b, float c,
                                                float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}

// 8-byte shared-memory load from a shared-window address.
__device__ __forceinline__ float2 load_shared_v2(std::uint32_t address) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(address));
  return v;
}

// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// reads (wgmma operands, TMA stores) once a barrier has made them visible to the reader.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The same between the generic proxy and the async proxy (bulk copies, TMA) in global memory.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// L2 policies: data read once (evicted first) and data many CTAs re-read (evicted last).
__device__ __forceinline__ std::uint64_t l2_evict_first() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ std::uint64_t l2_evict_last() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ std::uint64_t l2_evict_normal() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// The registers a CTA of `threads` threads gets at launch (one CTA per SM: 65536 / threads per
// thread, rounded down to the allocation unit of 8) are all that setmaxnreg can move between its
// warpgroups: setmaxnreg.inc waits until the pool has the registers, so warpgroups that ask
// for more than the others gave back wait forever (a hang, not an error).
constexpr int setmaxnreg_pool(int threads) {
  return 65536 / threads / 8 * 8 * threads;
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Named barriers 1..15 (0 is __syncthreads); `threads` counts every participating thread.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// --- wgmma issue helpers -------------------------------------------------------------------

// wgmma shared-memory matrix descriptor: start address, leading / stride byte offsets (16-byte
// units), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ std::uint64_t sw128_desc(const void* smem, std::uint32_t lead_bytes,
                                                    std::uint32_t stride_bytes) {
  const std::uint32_t addr = smem_address(smem);
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<std::uint64_t>(lead_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

// The same descriptor as two halves, for loops that issue many wgmmas on a few tiles: the low
// word (start address in 16-byte units, leading byte offset), computed once per tile, plus a
// byte offset within the tile is one 32-bit add, and the high word (stride, swizzle) is a
// constant. Shared addresses are below 256 KB, so the add never carries out of the 14-bit
// start field. (Built from the pointer at each use, a descriptor takes five uniform
// instructions: about a third of the backward step's instructions go to descriptors.)
__device__ __forceinline__ std::uint32_t sw128_desc_lo(const void* smem, std::uint32_t lead_bytes) {
  return (smem_address(smem) >> 4) | ((lead_bytes >> 4) << 16);
}
__device__ __forceinline__ std::uint64_t sw128_desc_at(std::uint32_t lo, std::uint32_t byte_offset,
                                                       std::uint32_t stride_bytes) {
  return (static_cast<std::uint64_t>((stride_bytes >> 4) | (1u << 30)) << 32) |
         (lo + (byte_offset >> 4));
}

// desc + units (16-byte units of the start address field), computed where it is used: volatile,
// so the compiler neither hoists it out of a loop nor merges it with an earlier copy.
__device__ __forceinline__ std::uint64_t desc_add_volatile(std::uint64_t desc, int units) {
  std::uint64_t out;
  asm volatile("add.s64 %0, %1, %2;\n"
               : "=l"(out)
               : "l"(desc), "l"(static_cast<std::int64_t>(units)));
  return out;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins registers at this point of the program: the compiler may not move their reads or writes
// across it (used around wgmma issue and wait, which it cannot see through).
template <int kRows, int kCols>
__device__ __forceinline__ void fence_operand(float (&r)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
}

}  // namespace tileattn::cuda
