// A small reader/writer for NumPy .npy files (format versions 1.0, 2.0 and 3.0).
// Supported element types: little-endian <f4, <f2, <i4, <i8 and |b1; C order only
// (fortran_order: True is rejected with a clear error). Shapes of rank 0..kMaxRank.
// Independent of the tileattn library so that tests can link it on its own (tileattn_npy).
//
// The reader trusts nothing in a file: the header must be the dictionary numpy writes (exactly
// the keys descr, fortran_order and shape, padded with spaces and ending in a newline), at most
// kMaxHeaderBytes long, and the data it declares (shape product x element size) must fill the
// rest of the file exactly. As in numpy, the product of the non-zero dimensions times the element
// size must fit in 63 bits, even when another dimension is 0. All of this is checked before the
// data is allocated, so a lying header costs nothing and ends in an NpyError naming the file.
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

// Owned bytes, 64-byte aligned and uninitialised unless a fill is given, so that data written in
// full at once (a file read, a kernel's output) pays no zero-fill pass. From 1 MiB on they are
// an anonymous memory map populated up front: the kernel provides the pages in one call instead
// of one fault per 4 KiB page at first touch (inside a file read, or inside the attention call
// for an output). Copies are deep.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t size);  // throws std::bad_alloc
  Buffer(std::size_t size, std::byte fill);
  ~Buffer();
  Buffer(const Buffer& other);
  Buffer& operator=(const Buffer& other);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  friend bool operator==(const Buffer& a, const Buffer& b) noexcept;

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;  // from mmap (else operator new)
};

// Headers longer than this are refused before they are read. numpy (since 1.24) refuses headers
// over 10000 bytes unless load() is given a larger max_header_size, so a longer one is not a file
// numpy reads by default; the longest header of a supported type and rank is under 1.5 KiB.
inline constexpr std::size_t kMaxHeaderBytes = 10000;
// numpy 2's NPY_MAXDIMS (numpy 1 allows 32).
inline constexpr std::size_t kMaxRank = 64;

enum class ElementType : std::uint8_t { f32, f16, boolean, i32, i64 };

const char* descr(ElementType type) noexcept;  // "<f4", "<f2", "|b1", "<i4", "<i8"
std::size_t element_size(ElementType type) noexcept;

struct Array {
  ElementType type = ElementType::f32;
  std::vector<std::int64_t> shape;  // empty for a 0-d array
  Buffer bytes;                     // element_count() * element_size(type), C order

  std::int64_t element_count() const noexcept;
  template <typename T>
  const T* as() const noexcept {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

// Reads a .npy file (a regular file: its size is checked against the header before anything is
// allocated; the data is then read with one pread). Throws NpyError naming the file and what is
// wrong with it.
Array read(const std::filesystem::path& path);

// The same checks on a whole file held in memory; `name` prefixes every error.
Array parse(const std::byte* data, std::size_t size, const std::string& name);

// The bytes that precede the data in the file write() makes: magic, version, header length and
// the header, padded so that the data starts at a multiple of 64 bytes as numpy does. Throws
// NpyError for a negative or overflowing shape or a rank over kMaxRank.
std::string preamble(ElementType type, const std::vector<std::int64_t>& shape);

// Writes `data` (element_count(shape) elements of `type`) as a version 1.0 file. Throws NpyError
// on I/O failure.
void write(const std::filesystem::path& path, ElementType type,
           const std::vector<std::int64_t>& shape, const void* data);

// Parses a header as stored in the file, e.g.
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + spaces + "\n".
// Exposed for tests; throws NpyError (without a file name) when malformed.
void parse_header(const std::string& header, ElementType& type, std::vector<std::int64_t>& shape);

std::string shape_string(const std::vector<std::int64_t>& shape);  // "(2, 3)" style

}  // namespace tileattn::npy
