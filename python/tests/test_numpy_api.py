"""tileattn.attention / attention_backward on numpy arrays (zero-copy DLPack views) against the
float64 reference; errors name the argument."""

import numpy as np
import pytest
import torch

import tileattn
from reference import TOL, attention as ref_attention, philox_keep, rel_l2

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def ref(q, k, v, **kw):
    out, lse = ref_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), **kw)
    return out.numpy(), lse.numpy()


OPTIONS = [
    dict(),
    dict(causal=True),
    dict(causal=True, alignment="top-left"),
    dict(window=(3, 2)),
    dict(window=(4, 0), alignment="top-left"),
    dict(scale=0.3, softcap=2.0),
    dict(alibi=True),
    dict(key_lengths=True),
    dict(bool_mask=True),
    dict(float_mask=True),
    dict(causal=True, key_lengths=True, alibi=True),
]


def materialise(opts, B, Hq, Lq, Lk):
    """Python options -> (tileattn kwargs, reference kwargs)."""
    kw, rk = {}, {}
    if opts.get("causal"):
        kw["causal"] = rk["causal"] = True
    if "alignment" in opts:
        kw["alignment"] = opts["alignment"]
        rk["top_left"] = opts["alignment"] == "top-left"
    if "window" in opts:
        kw["window"] = rk["window"] = opts["window"]
    for name in ("scale", "softcap"):
        if name in opts:
            kw[name] = rk[name] = opts[name]
    if opts.get("alibi"):
        slopes = rng.uniform(0.05, 0.5, Hq).astype(np.float32)
        kw["alibi_slopes"], rk["alibi_slopes"] = slopes, torch.from_numpy(slopes)
    if opts.get("key_lengths"):
        lens = rng.integers(0, Lk + 1, B).astype(np.int32)
        kw["key_lengths"], rk["key_lengths"] = lens, torch.from_numpy(lens)
    if opts.get("bool_mask"):
        m = rng.random((B, 1, Lq, Lk)) > 0.3
        kw["mask"], rk["mask"] = m, torch.from_numpy(m)
    if opts.get("float_mask"):
        m = randn(Hq, Lq, Lk)
        m[..., 0] = -np.inf
        kw["mask"], rk["mask"] = m, torch.from_numpy(m)
    return kw, rk


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_forward_and_backward_match_reference(opts, layout):
    B, Hq, Hkv, Lq, Lk, D, Dv = 2, 4, 2, 13, 19, 24, 16
    shape = (lambda L, H, d: (B, L, H, d)) if layout == "bshd" else (lambda L, H, d: (B, H, L, d))
    q, k, v = randn(*shape(Lq, Hq, D)), randn(*shape(Lk, Hkv, D)), randn(*shape(Lk, Hkv, Dv))
    kw, rk = materialise(opts, B, Hq, Lq, Lk)
    out, lse = tileattn.attention(q, k, v, layout=layout, return_lse=True, **kw)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == \
        shape(Lq, Hq, Dv)
    assert lse.shape == (B, Hq, Lq) and lse.dtype == np.float32
    tq, tk, tv = (torch.from_numpy(x).double().requires_grad_() for x in (q, k, v))
    rout, rlse = ref_attention(tq, tk, tv, bhsd=layout == "bhsd", **rk)
    assert rel_l2(out, rout.detach()) < TOL[torch.float32]
    finite = np.isfinite(rlse.detach().numpy())
    np.testing.assert_allclose(lse[finite], rlse.detach().numpy()[finite], rtol=1e-5, atol=1e-5)
    assert np.all(lse[~finite] == -np.inf)

    dout = randn(*out.shape)
    dq, dk, dv = tileattn.attention_backward(dout, q, k, v, out, lse, layout=layout, **kw)
    rdq, rdk, rdv = torch.autograd.grad(rout, (tq, tk, tv), torch.from_numpy(dout).double())
    for got, want in ((dq, rdq), (dk, rdk), (dv, rdv)):
        assert got.shape == want.shape
        if want.norm() > 0:
            assert rel_l2(got, want) < 1e-4
        else:
            assert np.all(got == 0)


def test_float16_inputs():
    q, k, v = (randn(1, 9, 2, 32, dtype=np.float16) for _ in range(3))
    out = tileattn.attention(q, k, v, causal=True)
    assert out.dtype == np.float16
    rout, _ = ref(q, k, v, causal=True)
    assert rel_l2(out, rout) < TOL[torch.float16]


def test_out_is_written_in_place_and_inputs_are_views():
    q, k, v = randn(1, 8, 2, 16), randn(1, 8, 2, 16), randn(1, 8, 2, 16)
    out = np.full((1, 8, 2, 16), np.nan, dtype=np.float32)
    assert tileattn.attention(q, k, v, out=out) is out
    assert rel_l2(out, ref(q, k, v)[0]) < TOL[torch.float32]
    # Strided views (every other head, a BHSD slice) are read without copies.
    big = randn(1, 8, 4, 16)
    view = big[:, :, ::2]
    out2 = tileattn.attention(view, view, view)
    assert rel_l2(out2, ref(np.ascontiguousarray(view), np.ascontiguousarray(view),
                            np.ascontiguousarray(view))[0]) < TOL[torch.float32]


def test_read_only_inputs_are_accepted_but_a_read_only_output_is_refused():
    q = randn(1, 4, 1, 8)
    q.setflags(write=False)
    out = tileattn.attention(q, q, q)
    assert np.all(np.isfinite(out))
    out.setflags(write=False)
    with pytest.raises(tileattn.Error, match="argument 'out'"):
        tileattn.attention(q, q, q, out=out)


def test_output_dtype_may_differ_from_input():
    q = randn(1, 5, 2, 8, dtype=np.float16)
    out = np.empty((1, 5, 2, 8), dtype=np.float32)
    tileattn.attention(q, q, q, out=out)
    assert rel_l2(out, ref(q, q, q)[0]) < 1e-3


def test_fully_masked_rows_give_zero_and_minus_inf_lse():
    q, k, v = randn(1, 6, 1, 8), randn(1, 3, 1, 8), randn(1, 3, 1, 8)
    out, lse = tileattn.attention(q, k, v, causal=True, return_lse=True)  # bottom-right, Lq > Lk
    assert np.all(out[:, :3] == 0) and np.all(lse[0, 0, :3] == -np.inf)
    assert np.all(np.isfinite(out[:, 3:]))


def extract_keep_mask(B, Hq, Lq, Lk, p, seed, offset, backend="cpu"):
    """The library's own dropout decisions: uniform probabilities (scale 0) over an identity V
    make out[b, i, h, j] = keep(b, h, i, j) / ((1 - p) Lk)."""
    q = np.zeros((B, Lq, Hq, 8), dtype=np.float32)
    k = np.zeros((B, Lk, 1, 8), dtype=np.float32)
    v = np.broadcast_to(np.eye(Lk, dtype=np.float32)[None, :, None, :], (B, Lk, 1, Lk))
    out = tileattn.attention(q, k, np.ascontiguousarray(v), scale=0.0, dropout_p=p, seed=seed,
                             offset=offset, backend=backend)
    return np.transpose(out, (0, 2, 1, 3)) > 0


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_dropout_keep_mask_is_the_documented_philox_mapping(backend):
    B, Hq, Lq, Lk, p = 2, 3, 5, 11, 0.3
    seed, offset = 0x123456789ABCDEF0, 2**64 - 3  # the stream wraps past 2^64
    got = extract_keep_mask(B, Hq, Lq, Lk, p, seed, offset, backend)
    assert np.array_equal(got, philox_keep(B, Hq, Lq, Lk, p, seed, offset))
    assert np.array_equal(got, tileattn.dropout.keep_mask(B, Hq, Lq, Lk, p, seed, offset))


def test_dropout_forward_and_backward_match_reference_with_the_same_mask():
    B, H, L, D, p, seed = 1, 2, 12, 16, 0.25, 7
    q, k, v = (randn(B, L, H, D) for _ in range(3))
    out, lse = tileattn.attention(q, k, v, dropout_p=p, seed=seed, return_lse=True)
    keep = tileattn.dropout.keep_mask(B, H, L, L, p, seed)
    tq, tk, tv = (torch.from_numpy(x).double().requires_grad_() for x in (q, k, v))
    rout, _ = ref_attention(tq, tk, tv, dropout_p=p, keep=keep)
    assert rel_l2(out, rout.detach()) < 1e-5
    dout = randn(*out.shape)
    got = tileattn.attention_backward(dout, q, k, v, out, lse, dropout_p=p, seed=seed)
    want = torch.autograd.grad(rout, (tq, tk, tv), torch.from_numpy(dout).double())
    for g, w in zip(got, want):
        assert rel_l2(g, w) < 1e-4


def test_deterministic_backward_is_bitwise_reproducible():
    q, k, v = (randn(1, 64, 2, 32) for _ in range(3))
    out, lse = tileattn.attention(q, k, v, return_lse=True)
    dout = randn(*out.shape)
    runs = [tileattn.attention_backward(dout, q, k, v, out, lse, deterministic=True, threads=t)
            for t in (1, 2, 1)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("isa", ["portable", "avx2", "best"])
def test_cpu_isa_cap_and_reference_backend_agree(isa):
    q, k, v = (randn(1, 10, 2, 16) for _ in range(3))
    want = tileattn.attention(q, k, v, backend="reference")
    assert rel_l2(tileattn.attention(q, k, v, cpu_isa=isa, threads=1), want) < 1e-5


ERRORS = [
    (lambda q: dict(k=q[..., :4]), "argument 'k'"),
    (lambda q: dict(q=q.astype(np.float64)), "argument 'q': dtype float64"),
    (lambda q: dict(q=[[1.0]]), "argument 'q': expected an array"),
    (lambda q: dict(q=q[0]), "argument 'q'"),
    (lambda q: dict(alignment="diagonal"), "argument 'alignment'"),
    (lambda q: dict(layout="sbhd"), "argument 'layout'"),
    (lambda q: dict(window=5), "argument 'window'"),
    (lambda q: dict(window=(-2, 0)), "argument 'window_left'"),
    (lambda q: dict(scale=float("inf")), "argument 'scale'"),
    (lambda q: dict(softcap=-1.0), "argument 'softcap'"),
    (lambda q: dict(dropout_p=1.0), "argument 'dropout_p'"),
    (lambda q: dict(seed=-1), "argument 'seed'"),
    (lambda q: dict(offset=2**64), "argument 'offset'"),
    (lambda q: dict(mask=np.ones((4, 4), dtype=np.int8)), "argument 'mask'"),
    (lambda q: dict(mask=np.ones((3, 5), dtype=bool)), "argument 'mask'"),
    (lambda q: dict(key_lengths=np.array([9], dtype=np.int32)), "argument 'key_lengths'"),
    (lambda q: dict(key_lengths=np.array([1.0], dtype=np.float32)), "argument 'key_lengths'"),
    (lambda q: dict(alibi_slopes=np.ones(3, dtype=np.float32)), "argument 'alibi_slopes'"),
    (lambda q: dict(out=np.empty((1, 4, 2, 9), dtype=np.float32)), "argument 'out'"),
    (lambda q: dict(out=q), "argument 'out'"),  # overlaps an input
    (lambda q: dict(backend="gpu"), "argument 'backend'"),
    (lambda q: dict(cpu_isa="sse"), "argument 'cpu_isa'"),
    (lambda q: dict(threads=100000), "threads"),
    (lambda q: dict(backend="cuda"), "argument 'ctx.backend'"),
]


@pytest.mark.parametrize("make,message", ERRORS)
def test_errors_name_the_argument_and_write_nothing(make, message):
    q = randn(1, 4, 2, 8)
    args = dict(q=q, k=q.copy(), v=q.copy())
    args.update(make(q))
    out = args.pop("out", np.full((1, 4, 2, 8), 7.0, dtype=np.float32))
    if message == "argument 'ctx.backend'" and tileattn.build_info()["cuda"]:
        message = "argument"
    with pytest.raises(tileattn.Error, match=message):
        tileattn.attention(args.pop("q"), args.pop("k"), args.pop("v"), out=out, **args)
    if out.shape == (1, 4, 2, 8) and out is not q:
        assert np.all(out == 7.0)


def test_backward_requires_lse():
    q = randn(1, 4, 2, 8)
    out = tileattn.attention(q, q, q)
    with pytest.raises(tileattn.Error, match="argument 'lse'"):
        tileattn.attention_backward(q, q, q, q, out, None)
