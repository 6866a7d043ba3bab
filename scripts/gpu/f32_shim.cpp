// A C entry point over tileattn's CUDA backend for scripts/gpu/f32_accuracy.py (ctypes): one
// forward or backward call on contiguous BSHD f32 device tensors (lse [B, H, L]), on `stream`.
// Built by the script against build-gpu's static library (position-independent code).
#include <cstdint>
#include <cstdio>
#include <exception>

#include "tileattn/tileattn.hpp"

extern "C" int tileattn_f32_call(int backward, int via_bf16, int causal, int batch, int len,
                                 int heads, int dim, void* q, void* k, void* v, void* out,
                                 void* lse, void* dout, void* dq, void* dk, void* dv,
                                 void* stream) {
  using namespace tileattn;
  try {
    const std::int64_t B = batch, L = len, H = heads, D = dim;
    const auto operand = [&](void* data) {
      return make_tensor(data, DType::f32, {B, L, H, D}, Device::cuda);
    };
    AttentionBackwardArgs a;
    a.q = operand(q);
    a.k = operand(k);
    a.v = operand(v);
    a.out = operand(out);
    a.lse = make_tensor(lse, DType::f32, {B, H, L}, Device::cuda);
    a.causal = causal != 0;
    Context ctx;
    ctx.backend = Backend::cuda;
    ctx.cuda_stream = stream;
    ctx.cuda_f32_via_bf16 = via_bf16 != 0;
    if (backward == 0) {
      attention_forward(a, ctx);
    } else {
      a.dout = operand(dout);
      a.dq = operand(dq);
      a.dk = operand(dk);
      a.dv = operand(dv);
      attention_backward(a, ctx);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tileattn_f32_call: %s\n", e.what());
    return 1;
  }
}
