// Python arrays -> tileattn::Tensor views, through DLPack (nanobind's ndarray): numpy, PyTorch,
// CuPy, JAX or any object with __dlpack__ or the buffer protocol. Never copies: the view points
// at the producer's memory, which the caller keeps alive for the duration of the call.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <variant>

#include "tileattn/tileattn.hpp"

namespace tileattn::python {

enum class Access { read, write };

// The array kept alive while a call runs (it holds the DLPack capsule's owner), and the tileattn
// view of it.
struct ArrayView {
  std::variant<std::monostate, nanobind::ndarray<nanobind::ro>, nanobind::ndarray<>> array;
  Tensor tensor;
};

// `obj` as a tensor view. `name` is the argument's name in every error (tileattn::Error, as the
// library's own validation reports): not an array, read-only where written, a dtype or device
// tileattn does not know, a rank outside 1..4. Shapes and strides are checked by the library.
ArrayView view_of(nanobind::handle obj, const char* name, Access access = Access::read);

// None -> an absent tensor (Tensor{}); anything else as view_of.
ArrayView optional_view_of(nanobind::handle obj, const char* name, Access access = Access::read);

// A CUDA workspace from the caller's allocator (PyTorch's caching allocator for tileattn.torch,
// so that CUDA graph capture sees no allocation by the library): `workspace(bytes)` (a callable
// returning a 1-D device array) on q's device, put in ctx.cuda_workspace. None, a host q or
// 0 bytes: nothing. Keep the result alive for the call.
struct CallerWorkspace {
  nanobind::object array;
  ArrayView view;
};
CallerWorkspace take_workspace(nanobind::handle workspace, std::size_t bytes, const Tensor& q,
                               Context& ctx);

}  // namespace tileattn::python
