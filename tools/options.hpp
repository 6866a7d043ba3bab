// Options shared by the subcommands: parsing of the attention flags (--causal, --window, --dtype,
// --backend, --isa) and the random-problem description used by bench, verify and demo.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tensor_io.hpp"
#include "tileattn/tileattn.hpp"

namespace CLI {
class App;
}

namespace tileattn::tools {

// --causal none|top-left|bottom-right applied to args (causal flag and alignment).
void apply_causal(const std::string& causal, AttentionArgs& args);
// --window LEFT,RIGHT ("-1" = unbounded on that side). Throws ToolError when malformed.
void parse_window(const std::string& window, std::int64_t& left, std::int64_t& right);
DType parse_dtype(const std::string& name);      // f32 | f16 | bf16
Backend parse_backend(const std::string& name);  // auto | cpu | reference | cuda
CpuIsa parse_isa(const std::string& name);     // best or any CpuIsa name (amx_bf16, ..., portable)
Layout parse_layout(const std::string& name);  // bshd | bhsd

// The CLI11 validators matching the parsers above (so errors come at parse time).
void check_causal_option(CLI::App& app, std::string& target);
void check_window_option(CLI::App& app, std::string& target);
void add_isa_option(CLI::App& app, std::string& target);
// --scale TEXT: what the user typed, stored as text and turned into the library's scale by
// parse_scale. --threads N in [0, tileattn::kMaxThreads].
void add_scale_option(CLI::App& app, std::string& target);
void add_threads_option(CLI::App& app, int& target);
// --f32-via-bf16: Context::cuda_f32_via_bf16 (CUDA, f32 storage on the bf16 tensor-core kernels).
void add_f32_via_bf16_flag(CLI::App& app, bool& target);
// Empty text: not given (1/sqrt(D)). Otherwise the number as f32, honoured as given (0 too);
// refused (ToolError naming --scale) when it is not a finite number, when it overflows f32, or
// when it is not 0 but rounds to 0 in f32 (e.g. 1e-50).
std::optional<float> parse_scale(const std::string& text);

// A random attention problem (bench, verify, demo). Always bshd; out in out_dtype (f32 default).
struct Problem {
  std::int64_t batch = 1, heads = 8, kv_heads = 0, len_q = 256, len_k = 0, dim = 64, dim_v = 0;
  std::string causal = "none";
  std::string window = "-1,-1";
  float softcap = 0.0f;
  std::string scale;  // as typed; empty = 1/sqrt(D)
  std::string dtype = "f32";
  std::string out_dtype = "f32";  // of out (and of the backward's dout)
  std::string backend = "cpu";
  std::string isa = "best";
  int threads = 0;
  std::uint64_t seed = 0;  // 0 = fresh
  float dropout = 0.0f;    // dropout_p; the dropout seed is `seed`, the offset 0
  bool with_lse = false;
  bool f32_via_bf16 = false;  // Context::cuda_f32_via_bf16
  // --varlen LO:HI: a packed varlen batch of B x Lq tokens in sequences whose lengths are drawn
  // uniformly from [LO, HI] (the last one takes what is left), keys = queries per sequence.
  std::string varlen;
  std::vector<std::int64_t> sequence_lengths;  // drawn by resolve_defaults

  // kv_heads, len_k, dim_v default to heads, len_q, dim when 0; draws the varlen lengths.
  void resolve_defaults();
  bool is_varlen() const { return !sequence_lengths.empty(); }
  // Registers --batch --heads --kv-heads --lq --lk --dim --dim-v --causal --window --softcap
  // --scale --dtype --backend --isa --threads --f32-via-bf16 --seed on a subcommand.
  void add_options(CLI::App& app);

  AttentionArgs args() const;  // everything but the tensors
  Context context() const;
  // q, k, v filled with N(0, 1) in `dtype`; out in out_dtype; lse when with_lse.
  AttentionBuffers make_buffers() const;
  // The backward's extra buffers: dout ~ N(0, 1) in out_dtype, dq, dk, dv in `dtype`
  // (`gradient_dtype` overrides, e.g. f32 gradients for the reference).
  struct BackwardBuffers {
    HostTensor dout, dq, dk, dv;
    void bind(AttentionBackwardArgs& args) const;
  };
  BackwardBuffers make_backward_buffers(const std::string& gradient_dtype = "") const;
  // FLOPs credited to one forward call: 2·B·Hq·Lq·Lk·(D + Dv), halved for causal when Lq == Lk
  // (varlen: the sum over the sequences, each with Lq = Lk = its length).
  // A backward call is credited 2.5 times as many (its five products to the forward's two).
  double flops() const;
  std::string describe() const;  // one line: shape and options
};

// Throws ToolError("NAME " + why) for the first of `names` given on `app`'s command line (an
// option that does not apply to the mode chosen, e.g. --varlen with bench --decode).
void refuse_options(const CLI::App& app, std::initializer_list<const char*> names,
                    const std::string& why);

// "1.23 GiB" style.
std::string format_bytes(double bytes);

// The library's message without its "tileattn: " prefix, on one line.
std::string one_line(const std::string& message);

}  // namespace tileattn::tools
