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

}  // namespace tileattn::python
