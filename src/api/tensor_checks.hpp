// Checks of one tensor argument shared by the validators (validate.cpp, validate_merge.cpp):
// header sanity, spans and overlap, ranks, dims, devices. Each failure throws tileattn::Error
// naming the argument.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "tileattn/tileattn.hpp"

namespace tileattn::detail {

template <typename... Parts>
[[noreturn]] void fail(const char* argument, const Parts&... parts) {
  std::ostringstream os;
  os << "tileattn: argument '" << argument << "': ";
  (os << ... << parts);
  throw Error(os.str());
}

// Never reads past shape[3], whatever the rank says.
std::string shape_string(const Tensor& t);

// The checks every tensor gets before any of its shape, strides or data are looked at: a rank
// the struct can hold, enum values that name something, an element-aligned data pointer.
// Optional tensors are absent only as Tensor{} (rank 0, no data); a shape without data is a
// mistake (a failed allocation, say), not a request to leave the argument out.
enum class Presence { required, optional };
void check_tensor_header(const char* name, const Tensor& t, Presence presence);

bool is_float_storage(DType d);

// Byte span [lo, hi) touched by a tensor.
struct Span {
  std::uintptr_t lo = 0, hi = 0;
  bool overlaps(const Span& o) const { return lo < o.hi && o.lo < hi; }
  bool operator==(const Span&) const = default;
};
// Also rejects negative sizes and strides and offsets that overflow.
Span checked_span(const char* name, const Tensor& t);

// An output must not write two logical elements to one address. Call after checked_span.
void require_no_internal_overlap(const char* name, const Tensor& t);

void require_rank(const char* name, const Tensor& t, int rank, const char* layout);
void require_dim(const char* name, const Tensor& t, int d, std::int64_t expected, const char* what);
void require_device(const char* name, const Tensor& t, const Tensor& q);
// The last (head) dimension has stride 1 (or size 1).
void require_unit_inner_stride(const char* name, const Tensor& t);

}  // namespace tileattn::detail
