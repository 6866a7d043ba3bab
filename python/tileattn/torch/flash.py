"""Drop-ins for FlashAttention's ``flash_attn_func``, ``flash_attn_kvpacked_func`` and
``flash_attn_qkvpacked_func``, their varlen forms (``flash_attn_varlen_func``,
``flash_attn_varlen_kvpacked_func``, ``flash_attn_varlen_qkvpacked_func``) and
``flash_attn_with_kvcache``, computed by tileattn.

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
  * ``flash_attn_with_kvcache``: see its docstring.
"""

from typing import Optional, Union

import torch
from torch import Tensor

from ._common import draw_rng, run, run_kvcache
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


def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                            k: Optional[Tensor] = None, v: Optional[Tensor] = None,
                            rotary_cos: Optional[Tensor] = None,
                            rotary_sin: Optional[Tensor] = None,
                            cache_seqlens: Optional[Union[int, Tensor]] = None,
                            cache_batch_idx: Optional[Tensor] = None,
                            cache_leftpad: Optional[Tensor] = None,
                            block_table: Optional[Tensor] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size=(-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True,
                            alibi_slopes: Optional[Tensor] = None, num_splits: int = 0,
                            return_softmax_lse: bool = False):
    """FlashAttention 2's ``flash_attn_with_kvcache``: attention of q over a KV cache, appending
    ``k``/``v`` to the cache in place first (the ``tileattn::attention_with_kvcache`` custom
    op, which ``torch.compile(fullgraph=True)`` traces; it declares the caches mutated).

    q ``(batch, seqlen_q, nheads, headdim)``; k_cache, v_cache ``(batch_cache, seqlen_cache,
    nheads_k, headdim)``, or paged ``(num_blocks, page_block_size, nheads_k, headdim)`` with
    ``block_table`` int32 ``(batch, max_num_blocks_per_seq)`` (any ``page_block_size`` >= 1,
    not only multiples of 256); k, v ``(batch, seqlen_new, nheads_k, headdim)``, written at rows
    ``cache_seqlens[b] ..`` of sequence b (rotated by ``rotary_cos``/``rotary_sin``
    ``(seqlen_ro, rotary_dim / 2)`` first when given); ``cache_seqlens`` an int or int32
    ``(batch,)`` — None means every cache is full (``seqlen_cache``, or
    ``max_num_blocks_per_seq * page_block_size``); ``cache_batch_idx`` int32 ``(batch,)``
    picks cache entries. ``causal`` and ``window_size`` are bottom-right aligned. With rotary,
    q is rotated at positions ``cache_seqlens + i`` when causal or windowed, else all at
    ``cache_seqlens``. ``cache_seqlens`` is not advanced: the caller does that.

    Returns ``out (batch, seqlen_q, nheads, headdim)``, or ``(out, softmax_lse (batch, nheads,
    seqlen_q))`` with ``return_softmax_lse``.

    Inference only: no autograd (the output does not require grad; inputs that do are read as
    data). Differences from FlashAttention:

      * an int ``cache_seqlens`` is broadcast to q's batch (FlashAttention uses
        ``k_cache.shape[0]``, which differs for a paged cache);
      * for CPU tensors, a cache too small for the append, a block index out of range, rotary
        tables too short for the positions used and ``cache_batch_idx`` naming an entry twice
        while appending are refused with ``tileattn.Error``; the CUDA backend does not read
        device-resident lengths and indices on the host (it clamps them into the cache), so
        keep them in range there;
      * ``softmax_lse`` of a row that sees no key is -inf (FlashAttention writes +inf);
      * float32 inputs are accepted on the CPU (the CUDA backend takes float16 and bfloat16
        caches, as FlashAttention); rotary tables of another float dtype than q's or float32
        are converted to float32.
    """
    out, lse = run_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                           cache_batch_idx, block_table, softmax_scale, causal,
                           _check_window(window_size), softcap, rotary_interleaved,
                           alibi_slopes, num_splits, need_lse=return_softmax_lse,
                           cache_leftpad=cache_leftpad)
    return (out, lse) if return_softmax_lse else out
