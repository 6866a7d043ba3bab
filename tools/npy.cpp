#include "npy.hpp"

#include <array>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace tileattn::npy {
namespace {

constexpr std::array<char, 6> kMagic = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

[[noreturn]] void fail(const std::string& message) {
  throw NpyError(message);
}

// A cursor over the header's Python dict literal.
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& text) : text_(text) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool at(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c, const char* where) {
    if (!at(c)) fail(std::string("malformed header: expected '") + c + "' " + where);
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail("malformed header: expected a quoted string");
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) fail("malformed header: unterminated string");
    std::string s = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  bool boolean_literal() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::size_t n = std::strlen(word);
      if (text_.compare(pos_, n, word) == 0) {
        pos_ += n;
        return value;
      }
    }
    fail("malformed header: expected True or False");
  }
  std::vector<std::int64_t> tuple_literal() {
    expect('(', "to open the shape tuple");
    std::vector<std::int64_t> dims;
    while (!at(')')) {
      skip_space();
      std::int64_t value = 0;
      bool any = false;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        const int digit = text_[pos_++] - '0';
        if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10)
          fail("malformed header: shape dimension too large");
        value = value * 10 + digit;
        any = true;
      }
      if (!any) fail("malformed header: shape must be a tuple of non-negative integers");
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long suffix
      dims.push_back(value);
      if (!at(')')) expect(',', "between shape dimensions");
    }
    ++pos_;
    return dims;
  }

 private:
  const std::string& text_;
  std::size_t pos_ = 0;
};

ElementType parse_descr(const std::string& d) {
  if (d == "<f4" || d == "=f4") return ElementType::f32;
  if (d == "<f2" || d == "=f2") return ElementType::f16;
  if (d == "|b1" || d == "b1" || d == "?" || d == "|?") return ElementType::boolean;
  if (d == "<i4" || d == "=i4") return ElementType::i32;
  if (d == "<i8" || d == "=i8") return ElementType::i64;
  fail("unsupported dtype '" + d +
       "' (supported: <f4 float32, <f2 float16, |b1 bool, <i4 int32, <i8 int64, little-endian)");
}

std::int64_t checked_count(const std::vector<std::int64_t>& shape, std::size_t elem) {
  std::int64_t count = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) fail("negative dimension in shape " + shape_string(shape));
    if (d != 0 &&
        count > std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(elem) / d)
      fail("shape " + shape_string(shape) + " is too large");
    count *= d;
  }
  return count;
}

}  // namespace

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
  HeaderParser p(header);
  bool have_descr = false, have_order = false, have_shape = false;
  p.expect('{', "at the start of the header dictionary");
  while (!p.at('}')) {
    const std::string key = p.string_literal();
    p.expect(':', "after a header key");
    if (key == "descr") {
      type = parse_descr(p.string_literal());
      have_descr = true;
    } else if (key == "fortran_order") {
      if (p.boolean_literal())
        fail(
            "fortran_order: True is not supported; save a C-ordered array "
            "(numpy.ascontiguousarray)");
      have_order = true;
    } else if (key == "shape") {
      shape = p.tuple_literal();
      have_shape = true;
    } else {
      fail("malformed header: unexpected key '" + key + "'");
    }
    if (!p.at('}')) p.expect(',', "between header entries");
  }
  if (!have_descr || !have_order || !have_shape)
    fail("malformed header: 'descr', 'fortran_order' and 'shape' are all required");
}

Array read(const std::filesystem::path& path) {
  const std::string name = path.string();
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open file");
    std::array<char, 8> preamble{};
    in.read(preamble.data(), preamble.size());
    if (in.gcount() != 8 || !std::equal(kMagic.begin(), kMagic.end(), preamble.begin()))
      fail("not a .npy file (bad magic string)");
    const int major = static_cast<unsigned char>(preamble[6]);
    std::size_t header_len = 0;
    if (major == 1) {
      unsigned char len[2];
      in.read(reinterpret_cast<char*>(len), 2);
      if (in.gcount() != 2) fail("truncated header");
      header_len = len[0] | (static_cast<std::size_t>(len[1]) << 8);
    } else if (major == 2 || major == 3) {
      unsigned char len[4];
      in.read(reinterpret_cast<char*>(len), 4);
      if (in.gcount() != 4) fail("truncated header");
      for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | len[i];
    } else {
      fail("unsupported .npy format version " + std::to_string(major) + " (supported: 1, 2, 3)");
    }
    if (header_len > (1u << 24)) fail("header is implausibly long");
    std::string header(header_len, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header_len));
    if (static_cast<std::size_t>(in.gcount()) != header_len) fail("truncated header");

    Array a;
    parse_header(header, a.type, a.shape);
    const std::int64_t count = checked_count(a.shape, element_size(a.type));
    const auto bytes = static_cast<std::size_t>(count) * element_size(a.type);
    a.bytes.resize(bytes);
    in.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(bytes));
    if (static_cast<std::size_t>(in.gcount()) != bytes)
      fail("truncated data: shape " + shape_string(a.shape) + " needs " + std::to_string(bytes) +
           " bytes, found " + std::to_string(in.gcount()));
    if (in.peek() != std::char_traits<char>::eof())
      fail("unexpected bytes after the data of shape " + shape_string(a.shape));
    return a;
  } catch (const NpyError& e) {
    throw NpyError(name + ": " + e.what());
  }
}

void write(const std::filesystem::path& path, ElementType type,
           const std::vector<std::int64_t>& shape, const void* data) {
  const std::int64_t count = checked_count(shape, element_size(type));
  std::string header = std::string("{'descr': '") + descr(type) +
                       "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  // Pad with spaces so that magic + version + length + header (ending in '\n') is a multiple of
  // 64 bytes, as numpy does; use version 2.0 only when the 16-bit length would overflow.
  const bool v2 = header.size() + 1 + 10 > 65535;
  const std::size_t prefix = v2 ? 12 : 10;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw NpyError(path.string() + ": cannot open for writing");
  out.write(kMagic.data(), kMagic.size());
  const char version[2] = {static_cast<char>(v2 ? 2 : 1), 0};
  out.write(version, 2);
  const std::size_t len = header.size();
  for (std::size_t i = 0; i < (v2 ? 4u : 2u); ++i)
    out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out.write(header.data(), static_cast<std::streamsize>(len));
  out.write(static_cast<const char*>(data),
            static_cast<std::streamsize>(static_cast<std::size_t>(count) * element_size(type)));
  out.flush();
  if (!out) throw NpyError(path.string() + ": write failed");
}

}  // namespace tileattn::npy
