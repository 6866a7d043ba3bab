// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// dropout keep/drop decision built on it. One header for host C++ and CUDA device code, so that
// every backend drops exactly the same elements; docs/semantics.md states the mapping.
//
// Everything here has internal linkage (static): the header is included by translation units
// compiled for different instruction sets, and no copy compiled for a wider ISA may be shared.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace tileattn::detail {

struct Philox4x32 {
  std::uint32_t v[4];
};

// The 10-round Philox4x32 bijection of `counter` under the 64-bit key (key0, key1).
TILEATTN_HOST_DEVICE static inline Philox4x32 philox4x32_10(Philox4x32 counter, std::uint32_t key0,
                                                            std::uint32_t key1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule bumps the key before rounds 2..10
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// The dropout decision for a call: drop element (b, h, i, j) iff its 32-bit word is below
// `threshold` = floor(p * 2^32); kept elements are multiplied by keep_scale = 1 / (1 - p) (f32).
struct DropoutParams {
  std::uint64_t seed = 0, offset = 0;
  std::uint32_t threshold = 0;  // 0: dropout off
  float keep_scale = 1.0f;
  std::int64_t heads_q = 1;
};

// The four 32-bit words that decide the keys j = 4 * (j / 4) + 0..3 of row i of head (b, h):
// counter (j / 4, i, lo32(s), hi32(s)) with s = offset + b * Hq + h (mod 2^64), key
// (lo32(seed), hi32(seed)). Word n decides key 4 * (j / 4) + n.
TILEATTN_HOST_DEVICE static inline Philox4x32 dropout_words(const DropoutParams& d, std::int64_t b,
                                                            std::int64_t h, std::int64_t i,
                                                            std::int64_t j_group) {
  const std::uint64_t stream = d.offset + static_cast<std::uint64_t>(b * d.heads_q + h);
  const Philox4x32 counter{{static_cast<std::uint32_t>(j_group), static_cast<std::uint32_t>(i),
                            static_cast<std::uint32_t>(stream),
                            static_cast<std::uint32_t>(stream >> 32)}};
  return philox4x32_10(counter, static_cast<std::uint32_t>(d.seed),
                       static_cast<std::uint32_t>(d.seed >> 32));
}

TILEATTN_HOST_DEVICE static inline bool dropout_keeps(const DropoutParams& d, std::int64_t b,
                                                      std::int64_t h, std::int64_t i,
                                                      std::int64_t j) {
  return dropout_words(d, b, h, i, j >> 2).v[j & 3] >= d.threshold;
}

}  // namespace tileattn::detail
