#include "cli_test_support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "common/float_convert.hpp"

namespace tileattn::cli_test {
namespace {

std::uint64_t run_seed() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    if (const char* env = std::getenv("TILEATTN_TEST_SEED")) return std::stoull(env);
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string shell_quote(const std::string& s) {
  std::string q(1, '\'');
  for (const char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

// The reader behind parse_json_object.
class Json {
 public:
  explicit Json(const std::string& text) : s_(text) {}

  bool parse_object(std::map<std::string, std::string>& members) {
    if (!consume('{')) return false;
    if (consume('}')) return at_end();
    do {
      std::string key;
      if (!string(key) || !consume(':')) return false;
      const std::size_t start = (space(), i_);
      if (!value()) return false;
      members[key] = s_.substr(start, i_ - start);
    } while (consume(','));
    return consume('}') && at_end();
  }

 private:
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool consume(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool at_end() { return space(), i_ == s_.size(); }
  bool string(std::string& out) {
    if (!consume('"')) return false;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      out += s_[i_++];
    }
    return i_ < s_.size() && s_[i_++] == '"';
  }
  bool value() {
    space();
    std::string ignored;
    if (i_ < s_.size() && s_[i_] == '"') return string(ignored);
    for (const char* word : {"null", "true", "false"})
      if (s_.compare(i_, std::strlen(word), word) == 0) return i_ += std::strlen(word), true;
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-'))
      ++i_;
    return i_ > start;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace

std::uint64_t test_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      info ? std::string(info->test_suite_name()) + "." + info->name() : std::string();
  return run_seed() ^ std::hash<std::string>{}(name);
}

std::string seed_note() {
  return "seed " + std::to_string(test_seed()) +
         " (rerun with TILEATTN_TEST_SEED=" + std::to_string(run_seed()) + ")";
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("tileattn_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path_))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

int CliResult::err_lines() const {
  return static_cast<int>(std::count(err.begin(), err.end(), '\n'));
}

CliResult run_cli(const std::vector<std::string>& args, const std::filesystem::path& scratch) {
  static std::atomic<int> counter{0};
  const int id = counter++;
  const auto out_path = scratch / ("cli_stdout_" + std::to_string(id) + ".txt");
  const auto err_path = scratch / ("cli_stderr_" + std::to_string(id) + ".txt");
  std::string command = shell_quote(TILEATTN_CLI_PATH);
  for (const auto& a : args) command.append(" ").append(shell_quote(a));
  command.append(" >").append(shell_quote(out_path.string()));
  command.append(" 2>").append(shell_quote(err_path.string()));
  const int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

std::vector<float> random_normal(std::mt19937_64& rng, std::int64_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = normal(rng);
  return v;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

void write_f32(const std::string& path, const std::vector<std::int64_t>& shape,
               const std::vector<float>& data) {
  npy::write(path, npy::ElementType::f32, shape, data.data());
}

std::vector<std::uint16_t> write_f16(const std::string& path,
                                     const std::vector<std::int64_t>& shape,
                                     const std::vector<float>& data) {
  std::vector<std::uint16_t> bits(data.size());
  std::transform(data.begin(), data.end(), bits.begin(), detail::f32_to_f16);
  npy::write(path, npy::ElementType::f16, shape, bits.data());
  return bits;
}

std::vector<float> read_f32(const std::string& path, std::vector<std::int64_t>* shape) {
  const npy::Array a = npy::read(path);
  EXPECT_EQ(a.type, npy::ElementType::f32) << path;
  if (shape) *shape = a.shape;
  return std::vector<float>(a.as<float>(), a.as<float>() + a.element_count());
}

double rel_l2(const std::vector<float>& x, const std::vector<float>& ref) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (x.size() != ref.size()) return inf;
  double diff2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(ref[i]) && x[i] == ref[i]) continue;
    if (!std::isfinite(x[i]) || !std::isfinite(ref[i])) return inf;
    const double d = static_cast<double>(x[i]) - ref[i];
    diff2 += d * d;
    ref2 += static_cast<double>(ref[i]) * ref[i];
  }
  return ref2 > 0.0 ? std::sqrt(diff2 / ref2) : (diff2 > 0.0 ? inf : 0.0);
}

Tensor contiguous(void* data, DType dtype, const std::vector<std::int64_t>& shape) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[static_cast<std::size_t>(d)];
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

bool parse_json_object(const std::string& text, std::map<std::string, std::string>& members) {
  return Json(text).parse_object(members);
}

}  // namespace tileattn::cli_test
