"""Drop-ins for FlashAttention's ``flash_attn_func``, ``flash_attn_kvpacked_func`` and
``flash_attn_qkvpacked_func`` and their varlen forms (``flash_attn_varlen_func``,
``flash_attn_varlen_kvpacked_func``, ``flash_attn_varlen_qkvpacked_func``), computed by tileattn.

Same arguments, defaults, layouts (BSHD: ``(batch, seqlen, nheads, headdim)``) and return
conventions as FlashAttention 2.6+; ``causal`` is bottom-right aligned, ``window_size`` is
``(left, right)`` with -1 unbounded, ``alibi_slopes`` float32 ``(nheads,)`` or
``(batch, nheads)``, ``softcap`` > 0 caps the scaled scores. Differences:

  * ``return_attn_probs=True`` returns ``(out, softmax_lse, S_dmask)``; with ``dropout_p > 0``
    ``S_dmask`` is the probabilities ``[B, H, Lq, Lk]`` (exact shape, no rounding up), negated
    where dropped — computed by a slower PyTorch path that stores the score matrix; without
    dropout it is an empty tensor, as in FlashAttention.
  * ``softmax_lse`` of a row that sees no key is -inf (FlashAttention writes +inf).
  * float32 inputs are accepted as well (FlashAttention takes only fp16 and bf16).
  * no gradient flows to ``softmax_lse``.
  * varlen (packed ``(total, nheads, headdim)`` with int32 ``cu_seqlens``): ``softmax_lse`` is
    ``(nheads, total_q)``; ``return_attn_probs`` with dropout and ``block_table`` (paged KV)
    raise ``NotImplementedError``. Every backend runs varlen batches, CPU and CUDA, forward
    and backward.
"""

from typing import Optional

import torch
from torch import Tensor

from ._common import draw_rng, run
from ._math import keep_mask, probabilities

_U64 = 1 << 64


def _check_window(window_size):
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be a pair (left, right), got {window_size!r}") \
            from None


def _flash(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
           deterministic, return_attn_probs):
    window = _check_window(window_size)
    rng = draw_rng(dropout_p)
    out, lse = run(q, k, v, alibi_slopes=alibi_slopes, causal=causal, top_left=False,
                   window=window, scale=softmax_scale, softcap=softcap, dropout_p=dropout_p,
                   rng=rng, bhsd=False, deterministic=deterministic)
    if not return_attn_probs:
        return out
    if dropout_p <= 0.0:
        return out, lse, q.new_empty((0,))
    with torch.no_grad():
        qt, kt = q.transpose(1, 2), k.transpose(1, 2)  # [B, H, L, D] views
        p = probabilities(qt, kt, causal=causal, top_left=False, window=window,
                          scale=softmax_scale, softcap=softcap, alibi_slopes=alibi_slopes)
        seed, offset = (x % _U64 for x in rng.tolist())
        keep = keep_mask(p.shape[0], p.shape[1], p.shape[2], p.shape[3], dropout_p, seed,
                         offset, p.device)
        s_dmask = torch.where(keep, p, -p).to(q.dtype)
    return out, lse, s_dmask


def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                    softmax_scale: Optional[float] = None, causal: bool = False,
                    window_size=(-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[Tensor] = None, deterministic: bool = False,
                    return_attn_probs: bool = False):
    """q ``(batch, seqlen_q, nheads, headdim)``, k and v ``(batch, seqlen_k, nheads_k,
    headdim)`` (nheads a multiple of nheads_k). Returns ``out (batch, seqlen_q, nheads,
    headdim)``, or ``(out, softmax_lse, S_dmask)`` with ``return_attn_probs``."""
    return _flash(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q: Tensor, kv: Tensor, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             window_size=(-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[Tensor] = None, deterministic: bool = False,
                             return_attn_probs: bool = False):
    """q ``(batch, seqlen_q, nheads, headdim)``, kv ``(batch, seqlen_k, 2, nheads_k,
    headdim)``; k and v are read in place (strided views)."""
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"kv must be (batch, seqlen_k, 2, nheads_k, headdim), got "
                         f"{tuple(kv.shape)}")
    return _flash(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size,
                  softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv: Tensor, dropout_p: float = 0.0,
                              softmax_scale: Optional[float] = None, causal: bool = False,
                              window_size=(-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[Tensor] = None,
                              deterministic: bool = False, return_attn_probs: bool = False):
    """qkv ``(batch, seqlen, 3, nheads, headdim)``; q, k and v are read in place."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"qkv must be (batch, seqlen, 3, nheads, headdim), got "
                         f"{tuple(qkv.shape)}")
    return _flash(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                  window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def _flash_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                  return_attn_probs, block_table):
    if block_table is not None:
        raise NotImplementedError("tileattn: argument 'block_table': paged KV caches are not "
                                  "supported by flash_attn_varlen_func yet")
    if return_attn_probs and dropout_p > 0.0:
        raise NotImplementedError("tileattn: argument 'return_attn_probs': the dropped "
                                  "probabilities of a varlen batch are not available")
    window = _check_window(window_size)
    out, lse = run(q, k, v, alibi_slopes=alibi_slopes, causal=causal, top_left=False,
                   window=window, scale=softmax_scale, softcap=softcap, dropout_p=dropout_p,
                   bhsd=False, deterministic=deterministic, cu_seqlens_q=cu_seqlens_q,
                   cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k)
    if not return_attn_probs:
        return out
    return out, lse, q.new_empty((0,))


def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                           cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                           causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[Tensor] = None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table: Optional[Tensor] = None):
    """q ``(total_q, nheads, headdim)``, k and v ``(total_k, nheads_k, headdim)``, packed by
    int32 ``cu_seqlens_q`` / ``cu_seqlens_k`` ``(batch + 1,)``; every option per sequence
    (causal bottom-right within each sequence). Returns ``out (total_q, nheads, headdim)``,
    or ``(out, softmax_lse (nheads, total_q), S_dmask)`` with ``return_attn_probs``."""
    return _flash_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                         deterministic, return_attn_probs, block_table)


def flash_attn_varlen_kvpacked_func(q: Tensor, kv: Tensor, cu_seqlens_q: Tensor,
                                    cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = 0.0,
                                    softmax_scale: Optional[float] = None, causal: bool = False,
                                    window_size=(-1, -1), softcap: float = 0.0,
                                    alibi_slopes: Optional[Tensor] = None,
                                    deterministic: bool = False,
                                    return_attn_probs: bool = False):
    """q ``(total_q, nheads, headdim)``, kv ``(total_k, 2, nheads_k, headdim)`` (read in
    place)."""
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError(f"kv must be (total_k, 2, nheads_k, headdim), got {tuple(kv.shape)}")
    return _flash_varlen(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap,
                         alibi_slopes, deterministic, return_attn_probs, None)


def flash_attn_varlen_qkvpacked_func(qkv: Tensor, cu_seqlens: Tensor, max_seqlen: int,
                                     dropout_p: float = 0.0,
                                     softmax_scale: Optional[float] = None, causal: bool = False,
                                     window_size=(-1, -1), softcap: float = 0.0,
                                     alibi_slopes: Optional[Tensor] = None,
                                     deterministic: bool = False,
                                     return_attn_probs: bool = False):
    """qkv ``(total, 3, nheads, headdim)`` (read in place), one ``cu_seqlens`` for queries and
    keys."""
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError(f"qkv must be (total, 3, nheads, headdim), got {tuple(qkv.shape)}")
    return _flash_varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen,
                         max_seqlen, dropout_p, softmax_scale, causal, window_size, softcap,
                         alibi_slopes, deterministic, return_attn_probs, None)
