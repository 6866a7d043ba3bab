#include "api/tensor_checks.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace tileattn::detail {

std::string shape_string(const Tensor& t) {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < std::clamp(t.rank, 0, 4); ++d) os << (d ? ", " : "") << t.shape[d];
  os << ']';
  return os.str();
}

// The checks every tensor gets before any of its shape, strides or data are looked at: a rank
// the struct can hold, enum values that name something, an element-aligned data pointer.
// Optional tensors are absent only as Tensor{} (rank 0, no data); a shape without data is a
// mistake (a failed allocation, say), not a request to leave the argument out.

void check_tensor_header(const char* name, const Tensor& t, Presence presence) {
  if (presence == Presence::optional && t.rank == 0 && t.data == nullptr) return;  // absent
  if (presence == Presence::required && t.data == nullptr)
    fail(name, "is required but has no data pointer");
  if (t.rank < 1 || t.rank > 4) fail(name, "rank must be 1..4, got ", t.rank);
  if (t.data == nullptr)
    fail(name, "has a shape but no data pointer (an absent optional tensor is Tensor{})");
  if (static_cast<unsigned>(t.dtype) > static_cast<unsigned>(DType::i64))
    fail(name, "dtype value ", static_cast<unsigned>(t.dtype), " is not a tileattn::DType");
  if (static_cast<unsigned>(t.device) > static_cast<unsigned>(Device::cuda))
    fail(name, "device value ", static_cast<unsigned>(t.device), " is not a tileattn::Device");
  const std::size_t elem = size_of(t.dtype);
  if (reinterpret_cast<std::uintptr_t>(t.data) % elem != 0)
    fail(name, "data pointer ", t.data, " is not aligned to its element size (", elem,
         " bytes for ", to_string(t.dtype), ")");
}

bool is_float_storage(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

Span checked_span(const char* name, const Tensor& t) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = 0;  // offset in elements of the last element
  bool empty = false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) fail(name, "shape ", shape_string(t), " has a negative size");
    if (t.stride[d] < 0) fail(name, "stride ", t.stride[d], " of dimension ", d, " is negative");
    if (t.shape[d] == 0) empty = true;
    if (t.shape[d] > 1) {
      if (t.stride[d] != 0 && t.shape[d] - 1 > (kMax - last) / t.stride[d])
        fail(name, "shape ", shape_string(t), " with its strides overflows 64-bit offsets");
      last += (t.shape[d] - 1) * t.stride[d];
    }
  }
  const auto elem = static_cast<std::int64_t>(size_of(t.dtype));
  if (last > kMax / elem - 1) fail(name, "byte size overflows 64-bit offsets");
  Span s;
  if (empty) return s;
  s.lo = reinterpret_cast<std::uintptr_t>(t.data);
  s.hi = s.lo + static_cast<std::uintptr_t>((last + 1) * elem);
  return s;
}

// An output must not write two logical elements to one address (a stride 0 on a dimension of
// size > 1, rows that overlap, ...): the result would depend on the order of the writes. The
// test is sufficient, not exact: the dimensions of size > 1, sorted by stride, must each step
// over everything the smaller ones cover. It refuses a few interleavings that do not overlap
// (docs/semantics.md). Call after checked_span, which rules out negative values and overflow.
void require_no_internal_overlap(const char* name, const Tensor& t) {
  std::pair<std::int64_t, std::int64_t> dims[4];  // (stride, size) of the dimensions of size > 1
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return;  // no element, nothing written
    if (t.shape[d] > 1) dims[n++] = {t.stride[d], t.shape[d]};
  }
  // Insertion sort: four elements at most (std::sort trips GCC 12's -Warray-bounds here).
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t extent = 1;  // last offset + 1 covered by the dimensions seen so far
  for (int i = 0; i < n; ++i) {
    const auto [stride, size] = dims[i];
    if (stride < extent)
      fail(name, "strides make distinct elements share memory (shape ", shape_string(t),
           ", a stride of ", stride, " where at least ", extent,
           " is needed); an output needs one address per element");
    extent += (size - 1) * stride;
  }
}

void require_rank(const char* name, const Tensor& t, int rank, const char* layout) {
  if (t.rank != rank)
    fail(name, "expected rank ", rank, " ", layout, ", got rank ", t.rank, " ", shape_string(t));
}

void require_dim(const char* name, const Tensor& t, int d, std::int64_t expected,
                 const char* what) {
  if (t.shape[d] != expected)
    fail(name, "dimension ", d, " (", what, ") is ", t.shape[d], ", expected ", expected,
         " (shape ", shape_string(t), ")");
}

void require_device(const char* name, const Tensor& t, const Tensor& q) {
  if (t.device != q.device || t.device_index != q.device_index)
    fail(name, "must be on the same device as q");
}

void require_unit_inner_stride(const char* name, const Tensor& t) {
  const int last = t.rank - 1;
  if (t.shape[last] > 1 && t.stride[last] != 1)
    fail(name, "the last (head) dimension must be contiguous (stride 1), got stride ",
         t.stride[last]);
}

}  // namespace tileattn::detail
