"""``apply_rotary_emb``: a drop-in for FlashAttention's
``flash_attn.layers.rotary.apply_rotary_emb`` computed by tileattn (``tileattn::apply_rotary``).

Same arguments, defaults and layouts: x ``(batch, seqlen, nheads, headdim)`` or, with
``cu_seqlens``, ``(total_seqlen, nheads, headdim)``; cos and sin ``(seqlen_rotary,
rotary_dim / 2)``; the first ``rotary_dim`` elements of each head vector are rotated, the rest
copied; ``interleaved`` pairs ``(2i, 2i + 1)`` (GPT-J) instead of ``(i, i + rotary_dim / 2)``
(GPT-NeoX); ``seqlen_offsets`` an int or a ``(batch,)`` tensor (the position of each sequence's
first row, e.g. the KV cache's length). Differentiable in x (the gradient is rotated back), like
FlashAttention's. Differences:

  * a position at or beyond ``seqlen_rotary`` is refused (``tileattn.Error``) for CPU tensors;
    FlashAttention leaves such rows unrotated (so does tileattn's CUDA backend);
  * ``max_seqlen`` is accepted and ignored (tileattn reads the lengths from ``cu_seqlens``);
  * no gradient flows to cos and sin (as in FlashAttention);
  * ``inplace=True`` on a tensor that requires grad computes a new tensor and copies it into x
    (autograd records the copy).
"""

from typing import Optional, Union

import torch
from torch import Tensor

from . import _kvcache_ops
from ._common import _plain_eager_call, last_dim_contiguous, rotary_table


def offsets_tensor(seqlen_offsets: Union[int, Tensor], batch: int, device) -> Optional[Tensor]:
    """seqlen_offsets as the library's int32 [B] (None for the int 0)."""
    if isinstance(seqlen_offsets, Tensor):
        if seqlen_offsets.dtype != torch.int32:
            seqlen_offsets = seqlen_offsets.to(torch.int32)
        return seqlen_offsets.contiguous()
    if seqlen_offsets == 0:
        return None
    return torch.full((batch,), int(seqlen_offsets), dtype=torch.int32, device=device)


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False,
                     inplace: bool = False, seqlen_offsets: Union[int, Tensor] = 0,
                     cu_seqlens: Optional[Tensor] = None, max_seqlen: Optional[int] = None):
    """x ``(batch, seqlen, nheads, headdim)`` (or ``(total_seqlen, nheads, headdim)`` with
    ``cu_seqlens (batch + 1,)`` int32); cos, sin ``(seqlen_rotary, rotary_dim / 2)``, float32
    or x's dtype (others are converted to float32); ``seqlen_offsets`` int or ``(batch,)``.
    Returns the rotated tensor, x itself with ``inplace=True``."""
    del max_seqlen  # the lengths come from cu_seqlens
    batch = x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    offsets = offsets_tensor(seqlen_offsets, batch, x.device)
    cos, sin = rotary_table(cos, x.dtype), rotary_table(sin, x.dtype)
    if cos.requires_grad or sin.requires_grad:
        cos, sin = cos.detach(), sin.detach()
    needs_grad = torch.is_grad_enabled() and x.requires_grad
    if inplace and not needs_grad:
        if x.stride(-1) != 1:
            raise ValueError("tileattn: argument 'x': rotating in place needs a contiguous "
                             "last dimension")
        if _plain_eager_call(x, cos, sin):
            _kvcache_ops.rotary_call(x, x, cos, sin, offsets, cu_seqlens, bool(interleaved))
        else:
            _kvcache_ops.apply_rotary_(x, cos, sin, offsets, cu_seqlens, bool(interleaved))
        return x
    xc = last_dim_contiguous(x)
    if not needs_grad and _plain_eager_call(xc, cos, sin):
        out = _kvcache_ops.rotary_impl(xc, cos, sin, offsets, cu_seqlens, bool(interleaved))
    else:
        out = _kvcache_ops.apply_rotary(xc, cos, sin, offsets, cu_seqlens, bool(interleaved))
    if inplace:
        return x.copy_(out)
    return out
