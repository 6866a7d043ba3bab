"""What the drop-ins share: argument preparation and the autograd-enabled call of the op."""

from typing import Optional

import torch
from torch import Tensor

from . import _kvcache_ops, _ops


def last_dim_contiguous(x: Tensor) -> Tensor:
    """tileattn reads any strides but needs the head dimension contiguous."""
    return x if x.stride(-1) == 1 or x.size(-1) == 1 else x.contiguous()


def rotary_table(t: Tensor, dtype) -> Tensor:
    """A cos or sin table as tileattn takes it: f32 or the rotated tensor's dtype (others are
    converted to f32), rows with a contiguous last dimension."""
    if t.dtype != torch.float32 and t.dtype != dtype:
        t = t.float()
    return last_dim_contiguous(t)


def draw_rng(dropout_p: float) -> Optional[Tensor]:
    """[seed, offset] for a call with dropout, drawn from PyTorch's CPU generator."""
    if dropout_p <= 0.0:
        return None
    return torch.randint(-(1 << 63), (1 << 63) - 1, (2,), dtype=torch.int64)


def refuse_grad(argument: str, x: Optional[Tensor]):
    if x is not None and x.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError(
            f"tileattn: argument '{argument}': gradients with respect to it are not supported "
            f"(pass it detached)")


def _plain_eager_call(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the call can skip the dispatcher: eager, no autograd graph to record, plain
    tensors (not fake, functional or other subclasses), no functorch transform active."""
    if torch.compiler.is_compiling():
        return False
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return False
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor:
        return False
    transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return transforms_active is None or not transforms_active()


def run(q: Tensor, k: Tensor, v: Tensor, *, mask=None, key_lengths=None, alibi_slopes=None,
        causal=False, top_left=False, window=(-1, -1), scale=None, softcap=0.0, dropout_p=0.0,
        rng=None, bhsd=False, deterministic=False, cu_seqlens_q=None, cu_seqlens_k=None,
        max_seqlen_q=0, max_seqlen_k=0, need_lse=True):
    """(out, lse) through tileattn::attention_forward, differentiable in q, k and v (a packed
    varlen batch with cu_seqlens_q/_k). need_lse=False lets an eager call without autograd
    skip lse: (out, None)."""
    refuse_grad("mask", mask)
    refuse_grad("alibi_slopes", alibi_slopes)
    if rng is None and dropout_p > 0.0:
        rng = draw_rng(dropout_p)
    eager = _plain_eager_call(q, k, v)
    if eager and not need_lse:
        return _ops.forward_eager(
            last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v), mask,
            key_lengths, alibi_slopes, bool(causal), bool(top_left), int(window[0]),
            int(window[1]), None if scale is None else float(scale), float(softcap),
            float(dropout_p), rng, bool(bhsd), cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
            int(max_seqlen_k)), None
    op = _ops.forward_impl if eager else _ops.attention_forward
    return op(
        last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v), mask,
        key_lengths, alibi_slopes, bool(causal), bool(top_left), int(window[0]), int(window[1]),
        None if scale is None else float(scale), float(softcap), float(dropout_p), rng,
        bool(bhsd), bool(deterministic), cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
        int(max_seqlen_k))


def run_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k=None, v=None, rotary_cos=None,
                rotary_sin=None, cache_seqlens=None, cache_batch_idx=None, block_table=None,
                softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                rotary_interleaved=True, alibi_slopes=None, num_splits=0, cu_seqlens_q=None,
                max_seqlen_q=None, cu_seqlens_k_new=None, need_lse=True, cache_leftpad=None):
    """(out, lse) through tileattn::attention_with_kvcache (k and v appended to the caches in
    place); no autograd. cache_seqlens: an int32 tensor [B], an int for every sequence, or None
    for full caches. need_lse=False lets an eager call skip lse: (out, empty tensor)."""
    if (k is None) != (v is None):
        raise ValueError("tileattn: argument 'k': k and v are given together or not at all")
    # Inference only: values that require grad are read as data (the output does not).
    q, k, v, rotary_cos, rotary_sin, alibi_slopes = (
        None if x is None else x.detach()
        for x in (q, k, v, rotary_cos, rotary_sin, alibi_slopes))
    q = last_dim_contiguous(q)
    if k is not None:
        k, v = last_dim_contiguous(k), last_dim_contiguous(v)
    if rotary_cos is not None:
        rotary_cos = rotary_table(rotary_cos, q.dtype)
    if rotary_sin is not None:
        rotary_sin = rotary_table(rotary_sin, q.dtype)
    batch = q.shape[0] if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("tileattn: argument 'cache_seqlens': is required when appending "
                             "k and v (None means every sequence's cache is full)")
        cache_seqlens = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
    if isinstance(cache_seqlens, Tensor):
        if cache_seqlens.dtype != torch.int32:
            cache_seqlens = cache_seqlens.to(torch.int32)
    else:
        cache_seqlens = torch.full((batch,), int(cache_seqlens), dtype=torch.int32,
                                   device=q.device)
    if cache_leftpad is not None and cache_leftpad.dtype != torch.int32:
        cache_leftpad = cache_leftpad.to(torch.int32)
    if cu_seqlens_q is not None and max_seqlen_q is None:
        max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max()) if batch > 0 else 0
    args = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_leftpad,
            cache_batch_idx,
            block_table, alibi_slopes, cu_seqlens_q, cu_seqlens_k_new,
            None if softmax_scale is None else float(softmax_scale), bool(causal),
            int(window[0]), int(window[1]), float(softcap), bool(rotary_interleaved),
            int(num_splits), int(max_seqlen_q or 0))
    if _plain_eager_call(q, k_cache, v_cache):
        return _kvcache_ops.kvcache_impl(*args, need_lse=need_lse)
    return _kvcache_ops.attention_with_kvcache(*args)
