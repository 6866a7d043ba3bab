#include "options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string_view>
#include <vector>

#include "random_inputs.hpp"

namespace tileattn::tools {
namespace {

bool parse_int(std::string_view text, std::int64_t& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

void apply_causal(const std::string& causal, AttentionArgs& args) {
  if (causal == "none") {
    args.causal = false;
  } else if (causal == "top-left") {
    args.causal = true;
    args.alignment = Alignment::top_left;
  } else if (causal == "bottom-right") {
    args.causal = true;
    args.alignment = Alignment::bottom_right;
  } else {
    throw ToolError("--causal: '" + causal + "' is not one of none, top-left, bottom-right");
  }
}

void parse_window(const std::string& window, std::int64_t& left, std::int64_t& right) {
  const std::size_t comma = window.find(',');
  if (comma == std::string::npos || !parse_int(std::string_view(window).substr(0, comma), left) ||
      !parse_int(std::string_view(window).substr(comma + 1), right))
    throw ToolError("--window: expected LEFT,RIGHT (integers, -1 = unbounded), got '" + window +
                    "'");
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "f16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  throw ToolError("--dtype: '" + name + "' is not one of f32, f16, bf16");
}

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::automatic;
  if (name == "cpu") return Backend::cpu;
  if (name == "reference") return Backend::reference;
  if (name == "cuda") return Backend::cuda;
  throw ToolError("--backend: '" + name + "' is not one of auto, cpu, reference, cuda");
}

// Every CpuIsa the library names, best first (the enum is ordered so), then "best".
std::vector<CpuIsa> known_isas() {
  std::vector<CpuIsa> isas;
  for (int i = 0; i < 32; ++i) {
    const auto isa = static_cast<CpuIsa>(i);
    if (std::string_view(to_string(isa)) != "unknown") isas.push_back(isa);
  }
  isas.push_back(CpuIsa::best);
  return isas;
}

std::string isa_names() {
  std::string names;
  for (const CpuIsa isa : known_isas())
    names += (names.empty() ? "" : ", ") + std::string(to_string(isa));
  return names;
}

CpuIsa parse_isa(const std::string& name) {
  for (const CpuIsa isa : known_isas())
    if (name == to_string(isa)) return isa;
  throw ToolError("--isa: '" + name + "' is not one of " + isa_names());
}

void add_isa_option(CLI::App& app, std::string& target) {
  app.add_option("--isa", target, "Cap on the CPU instruction set: " + isa_names())
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            for (const CpuIsa isa : known_isas())
              if (value == to_string(isa)) return {};
            return "'" + value + "' is not one of " + isa_names();
          },
          "ISA"))
      ->capture_default_str();
}

Layout parse_layout(const std::string& name) {
  if (name == "bshd") return Layout::bshd;
  if (name == "bhsd") return Layout::bhsd;
  throw ToolError("--layout: '" + name + "' is not one of bshd, bhsd");
}

void check_causal_option(CLI::App& app, std::string& target) {
  app.add_option("--causal", target,
                 "Causal mask: none, top-left (PyTorch is_causal) or bottom-right (FlashAttention)")
      ->check(CLI::IsMember({"none", "top-left", "bottom-right"}))
      ->capture_default_str();
}

void check_window_option(CLI::App& app, std::string& target) {
  app.add_option("--window", target, "Sliding window LEFT,RIGHT; -1 = unbounded on that side")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            std::int64_t left = 0, right = 0;
            try {
              parse_window(value, left, right);
            } catch (const ToolError&) {
              return "expected LEFT,RIGHT (integers, -1 = unbounded), got '" + value + "'";
            }
            return {};
          },
          "LEFT,RIGHT"))
      ->capture_default_str();
}

void Problem::resolve_defaults() {
  if (kv_heads == 0) kv_heads = heads;
  if (len_k == 0) len_k = len_q;
  if (dim_v == 0) dim_v = dim;
  if (seed == 0) seed = fresh_seed();
  sequence_lengths.clear();
  if (varlen.empty()) return;
  long long lo = 0, hi = 0;
  char tail = 0;
  if (std::sscanf(varlen.c_str(), "%lld:%lld%c", &lo, &hi, &tail) != 2 || lo < 1 || hi < lo)
    throw ToolError("--varlen: expected LO:HI with 1 <= LO <= HI, got '" + varlen + "'");
  if (len_k != len_q) throw ToolError("--varlen: keys are the queries' lengths (leave --lk out)");
  // The lengths come from the seed, so a given --seed reproduces the batch.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<long long> length(lo, hi);
  for (std::int64_t left = batch * len_q; left > 0;) {
    const std::int64_t n = std::min<std::int64_t>(length(rng), left);
    sequence_lengths.push_back(n);
    left -= n;
  }
}

void Problem::add_options(CLI::App& app) {
  app.add_option("--batch,-b", batch, "Batch size B")->capture_default_str();
  app.add_option("--heads", heads, "Query heads Hq")->capture_default_str();
  app.add_option("--kv-heads", kv_heads, "Key/value heads Hkv (default: Hq; Hq % Hkv == 0)");
  app.add_option("--lq", len_q, "Query length Lq")->capture_default_str();
  app.add_option("--lk", len_k, "Key length Lk (default: Lq)");
  app.add_option("--dim", dim, "Head dim D of q and k")->capture_default_str();
  app.add_option("--dim-v", dim_v, "Head dim Dv of v (default: D)");
  check_causal_option(app, causal);
  check_window_option(app, window);
  app.add_option("--softcap", softcap, "Softcap c > 0: s = c*tanh(s/c); 0 = off")
      ->capture_default_str();
  add_scale_option(app, scale);
  app.add_option("--dtype", dtype, "Storage precision of q, k, v")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_option("--out-dtype", out_dtype, "Storage precision of out (and of the backward's dout)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_option("--backend", backend, "Backend: auto, cpu, reference, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "reference", "cuda"}))
      ->capture_default_str();
  add_isa_option(app, isa);
  add_threads_option(app, threads);
  add_f32_via_bf16_flag(app, f32_via_bf16);
  app.add_option("--seed", seed, "Random seed; 0 = a fresh one (printed)");
  app.add_option("--varlen", varlen,
                 "LO:HI: a packed varlen batch of B x Lq tokens, sequence lengths uniform in "
                 "[LO, HI] drawn from --seed (keys = queries per sequence)");
  app.add_option("--dropout", dropout,
                 "Dropout probability in [0, 1) (Philox keyed by --seed, offset 0); 0 = off")
      ->capture_default_str();
}

void add_scale_option(CLI::App& app, std::string& target) {
  // Checked while parsing too, so that a given but empty value is refused rather than read as
  // "not given".
  app.add_option("--scale", target, "Score scale, used as given (0 too); default 1/sqrt(D)")
      ->check(
          [](const std::string& text) -> std::string {
            // CLI11 puts "--scale: " in front of what this returns.
            if (text.empty()) return "an empty value is not a number";
            try {
              parse_scale(text);
            } catch (const ToolError& e) {
              const std::string why = e.what();
              const std::string prefix = "--scale: ";
              return why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why;
            }
            return "";
          },
          "FLOAT");
}

void add_threads_option(CLI::App& app, int& target) {
  app.add_option("--threads", target,
                 "CPU threads, at most " + std::to_string(kMaxThreads) + "; 0 = OpenMP default")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
}

void add_f32_via_bf16_flag(CLI::App& app, bool& target) {
  app.add_flag("--f32-via-bf16", target,
               "CUDA, f32 storage: compute with bf16 tensor-core products (~3e-3 relative "
               "error, fastest) instead of f32 FMA products (the default)");
}

std::optional<float> parse_scale(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const auto refuse = [&](const char* why) -> std::optional<float> {
    throw ToolError("--scale: '" + text + "' " + why);
  };
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return refuse("is not a number");
  if (!std::isfinite(value)) return refuse("is not a finite number");
  const auto f = static_cast<float>(value);
  if (!std::isfinite(f)) return refuse("overflows f32 (at most 3.4e38)");
  if (f == 0.0f && value != 0.0) return refuse("rounds to 0 in f32 (the smallest is 1.4e-45)");
  if (errno == ERANGE) return refuse("rounds to 0 in f32 (the smallest is 1.4e-45)");
  return f;
}

AttentionArgs Problem::args() const {
  AttentionArgs a;
  apply_causal(causal, a);
  parse_window(window, a.window_left, a.window_right);
  a.softcap = softcap;
  a.scale = parse_scale(scale);
  a.dropout_p = dropout;
  a.dropout_seed = seed;
  if (is_varlen())
    a.max_seqlen_q = a.max_seqlen_k =
        *std::max_element(sequence_lengths.begin(), sequence_lengths.end());
  return a;
}

Context Problem::context() const {
  Context ctx;
  ctx.backend = parse_backend(backend);
  ctx.cpu_isa = parse_isa(isa);
  ctx.threads = threads;
  ctx.cuda_f32_via_bf16 = f32_via_bf16;
  return ctx;
}

AttentionBuffers Problem::make_buffers() const {
  if (batch < 1 || heads < 1 || kv_heads < 1 || len_q < 0 || len_k < 0 || dim < 1 || dim_v < 1)
    throw ToolError("the problem shape must have B, Hq, Hkv, D, Dv >= 1 and Lq, Lk >= 0");
  const DType storage = parse_dtype(dtype);
  AttentionBuffers buf;
  if (is_varlen()) {
    const std::int64_t total = batch * len_q,
                       n = static_cast<std::int64_t>(sequence_lengths.size());
    buf.q = HostTensor(storage, {total, heads, dim});
    buf.k = HostTensor(storage, {total, kv_heads, dim});
    buf.v = HostTensor(storage, {total, kv_heads, dim_v});
    buf.out = HostTensor(parse_dtype(out_dtype), {total, heads, dim_v});
    if (with_lse) buf.lse = HostTensor(DType::f32, {heads, total});
    buf.cu_seqlens_q = HostTensor(DType::i32, {n + 1});
    auto* cu = buf.cu_seqlens_q.data_as<std::int32_t>();
    cu[0] = 0;
    for (std::int64_t b = 0; b < n; ++b)
      cu[b + 1] = static_cast<std::int32_t>(cu[b] + sequence_lengths[static_cast<std::size_t>(b)]);
    buf.cu_seqlens_k = buf.cu_seqlens_q;
  } else {
    buf.q = HostTensor(storage, {batch, len_q, heads, dim});
    buf.k = HostTensor(storage, {batch, len_k, kv_heads, dim});
    buf.v = HostTensor(storage, {batch, len_k, kv_heads, dim_v});
    buf.out = HostTensor(parse_dtype(out_dtype), {batch, len_q, heads, dim_v});
    if (with_lse) buf.lse = HostTensor(DType::f32, {batch, heads, len_q});
  }
  fill_normal(buf.q, seed);
  fill_normal(buf.k, seed + 1);
  fill_normal(buf.v, seed + 2);
  return buf;
}

Problem::BackwardBuffers Problem::make_backward_buffers(const std::string& gradient_dtype) const {
  const DType grad = parse_dtype(gradient_dtype.empty() ? dtype : gradient_dtype);
  BackwardBuffers buf;
  // Varlen: packed [total, H, D] (total = B x Lq, keys = queries).
  const auto shape = [&](std::int64_t len, std::int64_t h, std::int64_t d) {
    return is_varlen() ? std::vector<std::int64_t>{batch * len, h, d}
                       : std::vector<std::int64_t>{batch, len, h, d};
  };
  buf.dout = HostTensor(parse_dtype(out_dtype), shape(len_q, heads, dim_v));
  fill_normal(buf.dout, seed + 3);
  buf.dq = HostTensor(grad, shape(len_q, heads, dim));
  buf.dk = HostTensor(grad, shape(len_k, kv_heads, dim));
  buf.dv = HostTensor(grad, shape(len_k, kv_heads, dim_v));
  return buf;
}

void Problem::BackwardBuffers::bind(AttentionBackwardArgs& args) const {
  args.dout = dout.view("dout");
  args.dq = dq.view("dq");
  args.dk = dk.view("dk");
  args.dv = dv.view("dv");
}

double Problem::flops() const {
  if (is_varlen()) {
    double f = 0.0;
    for (const std::int64_t n : sequence_lengths)
      f += 2.0 * static_cast<double>(heads) * static_cast<double>(n) * static_cast<double>(n) *
           static_cast<double>(dim + dim_v) * (causal != "none" ? 0.5 : 1.0);
    return f;
  }
  double f = 2.0 * static_cast<double>(batch) * static_cast<double>(heads) *
             static_cast<double>(len_q) * static_cast<double>(len_k) *
             static_cast<double>(dim + dim_v);
  if (causal != "none" && len_q == len_k) f *= 0.5;
  return f;
}

std::string Problem::describe() const {
  std::ostringstream os;
  os << "B=" << batch << " Hq=" << heads << " Hkv=" << kv_heads << " Lq=" << len_q
     << " Lk=" << len_k << " D=" << dim << " Dv=" << dim_v << " dtype=" << dtype
     << " causal=" << causal;
  if (out_dtype != "f32") os << " out=" << out_dtype;
  if (window != "-1,-1") os << " window=" << window;
  if (softcap > 0.0f) os << " softcap=" << softcap;
  if (dropout > 0.0f) os << " dropout=" << dropout;
  if (is_varlen())
    os << " varlen=" << varlen << " (" << sequence_lengths.size() << " sequences of "
       << batch * len_q << " tokens)";
  return os.str();
}

void refuse_options(const CLI::App& app, std::initializer_list<const char*> names,
                    const std::string& why) {
  for (const char* name : names)
    if (app.count(name) > 0) throw ToolError(std::string(name) + " " + why);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return text;
}

std::string one_line(const std::string& message) {
  std::string s = message;
  constexpr std::string_view prefix = "tileattn: ";
  if (s.compare(0, prefix.size(), prefix) == 0) s.erase(0, prefix.size());
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace tileattn::tools
