"""The serving operators: tileattn.attention_with_kvcache / tileattn.apply_rotary (any DLPack
array) and tileattn.torch's flash_attn_with_kvcache / apply_rotary_emb / attention_with_kvcache,
against a float64 reference written here: each sequence's keys gathered from the cache (through
the block table or cache_batch_idx), new keys rotated by this file's own RoPE, then attention
with the bottom-right causal mask, window, softcap and ALiBi. The append is checked row by row:
the new keys land in the right pages and every other bit of the cache is unchanged (unwritten
rows hold NaN, which must not leak into the output). torch.compile of a decode loop, opcheck of
the custom ops, errors; CUDA variants skip without a GPU."""

import inspect
import math
import os

import numpy as np
import pytest
import torch
from torch.library import opcheck

import tileattn
import tileattn.torch as tt
from reference import TOL, rel_l2

CUDA = torch.cuda.is_available() and tileattn.build_info()["cuda"]
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a GPU and a build with TILEATTN_CUDA=ON")


# ---- the reference ----------------------------------------------------------------------------

def rope_table(positions, rotary_dim, dtype=torch.float32):
    """cos, sin [positions, rotary_dim / 2]: angle p * 10000^(-2i / rotary_dim)."""
    p = torch.arange(positions, dtype=torch.float64)[:, None]
    i = torch.arange(rotary_dim // 2, dtype=torch.float64)[None, :]
    angle = p * 10000.0 ** (-2.0 * i / rotary_dim)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rope(x, cos, sin, pos, interleaved):
    """x [..., D] float64 rotated at integer positions pos (broadcast to x.shape[:-1] except the
    head dimension: pos has x's leading dims with the head dim as 1). Differentiable."""
    half = cos.shape[1]
    c = cos.double()[pos]  # [..., 1, half]
    s = sin.double()[pos]
    if interleaved:
        ia, ib = torch.arange(0, 2 * half, 2), torch.arange(1, 2 * half, 2)
    else:
        ia, ib = torch.arange(half), torch.arange(half, 2 * half)
    a, b = x[..., ia], x[..., ib]
    out = x.clone()
    out[..., ia] = a * c - b * s
    out[..., ib] = a * s + b * c
    return out


def attend(q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, slopes=None):
    """One sequence in float64: q [Lq, Hq, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] -> out
    [Lq, Hq, Dv], lse [Hq, Lq]. Query row i sits at key position Lk - Lq + i (bottom-right)."""
    lq, hq, d = q.shape
    lk, hkv = k.shape[0], k.shape[1]
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    pos = i + lk - lq
    if slopes is not None:
        s = s - slopes.double()[:, None, None] * (pos - j).abs()
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    ok = torch.ones(lq, lk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= pos - left
    if right >= 0:
        ok &= j <= pos + right
    s = s.masked_fill(~ok, float("-inf"))
    dead = torch.isneginf(s).all(-1, keepdim=True)
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return torch.einsum("hqk,khd->qhd", p, v), lse


def bits(x):
    """The bit patterns of a float tensor (NaN compares equal to itself)."""
    x = torch.as_tensor(x)
    return x.view(torch.int32 if x.element_size() == 4 else torch.int16)


class Problem:
    """A batch of sequences with a cache (contiguous, through cache_batch_idx, or paged with
    shuffled pages), new keys, queries and rotary tables. Cache rows no sequence holds (pages
    never used included) are NaN; block-table entries past a sequence's pages are -1."""

    def __init__(self, cache_lens, len_q, len_new, *, hq=4, hkv=2, d=32, dv=24, block_size=0,
                 batch_idx=False, rotary_dim=0, dtype=torch.float32, varlen=False, nan=True,
                 seed=0, extra=3):
        g = torch.Generator().manual_seed(seed)
        self.B = B = len(cache_lens)
        self.cache_lens = list(cache_lens)
        self.varlen = varlen
        self.lq = list(len_q) if varlen else [len_q] * B
        self.ln = list(len_new) if varlen else [len_new] * B
        self.dtype, self.hq, self.hkv, self.d, self.dv = dtype, hq, hkv, d, dv
        used = [c + n for c, n in zip(cache_lens, self.ln)]
        cap = max(used) + extra
        self.block_size = block_size
        self.block_table = self.cache_batch_idx = None
        if block_size:
            per_seq = -(-cap // block_size)
            cap = per_seq * block_size
            blocks = B * per_seq + 2
            perm = torch.randperm(blocks, generator=g)
            self.block_table = torch.full((B, per_seq), -1, dtype=torch.int32)
            for b in range(B):
                n = -(-used[b] // block_size)
                self.block_table[b, :n] = perm[b * per_seq:b * per_seq + n]
            rows = block_size
        else:
            blocks, rows = B + (2 if batch_idx else 0), cap
            if batch_idx:
                self.cache_batch_idx = torch.randperm(blocks, generator=g)[:B].to(torch.int32)
        self.capacity = cap

        def randn(*shape):
            return torch.randn(*shape, generator=g).to(dtype)

        self.k_cache = randn(blocks, rows, hkv, d)
        self.v_cache = randn(blocks, rows, hkv, dv)
        held = torch.zeros(blocks, rows, dtype=torch.bool)
        for b in range(B):
            for j in range(cache_lens[b]):
                held[self.where(b, j)] = True
        if nan:
            self.k_cache[~held] = float("nan")
            self.v_cache[~held] = float("nan")
        self.k_before, self.v_before = self.k_cache.clone(), self.v_cache.clone()
        self.cache_seqlens = torch.tensor(cache_lens, dtype=torch.int32)
        if varlen:
            self.cu_q = torch.tensor([0] + self.lq).cumsum(0).to(torch.int32)
            self.cu_new = torch.tensor([0] + self.ln).cumsum(0).to(torch.int32)
            self.q = randn(int(self.cu_q[-1]), hq, d)
            total_new = int(self.cu_new[-1])
            self.k = randn(total_new, hkv, d) if total_new else None
            self.v = randn(total_new, hkv, dv) if total_new else None
        else:
            self.cu_q = self.cu_new = None
            self.q = randn(B, len_q, hq, d)
            self.k = randn(B, len_new, hkv, d) if len_new else None
            self.v = randn(B, len_new, hkv, dv) if len_new else None
        self.cos = self.sin = None
        if rotary_dim:
            self.cos, self.sin = rope_table(cap + max(self.lq) + 2, rotary_dim)
        self.slopes = torch.rand(hq, generator=g) * 0.3 + 0.05

    def where(self, b, j):
        """(block or cache entry, row) of key j of sequence b."""
        if self.block_size:
            return int(self.block_table[b, j // self.block_size]), j % self.block_size
        entry = b if self.cache_batch_idx is None else int(self.cache_batch_idx[b])
        return entry, j

    def rows_q(self, b):
        return slice(int(self.cu_q[b]), int(self.cu_q[b + 1])) if self.varlen else b

    def new_rows(self, x, b):
        """Sequence b's rows of a new-key tensor: [n, H, D]."""
        if x is None:
            return None
        return x[int(self.cu_new[b]):int(self.cu_new[b + 1])] if self.varlen else x[b]

    def kwargs(self, **opts):
        """tileattn.attention_with_kvcache's arguments (torch tensors)."""
        kw = dict(k=self.k, v=self.v, rotary_cos=self.cos, rotary_sin=self.sin,
                  cache_seqlens=self.cache_seqlens, cache_batch_idx=self.cache_batch_idx,
                  block_table=self.block_table)
        if self.varlen:
            kw.update(cu_seqlens_q=self.cu_q, cu_seqlens_k_new=self.cu_new if self.k is not None
                      else None)
        kw.update(opts)
        return kw

    def expected(self, *, causal=False, window=(-1, -1), softcap=0.0, alibi=False,
                 interleaved=True, scale=None, leftpad=None):
        """out (float64, q's shape with Dv), lse (float64 [B, Hq, Lq] or [Hq, total_q]), and
        the new keys as the cache should hold them: {(block, row): (key f64 [Hkv, D], v)}.
        leftpad: per sequence, the keys dropped from the front (attending to the rest alone,
        bottom-right aligned, keeps every position and ALiBi distance)."""
        out = torch.zeros(*self.q.shape[:-1], self.dv, dtype=torch.float64)
        lse = torch.zeros((self.hq, self.q.shape[0]) if self.varlen else
                          (self.B, self.hq, self.q.shape[1]), dtype=torch.float64)
        written = {}
        per_row = causal or tuple(window) != (-1, -1)
        for b in range(self.B):
            length, n = self.cache_lens[b], self.ln[b]
            keys = [self.k_before[self.where(b, j)].double() for j in range(length)]
            values = [self.v_before[self.where(b, j)].double() for j in range(length)]
            new_k, new_v = self.new_rows(self.k, b), self.new_rows(self.v, b)
            for t in range(n):
                key = new_k[t].double()
                if self.cos is not None:  # key [Hkv, D] at position length + t
                    key = rope(key, self.cos, self.sin, torch.tensor([length + t]), interleaved)
                written[self.where(b, length + t)] = (key, new_v[t])
                # The cache stores the key rounded to its dtype; attention reads that.
                keys.append(key.to(self.dtype).double())
                values.append(new_v[t].double())
            q = self.q[self.rows_q(b)].double()  # [Lq, Hq, D]
            lq = q.shape[0]
            if lq == 0:
                continue
            if self.cos is not None:
                pos = length + (torch.arange(lq) if per_row else torch.zeros(lq, dtype=torch.long))
                q = rope(q, self.cos, self.sin, pos[:, None], interleaved)
                q = q.to(self.dtype).double()
            if leftpad is not None:
                keys, values = keys[leftpad[b]:], values[leftpad[b]:]
            k = torch.stack(keys) if keys else torch.zeros(0, self.hkv, self.d, dtype=torch.float64)
            v = torch.stack(values) if values else torch.zeros(0, self.hkv, self.dv,
                                                               dtype=torch.float64)
            o, l = attend(q, k, v, scale=scale, causal=causal, window=window, softcap=softcap,
                          slopes=self.slopes if alibi else None)
            if self.varlen:
                out[self.rows_q(b)], lse[:, self.rows_q(b)] = o, l
            else:
                out[b], lse[b] = o, l
        return out, lse, written

    def check_cache(self, k_cache, v_cache, written, rotated):
        """Written rows hold the new keys and values; every other bit is unchanged."""
        k_cache, v_cache = torch.as_tensor(k_cache), torch.as_tensor(v_cache)
        mask = torch.zeros(k_cache.shape[:2], dtype=torch.bool)
        for (blk, row), (key, value) in written.items():
            mask[blk, row] = True
            assert torch.equal(bits(v_cache[blk, row]), bits(value)), (blk, row)
            if rotated:
                tol = 1e-6 if self.dtype == torch.float32 else 1e-2
                torch.testing.assert_close(k_cache[blk, row].double(), key, rtol=tol, atol=tol)
            else:
                assert torch.equal(bits(k_cache[blk, row]), bits(key.to(self.dtype))), (blk, row)
        assert torch.equal(bits(k_cache[~mask]), bits(self.k_before[~mask]))
        assert torch.equal(bits(v_cache[~mask]), bits(self.v_before[~mask]))


def check_out(out, lse, want, want_lse, dtype=torch.float32):
    out, lse = torch.as_tensor(out), torch.as_tensor(lse)
    assert not torch.isnan(out).any()
    assert rel_l2(out, want) < TOL[dtype]
    finite = torch.isfinite(want_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    torch.testing.assert_close(lse.double()[finite], want_lse[finite], rtol=1e-5, atol=1e-5)
    assert (out[~finite.transpose(-1, -2)] == 0).all()  # rows that see no key: 0


# ---- tileattn.attention_with_kvcache on numpy arrays -------------------------------------------

LAYOUTS = {"contiguous": dict(), "batch_idx": dict(batch_idx=True),
           "paged1": dict(block_size=1), "paged16": dict(block_size=16),
           "paged256": dict(block_size=256)}
CASES = {
    "decode": (dict(len_q=1, len_new=1), dict()),
    "decode_causal_rotary": (dict(len_q=1, len_new=1, rotary_dim=16),
                             dict(causal=True, rotary_interleaved=False)),
    "multi_causal_rotary_interleaved": (dict(len_q=3, len_new=3, rotary_dim=32),
                                        dict(causal=True, rotary_interleaved=True)),
    "no_append_window_softcap": (dict(len_q=2, len_new=0),
                                 dict(window_size=(5, 0), softcap=3.0)),
    "append_window_alibi_rotary": (dict(len_q=2, len_new=2, rotary_dim=8),
                                   dict(window_size=(4, 1), alibi_slopes=True,
                                        rotary_interleaved=True)),
    "more_queries_than_new_keys": (dict(len_q=4, len_new=1), dict(causal=True,
                                                                  softmax_scale=0.3)),
}


def _call_numpy(p, opts):
    opts = dict(opts)
    alibi = opts.pop("alibi_slopes", False)
    kw = {name: (x.numpy() if isinstance(x, torch.Tensor) else x)
          for name, x in p.kwargs(**opts).items()}
    if alibi:
        kw["alibi_slopes"] = p.slopes.numpy()
    k_cache, v_cache = p.k_cache.numpy(), p.v_cache.numpy()  # shared memory: written in place
    out, lse = tileattn.attention_with_kvcache(p.q.numpy(), k_cache, v_cache,
                                               return_softmax_lse=True, **kw)
    return out, lse, alibi


def _expected(p, opts, alibi):
    return p.expected(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
                      softcap=opts.get("softcap", 0.0), alibi=alibi,
                      interleaved=opts.get("rotary_interleaved", True),
                      scale=opts.get("softmax_scale"))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
def test_matches_reference_and_appends_in_place(layout, case):
    shape, opts = CASES[case]
    p = Problem([7, 0, 40, 19], **shape, **LAYOUTS[layout])
    out, lse, alibi = _call_numpy(p, opts)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert out.shape == (4, shape["len_q"], 4, 24) and lse.shape == (4, 4, shape["len_q"])
    want, want_lse, written = _expected(p, opts, alibi)
    check_out(out, lse, want, want_lse)
    p.check_cache(p.k_cache, p.v_cache, written, rotated=p.cos is not None)


@pytest.mark.parametrize("block_size", [0, 16])
def test_varlen_queries_and_new_keys(block_size):
    p = Problem([4, 0, 9, 30, 2], [1, 3, 0, 5, 2], [1, 3, 0, 2, 0], varlen=True, rotary_dim=16,
                block_size=block_size)
    opts = dict(causal=True, rotary_interleaved=False)
    out, lse, _ = _call_numpy(p, opts)
    assert out.shape == (11, 4, 24) and lse.shape == (4, 11)
    want, want_lse, written = _expected(p, opts, False)
    check_out(out, lse, want, want_lse)
    p.check_cache(p.k_cache, p.v_cache, written, rotated=True)


def test_varlen_queries_without_new_keys():
    p = Problem([4, 12, 9], [2, 1, 4], [0, 0, 0], varlen=True, block_size=4)
    out, lse, _ = _call_numpy(p, dict(window_size=(3, 0), max_seqlen_q=4))
    want, want_lse, _ = _expected(p, dict(window_size=(3, 0)), False)
    check_out(out, lse, want, want_lse)
    p.check_cache(p.k_cache, p.v_cache, {}, rotated=False)


def test_int_cache_seqlens_is_broadcast():
    results = []
    for seqlens in (9, np.int64(9), np.array([9, 9, 9], np.int32)):
        p = Problem([9, 9, 9], 1, 2, block_size=16)
        kw = {n: x.numpy() if isinstance(x, torch.Tensor) else x for n, x in p.kwargs().items()}
        kw["cache_seqlens"] = seqlens
        k_cache = p.k_cache.numpy()
        results.append((tileattn.attention_with_kvcache(p.q.numpy(), k_cache, p.v_cache.numpy(),
                                                        **kw), k_cache))
    for out, k_cache in results[1:]:
        np.testing.assert_array_equal(out, results[0][0])
        assert np.array_equal(k_cache, results[0][1], equal_nan=True)


def test_return_softmax_lse_and_given_out():
    p = Problem([5, 8], 2, 1)
    kw = p.kwargs()
    out = tileattn.attention_with_kvcache(p.q, p.k_cache, p.v_cache, **kw)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 2, 4, 24)
    mine = torch.full((2, 2, 4, 24), 7.0, dtype=torch.bfloat16)
    same = tileattn.attention_with_kvcache(p.q, p.k_cache, p.v_cache, **kw, out=mine,
                                           return_softmax_lse=True)
    assert same[0] is mine and same[1].dtype == torch.float32 and same[1].shape == (2, 4, 2)
    assert rel_l2(mine, out) < TOL[torch.bfloat16]


def test_num_splits_agree():
    p = Problem([300, 1000, 3], 2, 1, block_size=16, rotary_dim=32)
    outs = []
    for splits in (1, 4, 0):
        k_cache, v_cache = p.k_before.clone(), p.v_before.clone()
        outs.append(tileattn.attention_with_kvcache(p.q, k_cache, v_cache, num_splits=splits,
                                                    causal=True, return_softmax_lse=True,
                                                    **p.kwargs()))
    want, want_lse, _ = p.expected(causal=True)
    for out, lse in outs:
        check_out(out, lse, want, want_lse)
        assert rel_l2(out, outs[0][0]) < 2e-6
        torch.testing.assert_close(lse, outs[0][1], rtol=0, atol=2e-6)


def test_read_only_cache_serves_calls_without_append():
    p = Problem([5, 8], 1, 0, nan=False)
    k_cache, v_cache = p.k_cache.numpy(), p.v_cache.numpy()
    k_cache.flags.writeable = v_cache.flags.writeable = False
    out = tileattn.attention_with_kvcache(p.q.numpy(), k_cache, v_cache,
                                          cache_seqlens=p.cache_seqlens.numpy())
    want, _, _ = p.expected()
    assert rel_l2(out, want) < TOL[torch.float32]
    k = np.zeros((2, 1, 2, 32), np.float32)
    with pytest.raises(tileattn.Error, match="'k_cache'.*writable"):
        tileattn.attention_with_kvcache(p.q.numpy(), k_cache, v_cache, k, k[..., :24],
                                        cache_seqlens=p.cache_seqlens.numpy())


def test_errors_name_the_argument_and_write_nothing():
    p = Problem([10, 20], 1, 1, block_size=16)
    q, kc, vc = p.q, p.k_cache, p.v_cache

    def call(**changes):
        kw = p.kwargs()
        kw.update(changes)
        return tileattn.attention_with_kvcache(q, kc, vc, **kw)

    with pytest.raises(tileattn.Error, match="'v'.*together"):
        call(v=None)
    with pytest.raises(tileattn.Error, match="'cache_seqlens'.*required when appending"):
        call(cache_seqlens=None)
    with pytest.raises(tileattn.Error, match="'cache_seqlens'.*capacity"):
        call(cache_seqlens=torch.tensor([10, p.capacity], dtype=torch.int32))
    with pytest.raises(tileattn.Error, match="'cache_seqlens'"):
        call(cache_seqlens=-1)
    with pytest.raises(tileattn.Error, match="'cache_seqlens'"):
        call(cache_seqlens=True)
    with pytest.raises(tileattn.Error, match="'cache_seqlens'.*i32"):
        call(cache_seqlens=p.cache_seqlens.long())
    bad = p.block_table.clone()
    bad[1, 0] = kc.shape[0]
    with pytest.raises(tileattn.Error, match="'block_table'.*expected a block"):
        call(block_table=bad)
    with pytest.raises(tileattn.Error, match="'cache_batch_idx'.*contiguous"):
        call(cache_batch_idx=torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(tileattn.Error, match="'num_splits'"):
        call(num_splits=-1)
    cos, sin = rope_table(4, 8)
    with pytest.raises(tileattn.Error, match="'rotary_cos'.*positions"):
        call(rotary_cos=cos, rotary_sin=sin)
    with pytest.raises(tileattn.Error, match="'rotary_sin'.*together"):
        call(rotary_cos=cos)
    with pytest.raises(tileattn.Error, match="'cu_seqlens_k_new'"):
        call(cu_seqlens_k_new=torch.tensor([0, 1, 2], dtype=torch.int32))
    with pytest.raises(tileattn.Error, match="'window_size'"):
        call(window_size=3)
    with pytest.raises(tileattn.Error, match="'k_cache'.*dtype"):
        tileattn.attention_with_kvcache(q, kc.half(), vc.half(), **p.kwargs())
    with pytest.raises(tileattn.Error, match="'backend'"):
        call(backend="gpu")
    # Nothing was written by the refused calls.
    assert torch.equal(bits(kc), bits(p.k_before)) and torch.equal(bits(vc), bits(p.v_before))


# ---- tileattn.apply_rotary --------------------------------------------------------------------

@pytest.mark.parametrize("interleaved", [False, True], ids=["halfsplit", "interleaved"])
@pytest.mark.parametrize("offsets", [0, 7, "array"])
def test_apply_rotary_matches_reference(interleaved, offsets):
    x = torch.randn(3, 11, 2, 40)
    cos, sin = rope_table(64, 24)
    offs = torch.tensor([0, 5, 50], dtype=torch.int32) if offsets == "array" else \
        torch.full((3,), offsets, dtype=torch.int32)
    arg = offs.numpy() if offsets == "array" else offsets
    out = tileattn.apply_rotary(x.numpy(), cos.numpy(), sin.numpy(), seqlen_offsets=arg,
                                interleaved=interleaved)
    assert isinstance(out, np.ndarray) and out.shape == x.shape
    pos = offs[:, None, None].long() + torch.arange(11)[None, :, None]
    want = rope(x.double(), cos, sin, pos, interleaved)
    torch.testing.assert_close(torch.from_numpy(out).double(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out[..., 24:], x.numpy()[..., 24:])


def test_apply_rotary_varlen_inplace_and_out():
    cu = torch.tensor([0, 4, 4, 13], dtype=torch.int32)
    x = torch.randn(13, 3, 16)
    cos, sin = rope_table(32, 16)
    offs = torch.tensor([2, 0, 9], dtype=torch.int32)
    pos = torch.cat([offs[b] + torch.arange(int(cu[b + 1] - cu[b])) for b in range(3)])
    want = rope(x.double(), cos, sin, pos[:, None].long(), False)
    out = torch.empty_like(x)
    got = tileattn.apply_rotary(x, cos, sin, offs, cu, out=out)
    assert got is out
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    y = x.clone()
    assert tileattn.apply_rotary(y, cos, sin, offs, cu, inplace=True) is y
    assert torch.equal(y, out)
    with pytest.raises(tileattn.Error, match="'out'"):
        tileattn.apply_rotary(x, cos, sin, offs, cu, inplace=True, out=out)
    with pytest.raises(tileattn.Error, match="'cos'.*positions"):
        tileattn.apply_rotary(x, cos[:12], sin[:12], offs, cu)
    with pytest.raises(tileattn.Error, match="'out'.*same view"):
        tileattn.apply_rotary(x[None, 1:], cos, sin, out=x[None, :-1])
    with pytest.raises(tileattn.Error, match="'seqlen_offsets'"):
        tileattn.apply_rotary(x, cos, sin, -1, cu)


def test_apply_rotary_bf16_with_f32_tables():
    x = torch.randn(2, 9, 4, 64).bfloat16()
    cos, sin = rope_table(16, 64)
    out = tileattn.apply_rotary(x, cos, sin, interleaved=True)
    want = rope(x.double(), cos, sin, torch.arange(9)[None, :, None], True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), want, rtol=8e-3, atol=8e-3)


# ---- tileattn.torch: flash_attn_with_kvcache, attention_with_kvcache, apply_rotary_emb -------

FA_KVCACHE = ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
              "cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal",
              "window_size", "softcap", "rotary_interleaved", "alibi_slopes", "num_splits",
              "return_softmax_lse"]
FA_ROTARY = ["x", "cos", "sin", "interleaved", "inplace", "seqlen_offsets", "cu_seqlens",
             "max_seqlen"]


def test_signatures_match_flash_attention():
    params = inspect.signature(tt.flash_attn_with_kvcache).parameters
    assert list(params) == FA_KVCACHE
    defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
    assert defaults == dict(k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False)
    params = inspect.signature(tt.apply_rotary_emb).parameters
    assert list(params) == FA_ROTARY
    assert [params[n].default for n in FA_ROTARY[3:]] == [False, False, 0, None, None]
    assert inspect.signature(tileattn.attention_with_kvcache).parameters[
        "rotary_interleaved"].default is True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", "paged16"])
def test_flash_attn_with_kvcache_matches_reference(dtype, layout):
    p = Problem([3, 33, 0], 2, 2, rotary_dim=16, dtype=dtype, **LAYOUTS[layout])
    out, lse = tt.flash_attn_with_kvcache(
        p.q, p.k_cache, p.v_cache, p.k, p.v, p.cos, p.sin, p.cache_seqlens, p.cache_batch_idx,
        None, p.block_table, causal=True, softcap=5.0, alibi_slopes=p.slopes,
        return_softmax_lse=True)
    assert out.dtype == dtype and out.shape == (3, 2, 4, 24) and lse.shape == (3, 4, 2)
    want, want_lse, written = p.expected(causal=True, softcap=5.0, alibi=True)
    check_out(out, lse, want, want_lse, dtype)
    p.check_cache(p.k_cache, p.v_cache, written, rotated=True)
    only_out = tt.flash_attn_with_kvcache(p.q, p.k_before.clone(), p.v_before.clone(), p.k, p.v,
                                          p.cos, p.sin, p.cache_seqlens, p.cache_batch_idx,
                                          None, p.block_table, causal=True, softcap=5.0,
                                          alibi_slopes=p.slopes)
    assert torch.equal(only_out, out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", "paged16"])
def test_flash_attn_with_kvcache_left_padding(dtype, layout):
    """cache_leftpad (FlashAttention's): keys below it are not attended (NaN there changes
    nothing); rotary positions, causal alignment and ALiBi distances stay the cache rows'."""
    p = Problem([5, 33, 7], 2, 2, rotary_dim=16, dtype=dtype, **LAYOUTS[layout])
    leftpad = [2, 30, 9]  # the last: every key of the sequence
    for b, lp in enumerate(leftpad):
        for j in range(min(lp, p.cache_lens[b])):
            for cache in (p.k_cache, p.v_cache, p.k_before, p.v_before):
                cache[p.where(b, j)] = float("nan")
    pad = torch.tensor(leftpad, dtype=torch.int32)
    out, lse = tt.flash_attn_with_kvcache(
        p.q, p.k_cache, p.v_cache, p.k, p.v, p.cos, p.sin, p.cache_seqlens, p.cache_batch_idx,
        pad, p.block_table, causal=True, softcap=5.0, alibi_slopes=p.slopes,
        return_softmax_lse=True)
    want, want_lse, written = p.expected(causal=True, softcap=5.0, alibi=True, leftpad=leftpad)
    assert torch.isneginf(lse[2]).all()  # nothing left to attend to
    want[2], want_lse[2] = 0.0, -math.inf
    check_out(out, lse, want, want_lse, dtype)
    p.check_cache(p.k_cache, p.v_cache, written, rotated=True)
    eager = tt.attention_with_kvcache(p.q, p.k_before.clone(), p.v_before.clone(), p.k, p.v,
                                      p.cos, p.sin, p.cache_seqlens, p.cache_batch_idx,
                                      p.block_table, causal=True, softcap=5.0,
                                      alibi_slopes=p.slopes, cache_leftpad=pad)
    assert torch.equal(eager, out)
    plain = tileattn.attention_with_kvcache(
        p.q, p.k_before.clone(), p.v_before.clone(), p.k, p.v, p.cos, p.sin, p.cache_seqlens,
        p.cache_batch_idx, p.block_table, causal=True, softcap=5.0, alibi_slopes=p.slopes,
        cache_leftpad=pad)
    assert torch.equal(torch.as_tensor(plain), out)


def test_flash_attn_with_kvcache_full_cache_without_seqlens():
    kc, vc = torch.randn(2, 20, 1, 16), torch.randn(2, 20, 1, 16)
    q = torch.randn(2, 3, 2, 16)
    out = tt.flash_attn_with_kvcache(q, kc, vc, causal=True)
    for b in range(2):
        o, _ = attend(q[b].double(), kc[b].double(), vc[b].double(), causal=True)
        assert rel_l2(out[b], o) < TOL[torch.float32]
    # Paged: max_blocks * block_size keys per sequence.
    pages_k, pages_v = torch.randn(9, 4, 1, 16), torch.randn(9, 4, 1, 16)
    table = torch.tensor([[3, 0, 8], [1, 2, 5]], dtype=torch.int32)
    out = tt.flash_attn_with_kvcache(q, pages_k, pages_v, block_table=table)
    for b in range(2):
        k = pages_k[table[b].long()].reshape(12, 1, 16)
        v = pages_v[table[b].long()].reshape(12, 1, 16)
        o, _ = attend(q[b].double(), k.double(), v.double())
        assert rel_l2(out[b], o) < TOL[torch.float32]


def test_flash_attn_with_kvcache_int_seqlens_and_errors():
    p = Problem([6, 6], 1, 1, block_size=4, nan=False)
    ref = tt.flash_attn_with_kvcache(p.q, p.k_before.clone(), p.v_before.clone(), p.k, p.v,
                                     cache_seqlens=p.cache_seqlens, block_table=p.block_table)
    out = tt.flash_attn_with_kvcache(p.q, p.k_cache, p.v_cache, p.k, p.v, cache_seqlens=6,
                                     block_table=p.block_table)
    assert torch.equal(out, ref)
    with pytest.raises(tileattn.Error, match="'cache_leftpad'.*entry 1 is 9"):
        tt.flash_attn_with_kvcache(p.q, p.k_cache, p.v_cache, cache_seqlens=6,
                                   block_table=p.block_table,
                                   cache_leftpad=torch.tensor([0, 9], dtype=torch.int32))
    with pytest.raises(ValueError, match="window_size"):
        tt.flash_attn_with_kvcache(p.q, p.k_cache, p.v_cache, cache_seqlens=6,
                                   block_table=p.block_table, window_size=4)
    with pytest.raises(ValueError, match="cache_seqlens"):
        tt.flash_attn_with_kvcache(p.q, p.k_cache, p.v_cache, p.k, p.v,
                                   block_table=p.block_table)
    with pytest.raises(tileattn.Error, match="'cache_seqlens'.*capacity"):
        tt.flash_attn_with_kvcache(p.q, p.k_cache, p.v_cache, p.k, p.v,
                                   cache_seqlens=p.capacity, block_table=p.block_table)


def test_no_autograd_through_the_cache_op():
    p = Problem([4, 9], 1, 1, nan=False)
    q = p.q.clone().requires_grad_()
    out = tt.flash_attn_with_kvcache(q, p.k_cache, p.v_cache, p.k, p.v,
                                     cache_seqlens=p.cache_seqlens)
    assert not out.requires_grad


def test_torch_attention_with_kvcache_varlen():
    p = Problem([4, 0, 9, 30], [1, 3, 0, 5], [1, 3, 0, 2], varlen=True, rotary_dim=8,
                block_size=16)
    kw = p.kwargs()
    out, lse = tt.attention_with_kvcache(p.q, p.k_cache, p.v_cache, causal=True,
                                         rotary_interleaved=False, return_softmax_lse=True, **kw)
    want, want_lse, written = p.expected(causal=True, interleaved=False)
    check_out(out, lse, want, want_lse)
    p.check_cache(p.k_cache, p.v_cache, written, rotated=True)


@pytest.mark.parametrize("interleaved", [False, True], ids=["halfsplit", "interleaved"])
def test_apply_rotary_emb_forward_and_gradient(interleaved):
    x = torch.randn(2, 7, 3, 32, requires_grad=True)
    cos, sin = rope_table(40, 20)
    offs = torch.tensor([3, 11])
    out = tt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offs)
    x64 = x.detach().double().requires_grad_()
    pos = offs[:, None, None] + torch.arange(7)[None, :, None]
    want = rope(x64, cos, sin, pos, interleaved)
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    g = torch.randn_like(out)
    (dx,) = torch.autograd.grad(out, x, g)
    (dx_want,) = torch.autograd.grad(want, x64, g.double())
    torch.testing.assert_close(dx.double(), dx_want, rtol=1e-6, atol=1e-6)


def test_apply_rotary_emb_inplace_and_varlen():
    cos, sin = rope_table(40, 16, torch.bfloat16)  # tables of x's dtype are read as they are
    x = torch.randn(10, 2, 16).bfloat16()
    cu = torch.tensor([0, 6, 10], dtype=torch.int32)
    out = tt.apply_rotary_emb(x, cos, sin, seqlen_offsets=4, cu_seqlens=cu, max_seqlen=6)
    y = x.clone()
    assert tt.apply_rotary_emb(y, cos, sin, inplace=True, seqlen_offsets=4, cu_seqlens=cu) is y
    assert torch.equal(y, out)
    pos = torch.cat([4 + torch.arange(6), 4 + torch.arange(4)])[:, None]
    torch.testing.assert_close(out.double(), rope(x.double(), cos, sin, pos, False),
                               rtol=1e-2, atol=1e-2)
    # In place on a view that is part of an autograd graph: FlashAttention's qkv use.
    qkv = torch.randn(2, 5, 3, 2, 16, requires_grad=True)
    h = qkv * 1.0
    q = h[:, :, 0]
    tt.apply_rotary_emb(q, cos.float(), sin.float(), inplace=True)
    h.sum().backward()
    assert qkv.grad is not None and torch.isfinite(qkv.grad).all()
    assert not torch.equal(qkv.grad[:, :, 0], torch.ones_like(qkv.grad[:, :, 0]))


# ---- torch.compile and opcheck ----------------------------------------------------------------

BACKENDS = ["aot_eager"] + (["inductor"] if os.environ.get("TILEATTN_TEST_INDUCTOR") == "1"
                            or torch.cuda.is_available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_decode_loop_equals_eager(backend, device):
    torch._dynamo.reset()
    dtype = torch.float32 if device == "cpu" else torch.bfloat16  # CUDA caches are f16/bf16
    p = Problem([5, 0, 17], 1, 4, block_size=16, rotary_dim=16, nan=False, dtype=dtype)
    to = dict(device=device)
    table, cos, sin = p.block_table.to(**to), p.cos.to(**to), p.sin.to(**to)

    def step(q, k, v, k_cache, v_cache, cache_seqlens):
        out = tt.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos,
                                         rotary_sin=sin, cache_seqlens=cache_seqlens,
                                         block_table=table, causal=True)
        return out * 2.0

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    caches_eager = [p.k_before.clone().to(**to), p.v_before.clone().to(**to)]
    caches_compiled = [p.k_before.clone().to(**to), p.v_before.clone().to(**to)]
    seqlens = p.cache_seqlens.to(**to)
    g = torch.Generator().manual_seed(5)
    for _ in range(4):
        q = torch.randn(3, 1, 4, 32, generator=g).to(dtype=dtype, **to)
        k = torch.randn(3, 1, 2, 32, generator=g).to(dtype=dtype, **to)
        v = torch.randn(3, 1, 2, 24, generator=g).to(dtype=dtype, **to)
        eager = step(q, k, v, *caches_eager, seqlens)
        got = compiled(q, k, v, *caches_compiled, seqlens)
        assert torch.equal(got, eager)
        seqlens = seqlens + 1
    assert torch.equal(caches_compiled[0], caches_eager[0])
    assert torch.equal(caches_compiled[1], caches_eager[1])
    assert not torch.equal(caches_compiled[0], p.k_before.to(**to))  # written in place


def test_compiled_apply_rotary_emb():
    torch._dynamo.reset()
    cos, sin = rope_table(20, 8)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(x, y):
        a = tt.apply_rotary_emb(x, cos, sin, seqlen_offsets=2)
        tt.apply_rotary_emb(y, cos, sin, interleaved=True, inplace=True)
        return a.sum()

    x = torch.randn(2, 5, 2, 8, requires_grad=True)
    y = torch.randn(2, 5, 2, 8)
    y_ref = tt.apply_rotary_emb(y, cos, sin, interleaved=True)
    loss = f(x, y)
    loss.backward()
    assert torch.equal(y, y_ref)
    (dx,) = torch.autograd.grad(tt.apply_rotary_emb(x, cos, sin, seqlen_offsets=2).sum(), x)
    torch.testing.assert_close(x.grad, dx)


@pytest.mark.filterwarnings("ignore:.*script_method.*:DeprecationWarning")
def test_opcheck_kvcache_op():
    p = Problem([3, 6], 2, 2, block_size=4, rotary_dim=8, nan=False)
    args = (p.q, p.k_cache, p.v_cache, p.k, p.v, p.cos, p.sin, p.cache_seqlens,
            torch.tensor([1, 0], dtype=torch.int32), None, p.block_table, None, None, None, None,
            True, -1, -1, 0.0, True, 0, 0)
    opcheck(torch.ops.tileattn.attention_with_kvcache.default, args)
    v = Problem([3, 6], [1, 2], [2, 1], varlen=True, batch_idx=True, nan=False)
    args = (v.q, v.k_cache, v.v_cache, v.k, v.v, None, None, v.cache_seqlens, None,
            v.cache_batch_idx, None, v.slopes, v.cu_q, v.cu_new, 0.5, False, 3, 0, 2.0, False, 2,
            2)
    opcheck(torch.ops.tileattn.attention_with_kvcache.default, args)


@pytest.mark.filterwarnings("ignore:.*script_method.*:DeprecationWarning")
def test_opcheck_rotary_ops():
    cos, sin = rope_table(20, 8)
    x = torch.randn(2, 5, 2, 12, requires_grad=True)
    offs = torch.tensor([1, 4], dtype=torch.int32)
    opcheck(torch.ops.tileattn.apply_rotary.default, (x, cos, sin, offs, None, True))
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    opcheck(torch.ops.tileattn.apply_rotary_.default,
            (torch.randn(7, 2, 12), cos, sin, None, cu, False))


# ---- CUDA -------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", "paged16", "paged256"])
def test_cuda_flash_attn_with_kvcache_matches_reference(dtype, layout):
    p = Problem([3, 100, 0, 257], 1, 1, d=64, dv=64, rotary_dim=32, dtype=dtype,
                **LAYOUTS[layout])
    cuda = {name: (x.cuda() if isinstance(x, torch.Tensor) else x)
            for name, x in p.kwargs().items()}
    k_cache, v_cache = p.k_cache.cuda(), p.v_cache.cuda()
    out, lse = tt.flash_attn_with_kvcache(p.q.cuda(), k_cache, v_cache, causal=True,
                                          return_softmax_lse=True, **cuda)
    assert out.device.type == "cuda"
    want, want_lse, written = p.expected(causal=True)
    check_out(out.cpu(), lse.cpu(), want, want_lse, dtype)
    p.check_cache(k_cache.cpu(), v_cache.cpu(), written, rotated=True)


@needs_cuda
def test_cuda_varlen_and_apply_rotary_match_cpu():
    p = Problem([4, 0, 9, 30], [1, 3, 0, 5], [1, 3, 0, 2], varlen=True, rotary_dim=16,
                block_size=16, dtype=torch.bfloat16, d=64, dv=64)
    cpu_caches = (p.k_cache.clone(), p.v_cache.clone())
    gpu_caches = (p.k_cache.cuda(), p.v_cache.cuda())
    kw = p.kwargs()
    cpu = tileattn.attention_with_kvcache(p.q, *cpu_caches, causal=True, **kw)
    gpu = tileattn.attention_with_kvcache(
        p.q.cuda(), *gpu_caches, causal=True,
        **{n: x.cuda() if isinstance(x, torch.Tensor) else x for n, x in kw.items()})
    assert rel_l2(gpu.cpu(), cpu) < TOL[torch.bfloat16]
    for a, b in zip(gpu_caches, cpu_caches):
        assert torch.equal(bits(a.cpu()), bits(b))
    x = torch.randn(3, 20, 4, 64).bfloat16()
    cos, sin = rope_table(64, 32)
    offs = torch.tensor([0, 7, 40], dtype=torch.int32)
    want = tt.apply_rotary_emb(x, cos, sin, seqlen_offsets=offs)
    got = tt.apply_rotary_emb(x.cuda(), cos.cuda(), sin.cuda(), seqlen_offsets=offs.cuda())
    assert torch.equal(got.cpu(), want)


@needs_cuda
def test_cuda_decode_step_replays_from_a_cuda_graph():
    """A serving loop captures one decode step (append + attention) into a CUDA graph and
    replays it with the lengths advanced in place: each replay equals the same step run eagerly
    on a copy of the caches."""
    torch.manual_seed(3)
    dev = torch.device("cuda")
    batch, heads, heads_kv, dim, cap = 3, 8, 2, 64, 512
    k_cache = torch.randn(batch, cap, heads_kv, dim, device=dev, dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    seqlens = torch.tensor([5, 200, 31], dtype=torch.int32, device=dev)
    q = torch.empty(batch, 1, heads, dim, device=dev, dtype=torch.bfloat16)
    k_new = torch.empty(batch, 1, heads_kv, dim, device=dev, dtype=torch.bfloat16)
    v_new = torch.empty_like(k_new)
    eager_k, eager_v, eager_len = k_cache.clone(), v_cache.clone(), seqlens.clone()

    def step(kc, vc, lens):
        return tt.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lens,
                                          causal=True)

    step(k_cache.clone(), v_cache.clone(), seqlens)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(k_cache, v_cache, seqlens)
    for _ in range(3):
        q.normal_()
        k_new.normal_()
        v_new.normal_()
        graph.replay()
        want = step(eager_k, eager_v, eager_len)
        torch.cuda.synchronize()
        assert torch.equal(out, want)
        assert torch.equal(k_cache, eager_k) and torch.equal(v_cache, eager_v)
        seqlens += 1
        eager_len += 1
