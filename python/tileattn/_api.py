"""tileattn.attention and tileattn.attention_backward over DLPack arrays."""

from . import _tileattn
from ._arrays import Allocator, default_stream, detach, exported, workspace_allocator
from ._options import (ALIGNMENTS, BACKENDS, CPU_ISAS, choice, fail, layout_is_bhsd, scale_value,
                       u64, window_pair)


def _shape(x, argument, rank=4):
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != rank:
        what = "a rank-4 array" if rank == 4 else "a rank-3 [total, H, D] array (varlen)"
        fail(argument, f"expected {what}, got shape {list(shape)}")
    return tuple(int(s) for s in shape)


def _longest(cu_seqlens):
    """The longest sequence in an offsets array (reads it: a device array synchronises)."""
    import numpy as np
    if hasattr(cu_seqlens, "cpu") and hasattr(cu_seqlens, "numpy"):  # torch
        values = cu_seqlens.detach().cpu().numpy()
    else:
        values = np.asarray(cu_seqlens.get() if hasattr(cu_seqlens, "get") else cu_seqlens)
    return int(np.max(np.diff(values.astype(np.int64)), initial=0)) if values.size > 1 else 0


def _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, layout):
    """The extension's varlen keywords (empty for a padded batch)."""
    if cu_seqlens_q is None and cu_seqlens_k is None:
        return {}
    if layout != "bshd":
        fail("layout", "a varlen batch is packed [total, H, D]: only 'bshd' applies")
    if max_seqlen_q is None and cu_seqlens_q is not None:
        max_seqlen_q = _longest(cu_seqlens_q)
    if max_seqlen_k is None and cu_seqlens_k is not None:
        max_seqlen_k = _longest(cu_seqlens_k)
    return dict(cu_seqlens_q=exported(detach(cu_seqlens_q)),
                cu_seqlens_k=exported(detach(cu_seqlens_k)),
                max_seqlen_q=int(max_seqlen_q or 0), max_seqlen_k=int(max_seqlen_k or 0))


def _options(causal, alignment, window, scale, softcap, dropout_p, seed, offset, layout, backend,
             threads, cpu_isa, stream, like):
    left, right = window_pair(window)
    return dict(
        causal=bool(causal), alignment=choice("alignment", alignment, ALIGNMENTS),
        window_left=left, window_right=right, scale=scale_value(scale), softcap=float(softcap),
        dropout_p=float(dropout_p), seed=u64("seed", seed), offset=u64("offset", offset),
        bhsd=layout_is_bhsd(layout), backend=choice("backend", backend, BACKENDS),
        threads=int(threads), cpu_isa=choice("cpu_isa", cpu_isa, CPU_ISAS),
        stream=default_stream(like) if stream is None else int(stream))


def attention(q, k, v, *, causal=False, alignment="bottom-right", window=(-1, -1), mask=None,
              key_lengths=None, scale=None, softcap=0.0, alibi_slopes=None, dropout_p=0.0,
              seed=0, offset=0, layout="bshd", out=None, return_lse=False, backend="auto",
              threads=0, cpu_isa="best", stream=None, cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=None, max_seqlen_k=None):
    """``softmax(scale · q kᵀ + masks) v``, the flash way (tileattn::attention_forward).

    Arrays: anything that supports DLPack (``__dlpack__``) or the buffer protocol — numpy,
    PyTorch, CuPy, JAX — read and written in place, never copied. All on one device (CPU or
    one CUDA device); another device is refused with ``tileattn.Error``. No autograd here:
    torch tensors are read as data (``tileattn.torch`` has the differentiable operators).

    Args:
        q: ``[B, Lq, Hq, D]`` (layout ``"bshd"``) or ``[B, Hq, Lq, D]`` (``"bhsd"``); f32, f16 or
            bf16; any strides with a contiguous last dimension.
        k: ``[B, Lk, Hkv, D]`` (or ``[B, Hkv, Lk, D]``), q's dtype; ``Hq % Hkv == 0`` (GQA/MQA).
        v: ``[B, Lk, Hkv, Dv]`` (or ``[B, Hkv, Lk, Dv]``), q's dtype.
        causal: key j visible to query i only if ``j <= pos(i)``.
        alignment: ``"bottom-right"`` (``pos(i) = i + Lk - Lq``, FlashAttention) or
            ``"top-left"`` (``pos(i) = i``, PyTorch's ``is_causal``).
        window: ``(left, right)`` sliding window around ``pos(i)``; -1 is unbounded.
        mask: broadcastable to ``[B, Hq, Lq, Lk]`` (rank 2–4); bool (True = attend) or float32
            (added to the scores).
        key_lengths: int32 or int64 ``[B]``: keys ``j >= key_lengths[b]`` are masked.
        scale: multiplier of q·k; None means ``1/sqrt(D)``.
        softcap: ``c > 0`` applies ``c · tanh(s / c)`` to the scores; 0 disables.
        alibi_slopes: float32 ``[Hq]`` or ``[B, Hq]``.
        dropout_p, seed, offset: dropout on the probabilities with the keep mask of
            docs/semantics.md (Philox4x32-10 keyed by seed and offset; the same on every
            backend). Calls meant to draw independent masks advance ``offset`` by ``B · Hq``.
        layout: ``"bshd"`` or ``"bhsd"`` for q, k, v and out.
        out: the output ``[B, Lq, Hq, Dv]`` (in ``layout``), f32/f16/bf16; allocated like q when
            None (a torch tensor for torch inputs, numpy for numpy inputs).
        return_lse: also return the natural-log softmax denominator, float32 ``[B, Hq, Lq]``
            (-inf for a fully masked row).
        backend: ``"auto"`` (CUDA for device arrays, else the CPU kernels), ``"cpu"``,
            ``"reference"`` (double precision, slow) or ``"cuda"``.
        threads: CPU threads (0: OpenMP's default).
        cpu_isa: cap on the CPU instruction set: ``"best"``, ``"amx_bf16"``, ``"avx512_bf16"``,
            ``"avx512"``, ``"avx2"`` or ``"portable"``.
        stream: CUDA stream (an int ``cudaStream_t``); None: torch's or CuPy's current stream
            for their arrays, else the default stream.
        cu_seqlens_q, cu_seqlens_k: a packed variable-length batch (FlashAttention's varlen
            convention): int32 ``[B + 1]`` offsets on q's device; sequence b owns query rows
            ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` and keys ``cu_seqlens_k[b]:cu_seqlens_k[b+1]``.
            q, k, v, out are then ``[total, H, D]`` and lse ``[Hq, total_q]``; every option
            applies per sequence (``key_lengths`` is FlashAttention's ``seqused_k``). Not with
            ``mask`` or layout ``"bhsd"``. The cpu and reference backends run it.
        max_seqlen_q, max_seqlen_k: bounds on every sequence's query / key count; None reads
            them from the offsets (a device array is copied to the host for that).

    Returns:
        ``out``, or ``(out, lse)`` with ``return_lse``.

    Raises:
        tileattn.Error: (a ValueError) an invalid argument; the message names it. Nothing is
            written then.
    """
    q, k, v = detach(q), detach(k), detach(v)
    opts = _options(causal, alignment, window, scale, softcap, dropout_p, seed, offset, layout,
                    backend, threads, cpu_isa, stream, q)
    varlen = _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, layout)
    lse = None
    if out is None or return_lse:
        alloc = Allocator(q, "q")
        if varlen:
            total, hq, _ = _shape(q, "q", 3)
            out_shape, lse_shape = (total, hq, _shape(v, "v", 3)[2]), (hq, total)
        else:
            b, s1, s2, _ = _shape(q, "q")
            hq, lq = (s1, s2) if opts["bhsd"] else (s2, s1)
            out_shape, lse_shape = (b, s1, s2, _shape(v, "v")[3]), (b, hq, lq)
        if out is None:
            out = alloc.empty(out_shape)
        if return_lse:
            lse = alloc.empty(lse_shape, float32=True, name="lse")
    _tileattn.forward(*(exported(x) for x in (q, k, v, out, lse, detach(mask), detach(key_lengths),
                                              detach(alibi_slopes))), **opts, **varlen)
    return (out, lse) if return_lse else out


def attention_backward(dout, q, k, v, out, lse, *, causal=False, alignment="bottom-right",
                       window=(-1, -1), mask=None, key_lengths=None, scale=None, softcap=0.0,
                       alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, layout="bshd",
                       deterministic=False, dq=None, dk=None, dv=None, backend="auto", threads=0,
                       cpu_isa="best", stream=None, cu_seqlens_q=None, cu_seqlens_k=None,
                       max_seqlen_q=None, max_seqlen_k=None):
    """Gradients of ``Σ out ∘ dout`` w.r.t. q, k and v (tileattn::attention_backward).

    Takes the forward's arrays and every option the forward used (dropout's ``seed`` and
    ``offset`` included), its ``out`` and ``lse`` (``attention(..., return_lse=True)``) and
    ``dout``, shaped like ``out``. ``dq``, ``dk``, ``dv`` (shaped like q, k, v; f32/f16/bf16)
    are allocated like q when None. With GQA/MQA, dk and dv sum over the query heads that share
    a kv head. ``deterministic=True`` makes the gradients bitwise reproducible (CPU: for any
    thread count too). The other arguments are ``attention``'s.

    Returns:
        ``(dq, dk, dv)``.

    Raises:
        tileattn.Error: an invalid argument (named in the message); nothing is written then.
    """
    dout, q, k, v, out, lse = (detach(x) for x in (dout, q, k, v, out, lse))
    opts = _options(causal, alignment, window, scale, softcap, dropout_p, seed, offset, layout,
                    backend, threads, cpu_isa, stream, q)
    varlen = _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, layout)
    rank = 3 if varlen else 4
    if dq is None or dk is None or dv is None:
        alloc = Allocator(q, "q")
        if dq is None:
            dq = alloc.empty(_shape(q, "q", rank), name="dq")
        if dk is None:
            dk = alloc.empty(_shape(k, "k", rank), name="dk")
        if dv is None:
            dv = alloc.empty(_shape(v, "v", rank), name="dv")
    _tileattn.backward(*(exported(x) for x in (dout, q, k, v, out, lse, dq, dk, dv, detach(mask),
                                               detach(key_lengths), detach(alibi_slopes))),
                       deterministic=bool(deterministic), workspace=workspace_allocator(q),
                       **opts, **varlen)
    return dq, dk, dv


def merge_attention_states(outs, lses, *, out=None, return_lse=True, backend="auto", threads=0,
                           stream=None):
    """Combines attention over disjoint key sets of the same queries
    (tileattn::merge_attention_states).

    Part i is ``(outs[i], lses[i])`` as ``attention(..., return_lse=True)`` gives them over its
    keys; the result is what one call over the union of the keys gives:
    ``lse = log Σ exp(lse_i)``, ``out = Σ exp(lse_i − lse) out_i``, summed in f32. A part with
    ``lse_i = −inf`` (it saw no key) contributes nothing whatever its out holds; a NaN lse
    makes the row NaN. The building block of prefix sharing and of keys split across calls or
    devices.

    Args:
        outs: 1..32 arrays ``[B, L, H, Dv]`` (or varlen ``[total, H, Dv]``), f32/f16/bf16.
        lses: float32 ``[B, H, L]`` (or ``[H, total]``), one per part.
        out: the merged output (any float dtype, may be one of ``outs``: merged in place);
            allocated like ``outs[0]`` when None.
        return_lse: also return the merged lse (float32).

    Returns:
        ``(out, lse)``, or ``out`` with ``return_lse=False``.
    """
    outs = [detach(x) for x in outs]
    lses = [detach(x) for x in lses]
    if not outs:
        fail("outs", "must hold 1..32 parts, got 0")
    first = outs[0]
    alloc = Allocator(first, "outs[0]")
    shape = tuple(int(s) for s in first.shape)
    if out is None:
        out = alloc.empty(shape, name="out")
    lse = None
    if return_lse:
        lse_shape = (shape[1], shape[0]) if len(shape) == 3 else (shape[0], shape[2], shape[1])
        lse = alloc.empty(lse_shape, float32=True, name="lse")
    stream = default_stream(first) if stream is None else int(stream)
    _tileattn.merge([exported(x) for x in outs], [exported(x) for x in lses], exported(out),
                    exported(lse), choice("backend", backend, BACKENDS), int(threads), stream)
    return (out, lse) if return_lse else out
