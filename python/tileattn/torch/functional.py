"""``tileattn.torch.attention`` (every tileattn option, differentiable),
``tileattn.torch.attention_with_kvcache`` (every option of the KV-cache operator, inference) and
the drop-in for ``torch.nn.functional.scaled_dot_product_attention``."""

import math
from typing import Optional

import torch
from torch import Tensor

from .._options import ALIGNMENTS, choice, layout_is_bhsd, window_pair
from . import _ops
from ._common import _plain_eager_call, run, run_kvcache
from .flash import _check_window


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
              alignment: str = "bottom-right", window=(-1, -1), mask: Optional[Tensor] = None,
              key_lengths: Optional[Tensor] = None, scale: Optional[float] = None,
              softcap: float = 0.0, alibi_slopes: Optional[Tensor] = None,
              dropout_p: float = 0.0, layout: str = "bshd", deterministic: bool = False,
              return_lse: bool = False):
    """``tileattn.attention`` for torch tensors, through the ``tileattn::attention_forward``
    custom op: differentiable in q, k and v (the backward is the library's), traceable by
    ``torch.compile(fullgraph=True)``. ``deterministic`` makes the backward bitwise
    reproducible. With dropout, the seed is drawn from PyTorch's CPU generator
    (``torch.manual_seed`` reproduces it). Returns ``out`` or ``(out, lse)``."""
    top_left = choice("alignment", alignment, ALIGNMENTS) == 1
    out, lse = run(q, k, v, mask=mask, key_lengths=key_lengths, alibi_slopes=alibi_slopes,
                   causal=causal, top_left=top_left, window=window_pair(window), scale=scale,
                   softcap=softcap, dropout_p=dropout_p, bhsd=layout_is_bhsd(layout),
                   deterministic=deterministic)
    return (out, lse) if return_lse else out


def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                           k: Optional[Tensor] = None, v: Optional[Tensor] = None,
                           rotary_cos: Optional[Tensor] = None,
                           rotary_sin: Optional[Tensor] = None, cache_seqlens=None,
                           cache_batch_idx: Optional[Tensor] = None,
                           block_table: Optional[Tensor] = None,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size=(-1, -1), softcap: float = 0.0,
                           rotary_interleaved: bool = True,
                           alibi_slopes: Optional[Tensor] = None, num_splits: int = 0,
                           return_softmax_lse: bool = False, *,
                           cu_seqlens_q: Optional[Tensor] = None,
                           max_seqlen_q: Optional[int] = None,
                           cu_seqlens_k_new: Optional[Tensor] = None,
                           cache_leftpad: Optional[Tensor] = None):
    """``tileattn.attention_with_kvcache`` for torch tensors, through the
    ``tileattn::attention_with_kvcache`` custom op (traceable by
    ``torch.compile(fullgraph=True)``; the caches are declared mutated): every option, varlen
    queries (``cu_seqlens_q``, ``max_seqlen_q``), new keys (``cu_seqlens_k_new``) and left
    padding (``cache_leftpad``) included.
    Inference only: no autograd. ``cache_seqlens``: int32 ``[B]``, an int, or None for full
    caches. Under ``torch.compile`` give ``max_seqlen_q`` with ``cu_seqlens_q`` (None reads the
    offsets on the host). Returns ``out`` or ``(out, softmax_lse)``."""
    out, lse = run_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                           cache_batch_idx, block_table, softmax_scale, causal,
                           _check_window(window_size), softcap, rotary_interleaved, alibi_slopes,
                           num_splits, cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new,
                           need_lse=return_softmax_lse, cache_leftpad=cache_leftpad)
    return (out, lse) if return_softmax_lse else out


def _to_rank4(x: Tensor, batch_shape) -> Tensor:
    """(..., L, E) with any number of leading dims -> [B, H, L, E] (a view where possible)."""
    if x.dim() == 4:
        return x
    if x.dim() < 4:
        return x.reshape((1,) * (4 - x.dim()) + tuple(x.shape))
    return x.reshape((-1,) + tuple(x.shape[-3:]))


def _mask_rank4(mask: Tensor, q_batch_shape, heads: int, len_q: int, len_k: int) -> Tensor:
    """An SDPA mask broadcastable to (*batch, Hq, Lq, Lk) -> a rank 2..4 tileattn mask (which
    broadcasts right-aligned too)."""
    if len(q_batch_shape) <= 1:
        return mask if mask.dim() >= 2 else mask.reshape((1,) * (2 - mask.dim()) + mask.shape)
    full = tuple(q_batch_shape) + (heads, len_q, len_k)  # > 4 dims: flattened (a copy)
    return mask.expand(full).reshape((-1, heads, len_q, len_k))


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` computed by tileattn.

    Same signature and conventions: query ``(N, ..., Hq, L, E)``, key ``(N, ..., Hkv, S, E)``,
    value ``(N, ..., Hkv, S, Ev)``; ``is_causal`` is top-left aligned; ``attn_mask`` is a bool
    mask (True = attend) or a float mask added to the scores, broadcastable to
    ``(N, ..., L, S)``; ``enable_gqa`` lets Hq be a multiple of Hkv. Differentiable in query,
    key and value; no copies of BHSD inputs.

    Differences from PyTorch:
      * a row that sees no key (fully masked) gives 0 with gradient 0, as PyTorch >= 2.5 does on
        the CPU; some PyTorch CUDA kernels give NaN there. ``S == 0`` gives 0 as well.
      * float masks are converted to float32 (one copy) when they are not float32 already.
      * dropout draws tileattn's keep mask (Philox, docs/semantics.md) seeded from PyTorch's
        CPU generator, so the dropped elements differ from PyTorch's for the same seed.
      * no gradient flows to ``attn_mask`` (one that requires grad is refused).
      * head dims are limited to 256 (tileattn.Error beyond).
    """
    if (attn_mask is None and dropout_p == 0.0 and query.ndim == 4 and key.ndim == 4
            and value.ndim == 4 and query.size(1) == key.size(1)
            and query.stride(3) == 1 and key.stride(3) == 1 and value.stride(3) == 1
            and _plain_eager_call(query, key, value)):
        # The common inference call (BHSD, no mask, no dropout, no autograd graph): straight to
        # the library, no lse. Everything here is host time on top of the kernel's launch.
        return _ops.forward_eager(query, key, value, None, None, None, bool(is_causal), True,
                                  -1, -1, None if scale is None else float(scale), 0.0, 0.0,
                                  None, True, None, None, 0, 0)
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        raise RuntimeError(
            f"scaled_dot_product_attention: query, key and value must have the same rank (at "
            f"least 2), got {query.dim()}, {key.dim()} and {value.dim()}")
    if query.dim() >= 3 and query.shape[-3] != key.shape[-3]:
        if not enable_gqa:
            raise RuntimeError(
                f"scaled_dot_product_attention: query has {query.shape[-3]} heads and key "
                f"{key.shape[-3]}; pass enable_gqa=True for grouped-query attention")
        if query.shape[-3] % key.shape[-3] != 0:
            raise RuntimeError(
                f"scaled_dot_product_attention: the number of query heads "
                f"({query.shape[-3]}) must be a multiple of the key/value heads "
                f"({key.shape[-3]})")
    batch_shape = tuple(query.shape[:-3]) if query.dim() >= 3 else ()
    heads = query.shape[-3] if query.dim() >= 3 else 1
    len_q, len_k = query.shape[-2], key.shape[-2]
    q, k, v = _to_rank4(query, batch_shape), _to_rank4(key, batch_shape), \
        _to_rank4(value, batch_shape)
    mask = None
    if attn_mask is not None:
        mask = attn_mask if attn_mask.dtype in (torch.bool, torch.float32) else attn_mask.float()
        mask = _mask_rank4(mask, batch_shape, heads, len_q, len_k)
    out, _ = run(q, k, v, mask=mask, causal=is_causal, top_left=True, scale=scale,
                 dropout_p=dropout_p, bhsd=True, need_lse=False)
    if query.dim() == 4:
        return out
    return out.reshape(tuple(query.shape[:-1]) + (value.shape[-1],))
