"""tileattn.attention_with_kvcache and tileattn.apply_rotary over DLPack arrays."""

import operator

import numpy as np

from . import _tileattn
from ._api import _longest, _shape
from ._arrays import Allocator, default_stream, detach, exported
from ._options import BACKENDS, CPU_ISAS, choice, fail, scale_value

_I32_MAX = (1 << 31) - 1


def _int_argument(value, argument):
    """value as a Python int when it is an integer scalar (int, numpy integer), else None (an
    array)."""
    if isinstance(value, (bool, np.bool_)):
        fail(argument, f"must be an int or an int32 array [B], got {value!r}")
    if isinstance(value, (int, np.integer)):
        return operator.index(value)
    return None


def _i32_per_sequence(value, argument, batch, alloc, absent_when_zero):
    """An int broadcast to an int32 [batch] array (or None for 0 when ``absent_when_zero``);
    arrays pass through."""
    number = _int_argument(value, argument)
    if number is None:
        return detach(value)
    if not 0 <= number <= _I32_MAX:
        fail(argument, f"must be an int in [0, 2^31 - 1] or an int32 array [B], got {value!r}")
    if absent_when_zero and number == 0:
        return None
    return alloc.full_i32((batch,), number, argument)


def _batch(x, argument, cu_seqlens, cu_argument):
    """The number of sequences: cu_seqlens' length - 1 (varlen), else x's first dimension."""
    if cu_seqlens is not None:
        shape = tuple(getattr(cu_seqlens, "shape", ()))
        if len(shape) != 1 or int(shape[0]) < 1:
            fail(cu_argument, f"expected an int32 array [B + 1], got shape {list(shape)}")
        return int(shape[0]) - 1
    return _shape(x, argument)[0]


def _window(window_size):
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        fail("window_size", f"must be a pair (left, right) of ints (-1: unbounded), got "
                            f"{window_size!r}")


def _capacity(k_cache, block_table):
    """Keys a sequence's cache holds: Lmax (contiguous) or max_blocks * block_size (paged)."""
    _, rows, _, _ = _shape(k_cache, "k_cache")
    if block_table is None:
        return rows
    shape = tuple(getattr(block_table, "shape", ()))
    if len(shape) != 2:
        fail("block_table", f"expected an int32 array [B, max_blocks_per_sequence], got shape "
                            f"{list(shape)}")
    return int(shape[1]) * rows


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                           cache_seqlens=None, cache_batch_idx=None, block_table=None,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                           return_softmax_lse=False, *, cu_seqlens_q=None, max_seqlen_q=None,
                           cu_seqlens_k_new=None, cache_leftpad=None, out=None, backend="auto",
                           threads=0, cpu_isa="best", stream=None):
    """Attention of new queries over a KV cache, appending new keys and values to the cache in
    place (tileattn::attention_with_kvcache; FlashAttention's ``flash_attn_with_kvcache``).

    1. When ``k`` and ``v`` are given they are written into the cache at rows
       ``cache_seqlens[b] .. cache_seqlens[b] + Lnew - 1`` of sequence b (into the right pages
       of a paged cache), the keys rotated first when ``rotary_cos``/``rotary_sin`` are given.
       Nothing else in the cache is written.
    2. q (rotated too, in a private copy: q itself is not written) attends to the
       ``cache_seqlens[b] + Lnew`` keys of sequence b. ``causal`` and ``window_size`` are
       bottom-right aligned: query row i of Lq sits at key position ``Lk - Lq + i``.

    Cache rows at or beyond ``cache_seqlens[b] + Lnew`` (pages never written included) are never
    read and may hold anything (NaN too). ``cache_seqlens`` is not updated: the caller advances
    it. Arrays: any DLPack or buffer-protocol array, as ``tileattn.attention``; no autograd.

    Args:
        q: ``[B, Lq, Hq, D]``, or ``[total_q, Hq, D]`` with ``cu_seqlens_q``; f32, f16 or bf16.
        k_cache, v_cache: q's dtype (f16 or bf16 on CUDA), last dimension contiguous. Contiguous:
            ``[B_cache, Lmax, Hkv, D]`` / ``[B_cache, Lmax, Hkv, Dv]``, sequence b in entry
            ``cache_batch_idx[b]`` (default b). Paged (``block_table`` given):
            ``[num_blocks, block_size, Hkv, D]``; key j of sequence b is row
            ``j % block_size`` of block ``block_table[b, j // block_size]``. Written in place
            when ``k``/``v`` are given (then they must be writable).
        k, v: new keys and values ``[B, Lnew, Hkv, D]`` / ``[B, Lnew, Hkv, Dv]`` (or with
            ``cu_seqlens_k_new``, ``[total_new, Hkv, D]``), q's dtype; together or not at all.
        rotary_cos, rotary_sin: ``[max_position, rotary_dim / 2]``, f32 or q's dtype: RoPE of
            the first ``rotary_dim`` elements of q and of the new keys (``apply_rotary``'s
            convention). New key t of sequence b sits at position ``cache_seqlens[b] + t``;
            query row i at ``cache_seqlens[b] + i`` with ``causal`` or a window, else every row
            at ``cache_seqlens[b]`` (FlashAttention's convention).
        cache_seqlens: int32 ``[B]`` keys already in each sequence's cache (before the append),
            or an int for every sequence. None: every cache is full (``Lmax``, or
            ``max_blocks * block_size`` when paged), as in FlashAttention; then nothing can be
            appended.
        cache_batch_idx: int32 ``[B]``, contiguous caches only; distinct entries when appending.
        cache_leftpad: int32 ``[B]`` (keyword), left padding: keys ``j < cache_leftpad[b]`` are
            not attended (they may hold anything); positions, alignment, ALiBi and rotary
            positions stay the cache rows' (FlashAttention's ``cache_leftpad``).
        block_table: int32 ``[B, max_blocks_per_sequence]``: a paged cache. Entries past the
            blocks a sequence uses are never read.
        softmax_scale: multiplier of q·k; None means ``1/sqrt(D)``.
        causal, window_size: ``tileattn.attention``'s ``causal`` and ``window`` (bottom-right).
        softcap: ``c > 0`` applies ``c · tanh(s / c)`` to the scores; 0 disables.
        rotary_interleaved: pairs ``(2i, 2i + 1)`` (GPT-J; the default, FlashAttention's) or
            ``(i, i + rotary_dim / 2)`` (GPT-NeoX) when False.
        alibi_slopes: float32 ``[Hq]`` or ``[B, Hq]``.
        num_splits: the parts each sequence's keys are split into (computed in parallel, merged
            by lse); 0 lets the library decide. Results agree up to rounding.
        return_softmax_lse: also return the natural-log softmax denominator, float32
            ``[B, Hq, Lq]`` (varlen: ``[Hq, total_q]``); -inf for a row that sees no key.
        cu_seqlens_q: int32 ``[B + 1]`` row offsets of each sequence in a packed q (chunked
            prefill, speculative decoding); ``max_seqlen_q`` bounds every sequence's rows (None
            reads it from the offsets, copying a device array to the host).
        cu_seqlens_k_new: int32 ``[B + 1]`` row offsets of each sequence's new keys in a packed
            ``k``/``v`` (with ``cu_seqlens_q`` only).
        out: the output ``[B, Lq, Hq, Dv]`` (varlen ``[total_q, Hq, Dv]``), f32/f16/bf16;
            allocated like q when None.
        backend, threads, cpu_isa, stream: as ``tileattn.attention``.

    Returns:
        ``out``, or ``(out, softmax_lse)`` with ``return_softmax_lse``.

    Raises:
        tileattn.Error: (a ValueError) an invalid argument, named in the message; for host
            arrays, a cache too small for the append or a block index out of range among them
            (the CUDA backend does not read device-resident lengths and indices on the host: it
            clamps them into the cache). Nothing is written then.
    """
    q, k, v = detach(q), detach(k), detach(v)
    k_cache, v_cache = detach(k_cache), detach(v_cache)
    if (k is None) != (v is None):
        fail("v" if v is None else "k", "k and v are given together or not at all")
    left, right = _window(window_size)
    alloc = Allocator(q, "q")
    batch = _batch(q, "q", cu_seqlens_q, "cu_seqlens_q")
    if cache_seqlens is None:
        if k is not None:
            fail("cache_seqlens", "is required when appending k and v (None means every "
                                  "sequence's cache is full)")
        cache_seqlens = _capacity(k_cache, block_table)
    cache_seqlens = _i32_per_sequence(cache_seqlens, "cache_seqlens", batch, alloc, False)
    varlen = cu_seqlens_q is not None
    if varlen and max_seqlen_q is None:
        max_seqlen_q = _longest(cu_seqlens_q)
    lse = None
    if out is None or return_softmax_lse:
        dv = _shape(v_cache, "v_cache")[3]
        if varlen:
            total, hq, _ = _shape(q, "q", 3)
            out_shape, lse_shape = (total, hq, dv), (hq, total)
        else:
            b, lq, hq, _ = _shape(q, "q")
            out_shape, lse_shape = (b, lq, hq, dv), (b, hq, lq)
        if out is None:
            out = alloc.empty(out_shape)
        if return_softmax_lse:
            lse = alloc.empty(lse_shape, float32=True, name="lse")
    arrays = (q, k_cache, v_cache, k, v, detach(rotary_cos), detach(rotary_sin), cache_seqlens,
              detach(cache_batch_idx), detach(block_table), detach(alibi_slopes),
              detach(cu_seqlens_q), detach(cu_seqlens_k_new), out, lse)
    _tileattn.kvcache(
        *(exported(x) for x in arrays), scale=scale_value(softmax_scale), causal=bool(causal),
        window_left=left, window_right=right, softcap=float(softcap),
        rotary_interleaved=bool(rotary_interleaved), num_splits=int(num_splits),
        max_seqlen_q=int(max_seqlen_q or 0), backend=choice("backend", backend, BACKENDS),
        threads=int(threads), cpu_isa=choice("cpu_isa", cpu_isa, CPU_ISAS),
        stream=default_stream(q) if stream is None else int(stream),
        cache_leftpad=exported(detach(cache_leftpad)))
    return (out, lse) if return_softmax_lse else out


def apply_rotary(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, interleaved=False,
                 inplace=False, out=None, *, backend="auto", threads=0, stream=None):
    """Rotary position embedding (RoPE) of the first ``rotary_dim = 2 * cos.shape[1]`` elements
    of each head vector (tileattn::apply_rotary); the other elements are copied unchanged.

    Row l of sequence b sits at position ``p = seqlen_offsets[b] + l``; pair i, ``(x_a, x_b)``,
    becomes ``(x_a cos[p, i] - x_b sin[p, i], x_a sin[p, i] + x_b cos[p, i])``, computed in f32
    and rounded to x's dtype. Pair i is ``(2i, 2i + 1)`` with ``interleaved`` (GPT-J) and
    ``(i, i + rotary_dim / 2)`` otherwise (GPT-NeoX). FlashAttention's
    ``flash_attn.layers.rotary.apply_rotary_emb`` conventions.

    Args:
        x: ``[B, L, H, D]``, or ``[total, H, D]`` with ``cu_seqlens``; f32, f16 or bf16, last
            dimension contiguous.
        cos, sin: ``[max_position, rotary_dim / 2]``, f32 or x's dtype; ``rotary_dim <= D``.
            Every position must be below ``max_position``.
        seqlen_offsets: an int (every sequence's first position) or int32 ``[B]``.
        cu_seqlens: int32 ``[B + 1]`` offsets of each sequence's rows in a packed x.
        interleaved: the pairing (see above).
        inplace: rotate x itself and return it (x must be writable).
        out: the result, x's shape and dtype (not overlapping x unless it is x); allocated like
            x when None.
        backend, threads, stream: as ``tileattn.attention``.

    Returns:
        ``out`` (``x`` with ``inplace``).

    Raises:
        tileattn.Error: an invalid argument, named in the message; nothing is written then.
    """
    x = detach(x)
    if inplace:
        if out is not None and out is not x:
            fail("out", "is x with inplace=True; give one or the other")
        out = x
    alloc = Allocator(x, "x")
    batch = None
    if _int_argument(seqlen_offsets, "seqlen_offsets") not in (None, 0):
        batch = _batch(x, "x", cu_seqlens, "cu_seqlens")
    offsets = _i32_per_sequence(seqlen_offsets, "seqlen_offsets", batch, alloc, True)
    if out is None:
        out = alloc.empty(tuple(int(s) for s in x.shape), name="out")
    _tileattn.rotary(*(exported(a) for a in (x, detach(cos), detach(sin), out, offsets,
                                             detach(cu_seqlens))),
                     interleaved=bool(interleaved), backend=choice("backend", backend, BACKENDS),
                     threads=int(threads),
                     stream=default_stream(x) if stream is None else int(stream))
    return out
