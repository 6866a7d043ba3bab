"""The PyTorch custom operators of the serving path:

  * ``tileattn::attention_with_kvcache`` — tileattn::attention_with_kvcache; declares that it
    mutates ``k_cache`` and ``v_cache`` (the append), so that ``torch.compile`` functionalises
    the call and writes the caller's caches back. Inference only: no autograd.
  * ``tileattn::apply_rotary`` — tileattn::apply_rotary into a new tensor, differentiable in x
    (the backward rotates the gradient by the opposite angle: the same op with ``-sin``);
  * ``tileattn::apply_rotary_`` — the same in place (mutates x; no autograd).

Outputs come from PyTorch's allocator; the calls run on PyTorch's current CUDA stream and never
synchronise with the host (host-resident index arrays are validated on the host).
"""

from typing import Optional

import torch
from torch import Tensor

from .. import _tileattn
from ._ops import _dl, _like, _lse_shape, _stream


def kvcache_impl(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor],
                 v: Optional[Tensor], rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor],
                 cache_seqlens: Tensor, cache_leftpad: Optional[Tensor],
                 cache_batch_idx: Optional[Tensor],
                 block_table: Optional[Tensor], alibi_slopes: Optional[Tensor],
                 cu_seqlens_q: Optional[Tensor], cu_seqlens_k_new: Optional[Tensor],
                 softmax_scale: Optional[float], causal: bool, window_left: int,
                 window_right: int, softcap: float, rotary_interleaved: bool, num_splits: int,
                 max_seqlen_q: int, need_lse: bool = True) -> tuple[Tensor, Tensor]:
    """(out [q's shape with Dv], lse f32 [B, Hq, Lq] or [Hq, total_q]); k and v are appended to
    k_cache and v_cache in place. The small workspace comes from the library's pool: a
    workspace callback into PyTorch's allocator costs an eager decode call more host time than
    it saves GPU time (docs/perf/gpu.md). ``need_lse=False`` (the eager path only) skips lse and
    returns an empty tensor in its place."""
    out = _like(q, v_cache.size(-1))
    lse = torch.empty(_lse_shape(q, False) if need_lse else (0,), dtype=torch.float32,
                      device=q.device)
    _tileattn.kvcache(*(_dl(x) for x in (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin,
                                         cache_seqlens, cache_batch_idx, block_table,
                                         alibi_slopes, cu_seqlens_q, cu_seqlens_k_new, out)),
                      _dl(lse) if need_lse else None, softmax_scale, causal, window_left,
                      window_right, softcap, rotary_interleaved, num_splits, max_seqlen_q, 0, 0,
                      255, _stream(q), None, _dl(cache_leftpad))
    return out, lse


def _kvcache_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor],
                v: Optional[Tensor], rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor],
                cache_seqlens: Tensor, cache_leftpad: Optional[Tensor],
                cache_batch_idx: Optional[Tensor],
                block_table: Optional[Tensor], alibi_slopes: Optional[Tensor],
                cu_seqlens_q: Optional[Tensor], cu_seqlens_k_new: Optional[Tensor],
                softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
                softcap: float, rotary_interleaved: bool, num_splits: int,
                max_seqlen_q: int) -> tuple[Tensor, Tensor]:
    """tileattn::attention_with_kvcache: (out, lse); appends k and v to the caches in place."""
    return kvcache_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                        cache_leftpad, cache_batch_idx, block_table, alibi_slopes, cu_seqlens_q,
                        cu_seqlens_k_new, softmax_scale, causal, window_left, window_right,
                        softcap, rotary_interleaved, num_splits, max_seqlen_q)


# The caches are declared mutated whether or not k and v are given: a schema cannot depend on
# the arguments, and declaring a write that does not happen is safe (the converse is not).
attention_with_kvcache = torch.library.custom_op(
    "tileattn::attention_with_kvcache", mutates_args=("k_cache", "v_cache"))(_kvcache_op)


@attention_with_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_leftpad,
      cache_batch_idx, block_table, alibi_slopes, cu_seqlens_q, cu_seqlens_k_new, softmax_scale, causal,
      window_left, window_right, softcap, rotary_interleaved, num_splits, max_seqlen_q):
    out = _like(q, v_cache.size(-1))
    lse = q.new_empty(_lse_shape(q, False), dtype=torch.float32)
    return out, lse


def rotary_call(x: Tensor, out: Tensor, cos: Tensor, sin: Tensor,
                seqlen_offsets: Optional[Tensor], cu_seqlens: Optional[Tensor],
                interleaved: bool) -> None:
    _tileattn.rotary(_dl(x), _dl(cos), _dl(sin), _dl(out), _dl(seqlen_offsets), _dl(cu_seqlens),
                     interleaved, 0, 0, _stream(x))


def rotary_impl(x: Tensor, cos: Tensor, sin: Tensor, seqlen_offsets: Optional[Tensor],
                cu_seqlens: Optional[Tensor], interleaved: bool) -> Tensor:
    """x rotated (tileattn::apply_rotary) into a new tensor laid out like x."""
    out = _like(x, x.size(-1))
    rotary_call(x, out, cos, sin, seqlen_offsets, cu_seqlens, interleaved)
    return out


apply_rotary = torch.library.custom_op("tileattn::apply_rotary", mutates_args=())(rotary_impl)


@apply_rotary.register_fake
def _(x, cos, sin, seqlen_offsets, cu_seqlens, interleaved):
    return _like(x, x.size(-1))


def _rotary_setup_context(ctx, inputs, output):
    x, cos, sin, seqlen_offsets, cu_seqlens, interleaved = inputs
    ctx.save_for_backward(cos, sin, seqlen_offsets, cu_seqlens)
    ctx.interleaved = interleaved


def _rotary_backward(ctx, grad):
    # A rotation's transpose is the rotation by the opposite angle: cos, -sin. The elements
    # past rotary_dim pass through, so their gradient does too.
    cos, sin, seqlen_offsets, cu_seqlens = ctx.saved_tensors
    if grad.stride(-1) != 1:
        grad = grad.contiguous()
    dx = apply_rotary(grad, cos, -sin, seqlen_offsets, cu_seqlens, ctx.interleaved)
    return dx, None, None, None, None, None


apply_rotary.register_autograd(_rotary_backward, setup_context=_rotary_setup_context)


@torch.library.custom_op("tileattn::apply_rotary_", mutates_args=("x",))
def apply_rotary_(x: Tensor, cos: Tensor, sin: Tensor, seqlen_offsets: Optional[Tensor],
                  cu_seqlens: Optional[Tensor], interleaved: bool) -> None:
    """x rotated in place (tileattn::apply_rotary with out = x)."""
    rotary_call(x, x, cos, sin, seqlen_offsets, cu_seqlens, interleaved)


@apply_rotary_.register_fake
def _(x, cos, sin, seqlen_offsets, cu_seqlens, interleaved):
    return None
