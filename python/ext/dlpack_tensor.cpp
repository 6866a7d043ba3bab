#include "dlpack_tensor.hpp"

#include <cstdint>
#include <string>

namespace nb = nanobind;

namespace tileattn::python {
namespace {

[[noreturn]] void fail(const char* name, const std::string& what) {
  throw Error(std::string("tileattn: argument '") + name + "': " + what);
}

std::string dlpack_dtype_name(nb::dlpack::dtype t) {
  std::string kind;
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
    default: kind = "code" + std::to_string(t.code) + "_"; break;
  }
  std::string s = kind + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

DType to_dtype(nb::dlpack::dtype t, const char* name) {
  using Code = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    const auto code = static_cast<Code>(t.code);
    if (code == Code::Float && t.bits == 32) return DType::f32;
    if (code == Code::Float && t.bits == 16) return DType::f16;
    if (code == Code::Bfloat && t.bits == 16) return DType::bf16;
    if (code == Code::Bool && t.bits == 8) return DType::boolean;
    if (code == Code::Int && t.bits == 32) return DType::i32;
    if (code == Code::Int && t.bits == 64) return DType::i64;
  }
  fail(name, "dtype " + dlpack_dtype_name(t) +
                 " is not supported (tileattn takes float32, float16, bfloat16, bool, int32 "
                 "and int64 arrays)");
}

// Where the library needs a non-null pointer for an array without elements (PyTorch exports
// empty tensors with a null data pointer). Nothing is ever read from or written to it.
alignas(64) unsigned char empty_storage[64];

template <typename Array>
Tensor describe(const Array& a, const char* name) {
  Tensor t;
  t.dtype = to_dtype(a.dtype(), name);
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: t.device = Device::cpu; break;  // pinned host memory
    case nb::device::cuda::value:
      t.device = Device::cuda;
      t.device_index = a.device_id();
      break;
    default:
      fail(name, "DLPack device type " + std::to_string(a.device_type()) +
                     " is not supported (tileattn takes CPU and CUDA arrays)");
  }
  const std::size_t rank = a.ndim();
  if (rank < 1 || rank > 4) fail(name, "rank must be 1..4, got " + std::to_string(rank));
  t.rank = static_cast<int>(rank);
  bool empty = false;
  for (std::size_t d = 0; d < rank; ++d) {
    t.shape[d] = static_cast<std::int64_t>(a.shape(d));
    t.stride[d] = a.stride(d);
    empty = empty || t.shape[d] == 0;
  }
  t.data = const_cast<void*>(a.data());
  if (t.data == nullptr && empty) t.data = empty_storage;
  return t;
}

template <typename Array>
ArrayView import_array(nb::handle obj, const char* name, const char* what) {
  Array array;
  if (!nb::try_cast(obj, array, /*convert=*/false))
    fail(name, std::string("expected ") + what +
                   " that supports DLPack (__dlpack__) or the buffer protocol, got " +
                   nb::type_name(obj.type()).c_str());
  ArrayView view;
  view.tensor = describe(array, name);
  view.array = std::move(array);
  return view;
}

}  // namespace

ArrayView view_of(nb::handle obj, const char* name, Access access) {
  if (obj.is_none()) fail(name, "is required, got None");
  if (access == Access::write) return import_array<nb::ndarray<>>(obj, name, "a writable array");
  return import_array<nb::ndarray<nb::ro>>(obj, name, "an array");
}

CallerWorkspace take_workspace(nb::handle workspace, std::size_t bytes, const Tensor& q,
                               Context& ctx) {
  CallerWorkspace w;
  if (workspace.is_none() || q.device != Device::cuda || bytes == 0) return w;
  w.array = workspace(bytes);
  w.view = view_of(w.array, "workspace", Access::write);
  const Tensor& t = w.view.tensor;
  if (t.device != Device::cuda || t.device_index != q.device_index)
    throw Error("tileattn: argument 'workspace': must return an array on q's device");
  std::size_t given = size_of(t.dtype);
  for (int d = 0; d < t.rank; ++d) given *= static_cast<std::size_t>(t.shape[d]);
  ctx.cuda_workspace = t.data;
  ctx.cuda_workspace_bytes = given;
  return w;
}

ArrayView optional_view_of(nb::handle obj, const char* name, Access access) {
  if (obj.is_none()) return {};
  return view_of(obj, name, access);
}

}  // namespace tileattn::python
