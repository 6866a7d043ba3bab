// Where a query block sits: its (batch, head) and rows from the grid index, the batch entry's
// rows (a varlen sequence's place in the packed tensors) and valid key length, and the visible
// key range of a row. Shared by the sm80, sm90 and f32 kernels; the same definition as
// visible_keys() in src/common/params.hpp.
#pragma once

#include <cmath>
#include <cstdint>

namespace tileattn::cuda {

struct TileCoords {
  int m_block, h, b, hk, m0;
  int rows_in_block;      // rows of the block inside its sequence: <= 0 for a block past its end
  int len_q;              // query rows of batch entry b (varlen: of sequence b)
  int q0, k0;             // varlen: the sequence's first row in q / out / lse and in k / v; else 0
  int klen;               // valid key length of batch entry b, clamped to [0, its key rows]
  std::int64_t diagonal;  // key position of query row i is i + diagonal
  std::int64_t window_left, window_right;

  // Visible keys [first, last) of query row i by window and key length.
  __device__ void visible(int i, int& first, int& last) const {
    const std::int64_t pos = i + diagonal;
    std::int64_t lo = 0, hi = klen;
    if (window_left >= 0 && pos - window_left > lo) lo = pos - window_left;
    if (window_right >= 0 && pos + window_right + 1 < hi) hi = pos + window_right + 1;
    if (lo > hi) lo = hi;
    if (hi < 0) lo = hi = 0;
    first = static_cast<int>(lo);
    last = static_cast<int>(hi);
  }
};

// Batch entry b's rows: for a padded batch rows from 0 (the batch stride places the entry) and
// the call's lengths; for a varlen batch the sequence's first rows in the packed tensors and its
// lengths, from cu_seqlens clamped so that no offset leaves the tensors (offsets on the device
// are not checked by the host; wrong ones give wrong rows, never an access outside them).
struct SequenceRows {
  int q0, k0, len_q, len_k;
};

__device__ __forceinline__ void packed_rows(const std::int32_t* cu, int b, int total, int max_len,
                                            int& first, int& len) {
  const int lo = min(max(cu[b], 0), total), hi = min(max(cu[b + 1], 0), total);
  first = lo;
  len = min(max(hi - lo, 0), max_len);
}

template <typename Params>
__device__ __forceinline__ SequenceRows sequence_rows(const Params& p, int b) {
  SequenceRows s{0, 0, p.len_q, p.len_k};
  if (p.cu_seqlens_q != nullptr) {
    packed_rows(p.cu_seqlens_q, b, p.total_q, p.len_q, s.q0, s.len_q);
    packed_rows(p.cu_seqlens_k, b, p.total_k, p.len_k, s.k0, s.len_k);
  }
  return s;
}

// Valid key length of batch entry b with len_k key rows: key_lengths[b] clamped to [0, len_k],
// or len_k.
template <typename Params>
__device__ int key_length(const Params& p, int b, int len_k) {
  if (p.key_lengths == nullptr) return len_k;
  const std::int64_t len = p.key_lengths_i64 ? static_cast<const std::int64_t*>(p.key_lengths)[b]
                                             : static_cast<const std::int32_t*>(p.key_lengths)[b];
  return static_cast<int>(len < 0 ? 0 : (len > len_k ? len_k : len));
}

// Coordinates of query block m_block of (batch, head) pair bh = b * heads_q + h.
template <int kBlockM, typename Params>
__device__ TileCoords tile_coords_at(const Params& p, int m_block, int bh) {
  TileCoords t;
  t.m_block = m_block;
  t.h = bh % p.heads_q;
  t.b = bh / p.heads_q;
  t.hk = t.h / p.heads_per_kv;
  t.m0 = t.m_block * kBlockM;
  const SequenceRows rows = sequence_rows(p, t.b);
  t.len_q = rows.len_q;
  t.q0 = rows.q0;
  t.k0 = rows.k0;
  t.rows_in_block = min(kBlockM, rows.len_q - t.m0);
  t.klen = key_length(p, t.b, rows.len_k);
  t.diagonal = p.bottom_right ? t.klen - rows.len_q : 0;
  t.window_left = p.window_left;
  t.window_right = p.window_right;
  return t;
}

// One CTA per query block: blocks are visited last-first within each (batch, head) so that,
// with causal masking, the longest blocks start first.
template <int kBlockM, typename Params>
__device__ TileCoords tile_coords(const Params& p) {
  return tile_coords_at<kBlockM>(p,
                                 p.num_m_blocks - 1 - static_cast<int>(blockIdx.x % p.num_m_blocks),
                                 static_cast<int>(blockIdx.x / p.num_m_blocks));
}

// Masks one row of a thread's score fragments (n8 tiles [kBegin, kEnd) of an m16n8 accumulator
// layout, row hh: elements 2 hh and 2 hh + 1) outside the visible columns [first, last), given
// relative to the thread's first column in the block (2 t): those scores become -inf.
template <int kBegin, int kEnd, int N>
__device__ __forceinline__ void mask_row_outside(float (&s)[N][4], int hh, int first, int last) {
#pragma unroll
  for (int nt = kBegin; nt < kEnd; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = nt * 8 + e;
      if (j < first || j >= last) s[nt][2 * hh + e] = -INFINITY;
    }
}

}  // namespace tileattn::cuda
