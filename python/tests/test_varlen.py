"""Packed variable-length batches (cu_seqlens) through tileattn.attention / attention_backward
and tileattn.merge_attention_states, on numpy arrays, against the float64 reference run on each
sequence alone; errors name the argument."""

import numpy as np
import pytest
import torch

import tileattn
from reference import attention as ref_attention, rel_l2

rng = np.random.default_rng(1)


def ragged(lens_q, lens_k, hq=4, hkv=2, d=24):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], hq, d)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], hkv, d)).astype(np.float32)
    return cu_q, cu_k, q, k, v


def per_sequence_reference(cu_q, cu_k, q, k, v, **kw):
    """out [total_q, Hq, D] and lse [Hq, total_q] from the reference on each sequence."""
    hq = q.shape[1]
    out = np.zeros((q.shape[0], hq, v.shape[2]))
    lse = np.zeros((hq, q.shape[0]))
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if q1 == q0:
            continue
        extra = {}
        if "key_lengths" in kw:
            extra["key_lengths"] = torch.tensor([kw["key_lengths"][b]])
        o, l = ref_attention(*(torch.from_numpy(x[None]) for x in (q[q0:q1], k[k0:k1], v[k0:k1])),
                             causal=kw.get("causal", False), window=kw.get("window", (-1, -1)),
                             **extra)
        out[q0:q1], lse[:, q0:q1] = o[0].numpy(), l[0].numpy()
    return out, lse


@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(window=(5, 1)),
                                  dict(causal=True, key_lengths=True)])
def test_varlen_matches_reference_per_sequence(opts):
    lens_q, lens_k = [13, 0, 1, 70, 33], [13, 4, 1, 90, 33]
    cu_q, cu_k, q, k, v = ragged(lens_q, lens_k)
    kw = dict(opts)
    k_ref, v_ref = k.copy(), v.copy()  # the test's reference multiplies masked V by 0
    if kw.pop("key_lengths", False):
        kw["key_lengths"] = np.array([rng.integers(0, n + 1) for n in lens_k], dtype=np.int32)
        for b, used in enumerate(kw["key_lengths"]):  # unused keys hold NaN: must not leak
            k[cu_k[b] + used:cu_k[b + 1]] = np.nan
            v[cu_k[b] + used:cu_k[b + 1]] = np.nan
    out, lse = tileattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                                  **kw)
    assert out.shape == (cu_q[-1], 4, 24) and lse.shape == (4, cu_q[-1])
    want, want_lse = per_sequence_reference(cu_q, cu_k, q, k_ref, v_ref, **kw)
    assert rel_l2(out, want) < 1e-5
    finite = np.isfinite(want_lse)
    assert np.array_equal(finite, np.isfinite(lse))
    assert np.allclose(lse[finite], want_lse[finite], atol=1e-5)


def test_varlen_backward_matches_sequences_alone():
    lens = [17, 1, 40]
    cu, _, q, k, v = ragged(lens, lens)
    dout = rng.standard_normal((cu[-1], 4, 24)).astype(np.float32)
    out, lse = tileattn.attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                  return_lse=True)
    dq, dk, dv = tileattn.attention_backward(dout, q, k, v, out, lse, causal=True,
                                             cu_seqlens_q=cu, cu_seqlens_k=cu, deterministic=True)
    for b in range(len(lens)):
        s = slice(cu[b], cu[b + 1])
        o, l = tileattn.attention(q[None, s], k[None, s], v[None, s], causal=True,
                                  return_lse=True)
        g = tileattn.attention_backward(dout[None, s], q[None, s], k[None, s], v[None, s], o, l,
                                        causal=True, deterministic=True)
        for got, want in zip((dq[s], dk[s], dv[s]), g):
            np.testing.assert_array_equal(got, want[0])


def test_varlen_errors_name_the_argument():
    cu_q, cu_k, q, k, v = ragged([3, 4], [4, 5])
    with pytest.raises(tileattn.Error, match="'cu_seqlens_q'.*non-decreasing"):
        tileattn.attention(q, k, v, cu_seqlens_q=np.array([0, 4, 3], np.int32),
                           cu_seqlens_k=cu_k, max_seqlen_q=4)
    with pytest.raises(tileattn.Error, match="'max_seqlen_k'"):
        tileattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_k=2)
    with pytest.raises(tileattn.Error, match="'cu_seqlens_k'.*ends at"):
        tileattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=np.array([0, 4, 8], np.int32))
    with pytest.raises(tileattn.Error, match="'mask'"):
        tileattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                           mask=np.ones((7, 9), bool))
    with pytest.raises(tileattn.Error, match="'layout'"):
        tileattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, layout="bhsd")


@pytest.mark.parametrize("parts", [2, 3])
def test_merge_of_split_keys_equals_one_call(parts):
    q = rng.standard_normal((2, 9, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 50, 2, 16)).astype(np.float32)
    v = rng.standard_normal((2, 50, 2, 16)).astype(np.float32)
    whole, whole_lse = tileattn.attention(q, k, v, return_lse=True)
    cuts = [0] + sorted(rng.choice(np.arange(1, 50), parts - 1, replace=False).tolist()) + [50]
    pieces = [tileattn.attention(q, k[:, a:b], v[:, a:b], return_lse=True)
              for a, b in zip(cuts, cuts[1:])]
    out, lse = tileattn.merge_attention_states([p[0] for p in pieces], [p[1] for p in pieces])
    assert rel_l2(out, whole) < 2e-6
    np.testing.assert_allclose(lse, whole_lse, atol=2e-6)


def test_merge_skips_parts_that_saw_no_key():
    a = np.ones((1, 2, 1, 4), np.float32)
    b = np.full((1, 2, 1, 4), np.nan, np.float32)
    la = np.zeros((1, 1, 2), np.float32)
    lb = np.full((1, 1, 2), -np.inf, np.float32)
    out, lse = tileattn.merge_attention_states([a, b], [la, lb])
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(lse, la)
    with pytest.raises(tileattn.Error, match="'outs\\[1\\]'"):
        tileattn.merge_attention_states([a, np.ones((1, 2, 1, 5), np.float32)], [la, lb])
