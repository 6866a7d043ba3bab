#include "npy.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <sstream>
#include <string_view>
#include <utility>

namespace tileattn::npy {
namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);
// magic, major, minor, then a 2-byte (1.0) or 4-byte (2.0, 3.0) little-endian header length
constexpr std::size_t kPrefixV1 = 10;
constexpr std::size_t kPrefixV2 = 12;
constexpr std::align_val_t kBufferAlignment{64};
// Buffers at least this large are populated anonymous maps.
constexpr std::size_t kPopulateThreshold = std::size_t{1} << 20;

[[noreturn]] void fail(const std::string& message) {
  throw NpyError(message);
}

// Bytes from the file, quoted for a message: non-printable bytes (and '\') as \xNN, at most
// `limit` bytes shown.
std::string printable(std::string_view text, std::size_t limit = 40) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string r = "'";
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      r.push_back(static_cast<char>(c));
    } else {
      r += "\\x";
      r.push_back(kHex[c >> 4]);
      r.push_back(kHex[c & 15]);
    }
  }
  if (text.size() > limit) r += "...";
  return r + "'";
}

// A cursor over the header's dictionary literal, which is restricted to what numpy writes:
// printable ASCII, spaces (no tabs or line breaks) between tokens, quoted strings without
// escapes, True/False, and a tuple of decimal integers.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  [[noreturn]] void fail_here(const std::string& what) const {
    fail("malformed header: " + what + " at byte " + std::to_string(pos_) + ", near " +
         printable(text_.substr(pos_), 24));
  }
  void skip_space() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool at(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c, const char* where) {
    if (!at(c)) fail_here(std::string("expected '") + c + "' " + where);
    ++pos_;
  }
  std::string string_literal(const char* what) {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail_here(std::string("expected a quoted string (") + what + ")");
    const char quote = text_[pos_];
    const std::size_t begin = pos_ + 1;
    const std::size_t end = text_.find(quote, begin);
    if (end == std::string_view::npos) fail_here("unterminated string");
    const std::string_view s = text_.substr(begin, end - begin);
    if (s.find('\\') != std::string_view::npos)
      fail_here("escape sequences are not supported in strings");
    pos_ = end + 1;
    return std::string(s);
  }
  bool boolean_literal() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w && !identifier_char(pos_ + w.size())) {
        pos_ += w.size();
        return value;
      }
    }
    fail_here("fortran_order must be True or False");
  }
  // "()", "(n,)", "(n, m)" or "(n, m,)": non-negative decimal integers without leading zeros.
  std::vector<std::int64_t> shape_tuple() {
    expect('(', "to open the shape tuple");
    std::vector<std::int64_t> dims;
    bool trailing_comma = false;
    while (!at(')')) {
      if (dims.size() == kMaxRank)
        fail_here("shape has more than " + std::to_string(kMaxRank) + " dimensions");
      dims.push_back(dimension());
      trailing_comma = false;
      if (!at(')')) {
        expect(',', "between shape dimensions");
        trailing_comma = true;
      }
    }
    ++pos_;
    // "(3)" is the integer 3 in Python, not a tuple: numpy refuses it too.
    if (dims.size() == 1 && !trailing_comma)
      fail_here("a one-dimensional shape is written (n,), with a comma");
    return dims;
  }
  // Only padding spaces may follow the dictionary (the final newline is removed already).
  void expect_end() {
    skip_space();
    if (pos_ != text_.size()) fail_here("unexpected text after the dictionary");
  }

 private:
  bool identifier_char(std::size_t i) const {
    if (i >= text_.size()) return false;
    const char c = text_[i];
    return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  std::int64_t dimension() {
    skip_space();
    const std::size_t begin = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') fail_here("negative shape dimension");
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_++] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        pos_ = begin;
        fail_here("shape dimension larger than 2^63 - 1");
      }
      value = value * 10 + digit;
    }
    if (pos_ == begin || identifier_char(pos_) || (pos_ < text_.size() && text_[pos_] == '.')) {
      pos_ = begin;
      fail_here("shape dimensions must be non-negative decimal integers");
    }
    if (text_[begin] == '0' && pos_ - begin > 1) {
      pos_ = begin;
      fail_here("shape dimension with a leading zero");
    }
    return value;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

ElementType parse_descr(const std::string& d) {
  if (d == "<f4" || d == "=f4") return ElementType::f32;
  if (d == "<f2" || d == "=f2") return ElementType::f16;
  if (d == "|b1" || d == "b1" || d == "?" || d == "|?") return ElementType::boolean;
  if (d == "<i4" || d == "=i4") return ElementType::i32;
  if (d == "<i8" || d == "=i8") return ElementType::i64;
  fail("unsupported dtype " + printable(d) +
       " (supported: <f4 float32, <f2 float16, |b1 bool, <i4 int32, <i8 int64, little-endian)");
}

// The data size in bytes that `shape` of `type` declares. Like numpy, refuses a shape whose
// non-zero dimensions times the element size exceed 63 bits even when another dimension is 0, so
// that no partial product of the shape overflows.
std::uint64_t data_bytes(const std::vector<std::int64_t>& shape, ElementType type) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t bytes = element_size(type);
  bool zero = false;
  for (const std::int64_t d : shape) {
    if (d < 0) fail("negative dimension in shape " + shape_string(shape));
    if (d == 0) {
      zero = true;
      continue;
    }
    if (bytes > kMax / static_cast<std::uint64_t>(d))
      fail("shape " + shape_string(shape) + " of " + descr(type) +
           " declares more than 2^63 bytes of data");
    bytes *= static_cast<std::uint64_t>(d);
  }
  return zero ? 0 : bytes;
}

// Where the header is, from the first min(file_size, 12) bytes of a file of `file_size` bytes.
struct Prefix {
  std::size_t header_offset = 0;
  std::size_t header_len = 0;
};

Prefix parse_prefix(std::string_view first, std::uint64_t file_size) {
  const std::string_view magic = first.substr(0, kMagic.size());
  if (magic != kMagic.substr(0, magic.size()))
    fail("not a .npy file: it starts with " + printable(first.substr(0, 8)) + ", not " +
         printable(kMagic));
  if (first.size() < 8)
    fail("truncated: the file holds only " + std::to_string(file_size) +
         " bytes, less than the magic string and format version");
  const auto major = static_cast<unsigned char>(first[6]);
  const auto minor = static_cast<unsigned char>(first[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
         " (supported: 1.0, 2.0, 3.0)");
  Prefix p;
  p.header_offset = major == 1 ? kPrefixV1 : kPrefixV2;
  if (first.size() < p.header_offset)
    fail("truncated: the file holds only " + std::to_string(file_size) +
         " bytes, less than the header length field");
  std::uint64_t len = 0;
  for (std::size_t i = p.header_offset; i-- > 8;)
    len = (len << 8) | static_cast<unsigned char>(first[i]);
  if (len > kMaxHeaderBytes)
    fail("header length " + std::to_string(len) + " exceeds the limit of " +
         std::to_string(kMaxHeaderBytes) + " bytes");
  if (p.header_offset + len > file_size)
    fail("header length " + std::to_string(len) + " runs past the end of the file (" +
         std::to_string(file_size) + " bytes)");
  p.header_len = static_cast<std::size_t>(len);
  return p;
}

// Parses the header and checks the data it declares against the `available` bytes after it.
Array parse_header_and_size(const std::string& header, std::uint64_t available,
                            std::uint64_t& bytes) {
  Array a;
  parse_header(header, a.type, a.shape);
  bytes = data_bytes(a.shape, a.type);
  if (bytes != available)
    fail("shape " + shape_string(a.shape) + " of " + descr(a.type) + " claims " +
         std::to_string(bytes) + " bytes of data but the file holds " + std::to_string(available));
  return a;
}

Buffer allocate(std::uint64_t size) {
  try {
    if (size > std::numeric_limits<std::size_t>::max()) throw std::bad_alloc();
    return Buffer(static_cast<std::size_t>(size));  // uninitialised: read over at once
  } catch (const std::bad_alloc&) {
    fail("cannot allocate " + std::to_string(size) + " bytes for the data");
  }
}

// Owns a file descriptor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads up to `size` bytes at `offset`; fewer only at the end of the file.
std::size_t read_at(int fd, void* buffer, std::size_t size, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < size) {
    // Linux moves at most about 2 GiB per call.
    const std::size_t chunk = std::min<std::size_t>(size - done, std::size_t{1} << 30);
    const ssize_t n =
        ::pread(fd, static_cast<char*>(buffer) + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

Buffer::Buffer(std::size_t size) : size_(size) {
  if (size >= kPopulateThreshold) {
    void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::byte*>(map);
    mapped_ = true;
  } else if (size > 0) {
    data_ = static_cast<std::byte*>(::operator new(size, kBufferAlignment));
  }
}

Buffer::Buffer(std::size_t size, std::byte fill) : Buffer(size) {
  if (size_ > 0) std::memset(data_, static_cast<int>(fill), size_);
}

Buffer::~Buffer() {
  release();
}

Buffer::Buffer(const Buffer& other) : Buffer(other.size_) {
  if (size_ > 0) std::memcpy(data_, other.data_, size_);
}

Buffer& Buffer::operator=(const Buffer& other) {
  if (this != &other) *this = Buffer(other);
  return *this;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

void Buffer::release() noexcept {
  if (mapped_)
    ::munmap(data_, size_);
  else if (data_)
    ::operator delete(data_, kBufferAlignment);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

bool operator==(const Buffer& a, const Buffer& b) noexcept {
  return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_) == 0);
}

const char* descr(ElementType type) noexcept {
  switch (type) {
    case ElementType::f32: return "<f4";
    case ElementType::f16: return "<f2";
    case ElementType::boolean: return "|b1";
    case ElementType::i32: return "<i4";
    case ElementType::i64: return "<i8";
  }
  return "?";
}

std::size_t element_size(ElementType type) noexcept {
  switch (type) {
    case ElementType::f32:
    case ElementType::i32: return 4;
    case ElementType::f16: return 2;
    case ElementType::boolean: return 1;
    case ElementType::i64: return 8;
  }
  return 1;
}

std::int64_t Array::element_count() const noexcept {
  // A zero anywhere makes the product 0 (the reader accepts large dims beside a 0, whose
  // partial products would overflow).
  for (const std::int64_t d : shape)
    if (d == 0) return 0;
  std::int64_t count = 1;
  for (const std::int64_t d : shape) count *= d;
  return count;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ',';
  os << ')';
  return os.str();
}

void parse_header(const std::string& header, ElementType& type, std::vector<std::int64_t>& shape) {
  for (std::size_t i = 0; i + 1 < header.size(); ++i) {
    const auto c = static_cast<unsigned char>(header[i]);
    if (c < 0x20 || c >= 0x7f)
      fail("malformed header: byte " + std::to_string(i) + " is " +
           printable(std::string_view(header).substr(i, 1)) + ", not printable ASCII");
  }
  if (header.empty() || header.back() != '\n')
    fail("malformed header: it must end with a newline, not " +
         printable(std::string_view(header).substr(header.size() -
                                                   std::min<std::size_t>(header.size(), 8))));
  HeaderParser p(std::string_view(header).substr(0, header.size() - 1));
  if (header.front() != '{') p.fail_here("expected '{' at the start of the header dictionary");
  p.expect('{', "at the start of the header dictionary");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!p.at('}')) {
    const std::string key = p.string_literal("a key");
    bool* seen = key == "descr"           ? &have_descr
                 : key == "fortran_order" ? &have_order
                 : key == "shape"         ? &have_shape
                                          : nullptr;
    if (!seen)
      fail("malformed header: unexpected key " + printable(key) +
           " (the keys are 'descr', 'fortran_order' and 'shape')");
    if (*seen) fail("malformed header: key " + printable(key) + " appears twice");
    *seen = true;
    p.expect(':', "after a key");
    if (key == "descr") {
      type = parse_descr(p.string_literal("the dtype"));
    } else if (key == "fortran_order") {
      if (p.boolean_literal())
        fail(
            "fortran_order: True is not supported; save a C-ordered array "
            "(numpy.ascontiguousarray)");
    } else {
      shape = p.shape_tuple();
    }
    if (!p.at('}')) p.expect(',', "between entries");
  }
  p.expect('}', "to close the header dictionary");
  p.expect_end();
  if (!have_descr || !have_order || !have_shape)
    fail(std::string("malformed header: missing key ") +
         (!have_descr   ? "'descr'"
          : !have_order ? "'fortran_order'"
                        : "'shape'") +
         " ('descr', 'fortran_order' and 'shape' are all required)");
}

Array read(const std::filesystem::path& path) {
  const std::string name = path.string();
  try {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
    const FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (file.get() < 0) fail(std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(file.get(), &st) != 0) fail(std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
      fail(std::string("cannot read ") + file_kind(st.st_mode) +
           ": a .npy input must be a regular file, whose size is checked against its header");
    const auto file_size = static_cast<std::uint64_t>(st.st_size);

    std::array<char, kPrefixV2> first{};
    const std::size_t got =
        read_at(file.get(), first.data(), std::min<std::uint64_t>(file_size, first.size()), 0);
    const Prefix prefix = parse_prefix(std::string_view(first.data(), got), file_size);
    std::string header(prefix.header_len, '\0');
    const std::uint64_t data_offset = prefix.header_offset + prefix.header_len;
    if (read_at(file.get(), header.data(), header.size(), prefix.header_offset) != header.size())
      fail("the file shrank while it was read");

    std::uint64_t bytes = 0;
    Array a = parse_header_and_size(header, file_size - data_offset, bytes);
    a.bytes = allocate(bytes);
    if (read_at(file.get(), a.bytes.data(), a.bytes.size(), data_offset) != a.bytes.size())
      fail("the file shrank while it was read");
    return a;
  } catch (const NpyError& e) {
    throw NpyError(name + ": " + e.what());
  }
}

Array parse(const std::byte* data, std::size_t size, const std::string& name) {
  try {
    const std::string_view file(reinterpret_cast<const char*>(data), size);
    const Prefix prefix = parse_prefix(file.substr(0, kPrefixV2), size);
    const std::string header(file.substr(prefix.header_offset, prefix.header_len));
    const std::size_t data_offset = prefix.header_offset + prefix.header_len;
    std::uint64_t bytes = 0;
    Array a = parse_header_and_size(header, size - data_offset, bytes);
    a.bytes = allocate(bytes);
    if (bytes > 0) std::memcpy(a.bytes.data(), data + data_offset, a.bytes.size());
    return a;
  } catch (const NpyError& e) {
    throw NpyError(name + ": " + e.what());
  }
}

std::string preamble(ElementType type, const std::vector<std::int64_t>& shape) {
  if (shape.size() > kMaxRank)
    throw NpyError("rank " + std::to_string(shape.size()) + " exceeds the .npy limit of " +
                   std::to_string(kMaxRank));
  data_bytes(shape, type);  // refuses negative and overflowing shapes
  std::string header = std::string("{'descr': '") + descr(type) +
                       "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes, as numpy does. A header
  // of rank <= kMaxRank stays far below kMaxHeaderBytes, so version 1.0 always suffices.
  header.append((64 - (kPrefixV1 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string r(kMagic);
  r.push_back('\x01');
  r.push_back('\x00');
  r.push_back(static_cast<char>(header.size() & 0xff));
  r.push_back(static_cast<char>(header.size() >> 8));
  return r + header;
}

void write(const std::filesystem::path& path, ElementType type,
           const std::vector<std::int64_t>& shape, const void* data) {
  std::string head;
  std::uint64_t bytes = 0;
  try {
    head = preamble(type, shape);
    bytes = data_bytes(shape, type);
  } catch (const NpyError& e) {
    throw NpyError(path.string() + ": " + e.what());
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw NpyError(path.string() + ": cannot open for writing");
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.flush();
  if (!out) throw NpyError(path.string() + ": write failed");
}

}  // namespace tileattn::npy
