"""What the drop-ins share: argument preparation and the autograd-enabled call of the op."""

from typing import Optional

import torch
from torch import Tensor

from . import _ops


def last_dim_contiguous(x: Tensor) -> Tensor:
    """tileattn reads any strides but needs the head dimension contiguous."""
    return x if x.stride(-1) == 1 or x.size(-1) == 1 else x.contiguous()


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
