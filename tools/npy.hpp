// A small reader/writer for NumPy .npy files (format versions 1.0, 2.0 and 3.0).
// Supported element types: little-endian <f4, <f2, <i4, <i8 and |b1; C order only
// (fortran_order: True is rejected with a clear error). Shapes of any rank.
// Independent of the tileattn library so that tests can link it on its own (tileattn_npy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace tileattn::npy {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ElementType : std::uint8_t { f32, f16, boolean, i32, i64 };

const char* descr(ElementType type) noexcept;  // "<f4", "<f2", "|b1", "<i4", "<i8"
std::size_t element_size(ElementType type) noexcept;

struct Array {
  ElementType type = ElementType::f32;
  std::vector<std::int64_t> shape;  // empty for a 0-d array
  std::vector<std::byte> bytes;     // element_count() * element_size(type), C order

  std::int64_t element_count() const noexcept;
  template <typename T>
  const T* as() const noexcept {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

// Throws NpyError naming the file and what is wrong with it.
Array read(const std::filesystem::path& path);

// Writes `data` (element_count(shape) elements of `type`) as a version 1.0 file (2.0 if the
// header does not fit). Throws NpyError on I/O failure.
void write(const std::filesystem::path& path, ElementType type,
           const std::vector<std::int64_t>& shape, const void* data);

// Parses a header dictionary such as "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
// Exposed for tests; throws NpyError (without a file name) when malformed.
void parse_header(const std::string& header, ElementType& type, std::vector<std::int64_t>& shape);

std::string shape_string(const std::vector<std::int64_t>& shape);  // "(2, 3)" style

}  // namespace tileattn::npy
