"""The PyTorch custom operators ``tileattn::attention_forward`` / ``tileattn::attention_backward``.

Registered with ``torch.library.custom_op`` (opaque to ``torch.compile``, which traces them
through their fake implementations), with autograd through ``register_autograd`` calling the
library's backward. Every output, and the CUDA backward's workspace, comes from PyTorch's
allocator (``torch.empty``); the calls run on PyTorch's current CUDA stream and never
synchronise with the host, so they can be captured in a CUDA graph.

Dropout: ``rng`` is a CPU int64 tensor ``[seed, offset]`` (the uint64 values as two's
complement), drawn by the callers from PyTorch's CPU generator with ``torch.randint`` (traced by
``torch.compile`` like any random op; under CUDA graph capture the draw is captured once, so
every replay drops the same elements). The keep decision is the library's (docs/semantics.md).
"""

from typing import Optional

import torch
from torch import Tensor

from .. import _tileattn

_U64 = 1 << 64


def _rng_values(rng: Optional[Tensor]):
    if rng is None:
        return 0, 0
    seed, offset = rng.tolist()
    return seed % _U64, offset % _U64


def _dl(x: Optional[Tensor]):
    """A DLPack capsule for the extension (skips ``Tensor.__dlpack__``'s Python, ~3 us)."""
    return None if x is None else torch.utils.dlpack.to_dlpack(x)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _workspace(t: Tensor):
    """The CUDA workspace allocator handed to the library: PyTorch's caching allocator on t's
    device (a CUDA graph capture then sees no allocation by the library), None on the CPU."""
    if not t.is_cuda:
        return None
    device = t.device
    return lambda nbytes: torch.empty(((nbytes + 3) // 4,), dtype=torch.float32, device=device)


def _stream(t: Tensor) -> int:
    """PyTorch's current stream on t's device (the raw handle: no Stream object is built)."""
    if not t.is_cuda:
        return 0
    if _raw_stream is not None:
        return _raw_stream(t.device.index)
    return torch.cuda.current_stream(t.device).cuda_stream


def _lse_shape(q: Tensor, bhsd: bool):
    if q.dim() == 3:  # varlen: [total_q, Hq, D] -> [Hq, total_q]
        return (q.shape[1], q.shape[0])
    b, s1, s2, _ = q.shape
    return (b, s1, s2) if bhsd else (b, s2, s1)


def _out_shape(q: Tensor, v: Tensor):
    return (*q.shape[:-1], v.shape[-1])


def _like(x: Tensor, last_dim: int) -> Tensor:
    """A new tensor shaped like x but with last dim `last_dim`, its dimensions in x's memory
    order (as PyTorch's own SDPA lays out its output): a BHSD view of BSHD memory gets BSHD
    memory. Outputs and gradients then match their inputs' strides, so that neither
    ``torch.compile`` nor the caller copies them into another layout (AOTAutograd makes a
    tangent match its forward output's strides)."""
    if x.size(-1) == last_dim and x.is_contiguous(memory_format=torch.contiguous_format):
        return torch.empty_like(x)
    order = sorted(range(x.dim()), key=lambda d: (-x.stride(d), d))
    if order[-1] != x.dim() - 1:  # the last dim must stay innermost
        order = [d for d in order if d != x.dim() - 1] + [x.dim() - 1]
    shape = (*x.shape[:-1], last_dim)
    buffer = x.new_empty([shape[d] for d in order])
    inverse = [0] * x.dim()
    for position, d in enumerate(order):
        inverse[d] = position
    return buffer.permute(inverse)


def forward_impl(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor],
                      key_lengths: Optional[Tensor], alibi_slopes: Optional[Tensor],
                      causal: bool, top_left: bool, window_left: int, window_right: int,
                      scale: Optional[float], softcap: float, dropout_p: float,
                      rng: Optional[Tensor], bhsd: bool, deterministic: bool,
                      cu_seqlens_q: Optional[Tensor] = None,
                      cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                      max_seqlen_k: int = 0) -> tuple[Tensor, Tensor]:
    """out [q's layout, Dv] and lse f32 [B, Hq, Lq] (tileattn::attention_forward).

    ``deterministic`` is the backward's (bitwise reproducible gradients); the forward is
    always deterministic. With ``cu_seqlens_q``/``_k`` (int32 [B + 1]) q, k, v are a packed
    varlen batch [total, H, D] and lse is [Hq, total_q].
    """
    out = _like(q, v.size(-1))
    lse = torch.empty(_lse_shape(q, bhsd), dtype=torch.float32, device=q.device)
    seed, offset = _rng_values(rng)
    _tileattn.forward(*(_dl(x) for x in (q, k, v, out, lse, mask, key_lengths, alibi_slopes)),
                      causal, int(top_left), window_left, window_right, scale, softcap, dropout_p,
                      seed, offset, bhsd, 0, 0, 255, _stream(q), _dl(cu_seqlens_q),
                      _dl(cu_seqlens_k), max_seqlen_q, max_seqlen_k)
    return out, lse


def forward_eager(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor],
                  key_lengths: Optional[Tensor], alibi_slopes: Optional[Tensor], causal: bool,
                  top_left: bool, window_left: int, window_right: int, scale: Optional[float],
                  softcap: float, dropout_p: float, rng: Optional[Tensor], bhsd: bool,
                  cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                  max_seqlen_q: int, max_seqlen_k: int) -> Tensor:
    """out alone, without lse: the drop-ins' eager path when no autograd graph is recorded and
    the caller does not want lse (every allocation and conversion here is host time)."""
    # empty_like when out is shaped like q: about a third of torch.empty's host time.
    out = torch.empty_like(q) if q.size(-1) == v.size(-1) else q.new_empty(_out_shape(q, v))
    seed, offset = _rng_values(rng)
    dl = torch.utils.dlpack.to_dlpack
    _tileattn.forward(dl(q), dl(k), dl(v), dl(out), None, _dl(mask), _dl(key_lengths),
                      _dl(alibi_slopes), causal, int(top_left), window_left, window_right, scale,
                      softcap, dropout_p, seed, offset, bhsd, 0, 0, 255, _stream(q),
                      _dl(cu_seqlens_q), _dl(cu_seqlens_k), max_seqlen_q, max_seqlen_k)
    return out


# The operator (forward_impl is its implementation, and the drop-ins' eager path where no
# autograd graph is recorded: the dispatcher's round trip costs ~20 us a call).
attention_forward = torch.library.custom_op("tileattn::attention_forward",
                                            mutates_args=())(forward_impl)


@attention_forward.register_fake
def _(q, k, v, mask, key_lengths, alibi_slopes, causal, top_left, window_left, window_right,
      scale, softcap, dropout_p, rng, bhsd, deterministic, cu_seqlens_q=None, cu_seqlens_k=None,
      max_seqlen_q=0, max_seqlen_k=0):
    out = _like(q, v.size(-1))
    lse = q.new_empty(_lse_shape(q, bhsd), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("tileattn::attention_backward", mutates_args=())
def attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       mask: Optional[Tensor], key_lengths: Optional[Tensor],
                       alibi_slopes: Optional[Tensor], causal: bool, top_left: bool,
                       window_left: int, window_right: int, scale: Optional[float],
                       softcap: float, dropout_p: float, rng: Optional[Tensor], bhsd: bool,
                       deterministic: bool, cu_seqlens_q: Optional[Tensor] = None,
                       cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                       max_seqlen_k: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) shaped like q, k, v (tileattn::attention_backward)."""
    if dout.stride(-1) != 1:  # e.g. the expanded gradient of a sum()
        dout = dout.contiguous()
    dq, dk, dv = _like(q, q.size(-1)), _like(k, k.size(-1)), _like(v, v.size(-1))
    seed, offset = _rng_values(rng)
    workspace = _workspace(q)
    _tileattn.backward(*(_dl(x) for x in (dout, q, k, v, out, lse, dq, dk, dv, mask, key_lengths,
                                          alibi_slopes)),
                       causal, int(top_left), window_left, window_right, scale, softcap,
                       dropout_p, seed, offset, bhsd, deterministic, 0, 0, 255, _stream(q),
                       workspace, _dl(cu_seqlens_q), _dl(cu_seqlens_k), max_seqlen_q,
                       max_seqlen_k)
    return dq, dk, dv


@attention_backward.register_fake
def _(dout, q, k, v, out, lse, mask, key_lengths, alibi_slopes, causal, top_left, window_left,
      window_right, scale, softcap, dropout_p, rng, bhsd, deterministic, cu_seqlens_q=None,
      cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0):
    return _like(q, q.size(-1)), _like(k, k.size(-1)), _like(v, v.size(-1))


# Autograd: the forward saves what the library's backward needs (its own out and lse included).
def _setup_context(ctx, inputs, output):
    (q, k, v, mask, key_lengths, alibi_slopes, causal, top_left, window_left, window_right,
     scale, softcap, dropout_p, rng, bhsd, deterministic, cu_seqlens_q, cu_seqlens_k,
     max_seqlen_q, max_seqlen_k) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, key_lengths, alibi_slopes, rng, cu_seqlens_q,
                          cu_seqlens_k)
    ctx.options = (causal, top_left, window_left, window_right, scale, softcap, dropout_p)
    ctx.max_seqlen = (max_seqlen_q, max_seqlen_k)
    ctx.bhsd = bhsd
    ctx.deterministic = deterministic or torch.are_deterministic_algorithms_enabled()


def _backward(ctx, dout, dlse):
    (q, k, v, out, lse, mask, key_lengths, alibi_slopes, rng, cu_seqlens_q,
     cu_seqlens_k) = ctx.saved_tensors
    (causal, top_left, window_left, window_right, scale, softcap, dropout_p) = ctx.options
    dq, dk, dv = attention_backward(dout, q, k, v, out, lse, mask, key_lengths, alibi_slopes,
                                    causal, top_left, window_left, window_right, scale, softcap,
                                    dropout_p, rng, ctx.bhsd, ctx.deterministic, cu_seqlens_q,
                                    cu_seqlens_k, *ctx.max_seqlen)
    # No gradient flows to lse (as in FlashAttention), the mask, the key lengths, the slopes or
    # the offsets; the drop-ins refuse a mask or slopes that require grad.
    return (dq, dk, dv) + (None,) * 17

attention_forward.register_autograd(_backward, setup_context=_setup_context)
