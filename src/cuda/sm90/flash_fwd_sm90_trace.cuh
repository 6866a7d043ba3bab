// Clock trace of the sm90 forward's consumers: a measurement build only (-DTILEATTN_FWD_TRACE).
// Otherwise Sm90FwdTrace is empty and its calls compile to nothing.
//
// Lane 0 of each consumer warpgroup's first warp in CTA 0 stores clock64() to global memory in
// the launches numbered kTraceLaunch modulo kTracePeriod (scripts/gpu/trace_fwd.sh runs 2
// warm-up and 3 timed launches per shape, so each shape's second timed launch is traced, causal
// and not): at eight points of every key block (block 0 too) of one tile (the first from
// kTraceBlockTile on with at least kTraceMinBlocks key blocks: a warm tile boundary, under a
// causal mask not one of the short tiles), and at nine points of each of its first kTraceTiles
// tiles (loop top, tile index read, Q ready, last P V done, epilogue done; inside the staged
// epilogue: 1 / l done, buffer free, buffer written, TMA stores issued).
// print_fwd_trace_kernel (launched after each forward) prints them
// (scripts/gpu/trace_summary.py reads them). No printf in the kernel itself: a call inside it
// makes ptxas serialise the wgmmas.
#pragma once

#ifdef TILEATTN_FWD_TRACE
#include <cstdio>
#endif

namespace tileattn::cuda {

#ifdef TILEATTN_FWD_TRACE
inline constexpr int kTraceIters = 24, kTracePoints = 8, kTraceLaunch = 3, kTracePeriod = 5;
inline constexpr int kTraceTiles = 16, kTileTracePoints = 9, kTraceBlockTile = 4;
inline constexpr int kTraceMinBlocks = 4;        // the block-traced tile's least key blocks
static __device__ unsigned g_trace_launches[4];  // per consumer warpgroup
static __device__ long long g_trace[4][kTraceIters][kTracePoints];
static __device__ int g_trace_blocks[4];
static __device__ long long g_trace_tiles[4][kTraceTiles][kTileTracePoints];
static __device__ int g_trace_tile_blocks[4][kTraceTiles];
static __device__ int g_trace_tile_count[4];
static __device__ unsigned g_trace_launch;  // the traced launch's number

static __global__ void print_fwd_trace_kernel() {
  if (g_trace_blocks[0] > 0 || g_trace_tile_count[0] > 0)
    printf("trace launch %u\n", g_trace_launch);
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < g_trace_blocks[c] && i < kTraceIters; ++i) {
      const long long* t = g_trace[c][i];
      printf("trace wg %d block %d: %lld %lld %lld %lld %lld %lld %lld %lld\n", c, i, t[0], t[1],
             t[2], t[3], t[4], t[5], t[6], t[7]);
    }
    for (int i = 0; i < g_trace_tile_count[c] && i < kTraceTiles; ++i) {
      const long long* t = g_trace_tiles[c][i];
      printf("trace wg %d tile %d blocks %d: %lld %lld %lld %lld %lld %lld %lld %lld %lld\n", c, i,
             g_trace_tile_blocks[c][i], t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]);
    }
    g_trace_blocks[c] = 0;
    g_trace_tile_count[c] = 0;
  }
}

// One consumer warpgroup's tracer.
struct Sm90FwdTrace {
  int consumer;
  bool tracing_tiles = false;  // this thread traces this launch's tiles
  bool tracing = false;        // ... and the current tile's key blocks
  bool block_traced = false;   // a tile's key blocks have been traced

  __device__ __forceinline__ Sm90FwdTrace(int consumer_, int warp_in_group, int lane)
      : consumer(consumer_) {
    if (blockIdx.x == 0 && warp_in_group == 0 && lane == 0) {
      const unsigned launch = atomicAdd(&g_trace_launches[consumer], 1u);
      tracing_tiles = launch % kTracePeriod == kTraceLaunch;
      if (tracing_tiles) g_trace_launch = launch;
    }
  }
  __device__ __forceinline__ void start_tile(int q_pass, int n_blocks) {
    tracing =
        tracing_tiles && !block_traced && q_pass >= kTraceBlockTile && n_blocks >= kTraceMinBlocks;
    block_traced = block_traced || tracing;
  }
  __device__ __forceinline__ void block(int i, int point) const {  // key block i
    if (tracing && i < kTraceIters) g_trace[consumer][i][point] = clock64();
  }
  __device__ __forceinline__ void tile(int q_pass, int point) const {
    if (tracing_tiles && q_pass < kTraceTiles) g_trace_tiles[consumer][q_pass][point] = clock64();
  }
  __device__ __forceinline__ void end_tile(int q_pass, int n_blocks) const {
    if (tracing) g_trace_blocks[consumer] = n_blocks;
    if (tracing_tiles && q_pass < kTraceTiles) {
      g_trace_tile_blocks[consumer][q_pass] = n_blocks;
      g_trace_tile_count[consumer] = q_pass + 1;
    }
  }
};
#else
struct Sm90FwdTrace {
  __device__ __forceinline__ Sm90FwdTrace(int, int, int) {}
  __device__ __forceinline__ void start_tile(int, int) {}
  __device__ __forceinline__ void block(int, int) const {}
  __device__ __forceinline__ void tile(int, int) const {}
  __device__ __forceinline__ void end_tile(int, int) const {}
};
#endif

}  // namespace tileattn::cuda
