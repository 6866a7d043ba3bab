// Buffers for the CPU kernels, aligned to the 64-byte cache line. std::vector's default
// allocator gives 16 bytes (large blocks come from mmap at page + 16), so every 64-byte vector
// load of a packed K/V panel or a score row would straddle two cache lines.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tileattn::detail {

inline constexpr std::size_t kCacheLine = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  constexpr CacheLineAllocator(const CacheLineAllocator<U>& /*other*/) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, std::size_t /*n*/) noexcept {
    ::operator delete (p, std::align_val_t{kCacheLine});
  }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace tileattn::detail
