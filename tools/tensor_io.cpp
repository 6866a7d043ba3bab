#include "tensor_io.hpp"

#include <algorithm>
#include <cstring>

#include "float16.hpp"
#include "npy.hpp"

namespace tileattn::tools {
namespace {

DType from_npy(npy::ElementType t) {
  switch (t) {
    case npy::ElementType::f32: return DType::f32;
    case npy::ElementType::f16: return DType::f16;
    case npy::ElementType::boolean: return DType::boolean;
    case npy::ElementType::i32: return DType::i32;
    case npy::ElementType::i64: return DType::i64;
  }
  return DType::f32;
}

npy::ElementType to_npy(DType t) {
  switch (t) {
    case DType::f32: return npy::ElementType::f32;
    case DType::f16: return npy::ElementType::f16;
    case DType::boolean: return npy::ElementType::boolean;
    case DType::i32: return npy::ElementType::i32;
    case DType::i64: return npy::ElementType::i64;
    case DType::bf16: break;
  }
  throw ToolError("bf16 tensors cannot be saved as .npy (numpy has no bfloat16); convert to f32");
}

}  // namespace

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  bytes_ = npy::Buffer(static_cast<std::size_t>(numel()) * size_of(dtype_), std::byte{0});
}

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape, Uninitialized /*tag*/)
    : dtype_(dtype), shape_(std::move(shape)) {
  bytes_ = npy::Buffer(static_cast<std::size_t>(numel()) * size_of(dtype_));
}

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape, npy::Buffer bytes)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(std::move(bytes)) {}

std::int64_t HostTensor::numel() const noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : shape_) n *= d;
  return n;
}

Tensor HostTensor::view(const char* name) const {
  Tensor t;
  if (empty()) return t;
  if (shape_.empty() || shape_.size() > 4)
    throw ToolError(std::string(name) + ": rank " + std::to_string(shape_.size()) +
                    " is not supported (tensors have rank 1..4)");
  // A zero-element tensor still needs a non-null pointer: null means "absent" to the library.
  static std::byte zero_elements[16];
  t.data = bytes_.empty() ? zero_elements : const_cast<std::byte*>(bytes_.data());
  t.dtype = dtype_;
  t.rank = static_cast<int>(shape_.size());
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape_[static_cast<std::size_t>(d)];
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

HostTensor load_npy(const std::filesystem::path& path, const char* name) {
  try {
    npy::Array a = npy::read(path);
    return HostTensor(from_npy(a.type), std::move(a.shape), std::move(a.bytes));
  } catch (const npy::NpyError& e) {
    throw ToolError(std::string(name) + ": " + e.what());
  }
}

void save_npy(const std::filesystem::path& path, const HostTensor& t) {
  try {
    npy::write(path, to_npy(t.dtype()), t.shape(), t.data());
  } catch (const npy::NpyError& e) {
    throw ToolError(e.what());
  }
}

std::string npy_preamble(const HostTensor& t) {
  try {
    return npy::preamble(to_npy(t.dtype()), t.shape());
  } catch (const npy::NpyError& e) {
    throw ToolError(e.what());
  }
}

bool is_float_storage(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

float load_f32(const HostTensor& t, std::int64_t i) noexcept {
  return load_as_f32(t.data(), t.dtype(), i);
}

HostTensor convert(HostTensor t, DType to) {
  if (t.empty() || t.dtype() == to) return t;
  if (!is_float_storage(t.dtype()) || !is_float_storage(to))
    throw ToolError(std::string("cannot convert ") + to_string(t.dtype()) + " to " + to_string(to));
  HostTensor r(to, t.shape(), HostTensor::Uninitialized{});
  const std::int64_t n = t.numel();
  const void* src = t.data();
  void* dst = r.data();
  const DType from = t.dtype();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) store_from_f32(dst, to, i, load_as_f32(src, from, i));
  return r;
}

void AttentionBuffers::bind(AttentionArgs& args) const {
  const auto layout_view = [this](const HostTensor& t, const char* name) {
    Tensor view = t.view(name);
    if (layout == Layout::bhsd && view.rank == 4) view = bhsd_as_bshd(view);
    return view;
  };
  args.q = layout_view(q, "q");
  args.k = layout_view(k, "k");
  args.v = layout_view(v, "v");
  args.out = layout_view(out, "out");
  args.lse = lse.view("lse");
  args.mask = mask.view("mask");
  args.key_lengths = key_lengths.view("key_lengths");
  args.alibi_slopes = alibi_slopes.view("alibi_slopes");
  args.cu_seqlens_q = cu_seqlens_q.view("cu_seqlens_q");
  args.cu_seqlens_k = cu_seqlens_k.view("cu_seqlens_k");
}

std::vector<std::int64_t> out_shape(const HostTensor& q, const HostTensor& v) {
  const std::size_t rank = q.shape().size();
  if ((rank != 4 && rank != 3) || v.shape().size() != rank) return {1, 1, 1, 1};
  std::vector<std::int64_t> s = q.shape();
  s[rank - 1] = v.shape()[rank - 1];
  return s;
}

std::vector<std::int64_t> lse_shape(const HostTensor& q, Layout layout) {
  const auto& s = q.shape();
  if (s.size() == 3) return {s[1], s[0]};
  if (s.size() != 4) return {1, 1, 1};
  return layout == Layout::bshd ? std::vector<std::int64_t>{s[0], s[2], s[1]}
                                : std::vector<std::int64_t>{s[0], s[1], s[2]};
}

std::int64_t max_sequence_length(const HostTensor& cu_seqlens) {
  if (cu_seqlens.empty() || cu_seqlens.dtype() != DType::i32) return 0;
  const auto* offsets = static_cast<const std::int32_t*>(cu_seqlens.data());
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b + 1 < cu_seqlens.numel(); ++b)
    longest = std::max<std::int64_t>(longest, std::int64_t{offsets[b + 1]} - offsets[b]);
  return longest;
}

}  // namespace tileattn::tools
