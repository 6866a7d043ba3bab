// Checks of the options attention_forward and attention_with_kvcache share (validate.cpp,
// validate_kvcache.cpp): each fills its part of AttnParams or throws tileattn::Error naming the
// argument.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "api/tensor_checks.hpp"
#include "common/params.hpp"

namespace tileattn::detail {

// Kernels index keys and rows with 32-bit lanes: lengths stay below 2^31.
inline constexpr std::int64_t kMaxLength = (std::int64_t{1} << 31) - 1;

// cu_seqlens_q / _k: i32 [B + 1] on q's device. On the host the offsets are checked: from 0,
// non-decreasing, ending at the tensor's row count, no sequence longer than max_seqlen. Device
// offsets are not read here (that would synchronise); kernels trust them.
void check_cu_seqlens(const char* name, const Tensor& cu, const Tensor& q, std::int64_t batch,
                      std::int64_t total, const char* total_name, std::int64_t max_seqlen,
                      const char* max_name);

// scale (default 1/sqrt(p.dim)) and softcap.
void set_scale_and_softcap(AttnParams& p, std::optional<float> scale, float softcap);

// Window and causal flag (folded into window_right) and alignment; needs p.len_q and p.len_k.
void set_window(AttnParams& p, std::int64_t window_left, std::int64_t window_right, bool causal,
                Alignment alignment);

// lse f32 [B, Hq, Lq] (varlen: [Hq, total_q]; p.batch, heads_q and len_q or total_q set), when
// present; it must not overlap `inputs` (named by inputs_names in the message). Returns its span
// (empty when absent).
Span set_lse(AttnParams& p, const Tensor& lse, const Tensor& q, bool varlen,
             std::initializer_list<Span> inputs, const char* inputs_names);

// ALiBi slopes f32 [Hq] or [B, Hq], when present; they must not overlap `outputs`.
void set_alibi(AttnParams& p, const Tensor& slopes, const Tensor& q,
               std::initializer_list<Span> outputs);

}  // namespace tileattn::detail
