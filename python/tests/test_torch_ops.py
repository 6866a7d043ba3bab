"""tileattn.torch.attention and the custom operators: outputs and gradients against the float64
reference for every option and dtype, opcheck, dropout, determinism, devices."""

import pytest
import torch
from torch.library import opcheck

import tileattn
import tileattn.torch as tt
from reference import TOL, attention as ref_attention, rel_l2

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 4e-2}

CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "causal-top-left": dict(causal=True, alignment="top-left"),
    "window": dict(window=(5, 3)),
    "bool-mask": dict(mask="bool"),
    "float-mask": dict(mask="float"),
    "key-lengths": dict(key_lengths=True),
    "softcap-scale": dict(softcap=3.0, scale=0.2),
    "alibi": dict(alibi=True),
    "everything": dict(causal=True, window=(6, -1), key_lengths=True, alibi=True, mask="bool",
                       softcap=5.0),
}


def make(case, B, Hq, Lq, Lk, device):
    kw, rk = {}, {}
    for name in ("causal", "window", "softcap", "scale"):
        if name in case:
            kw[name] = rk[name] = case[name]
    if "alignment" in case:
        kw["alignment"] = case["alignment"]
        rk["top_left"] = case["alignment"] == "top-left"
    if case.get("mask") == "bool":
        kw["mask"] = rk["mask"] = torch.rand(B, 1, Lq, Lk, device=device) > 0.25
    if case.get("mask") == "float":
        kw["mask"] = rk["mask"] = torch.randn(Lq, Lk, device=device)
    if case.get("key_lengths"):
        kw["key_lengths"] = rk["key_lengths"] = torch.randint(
            1, Lk + 1, (B,), dtype=torch.int32, device=device)
    if case.get("alibi"):
        kw["alibi_slopes"] = rk["alibi_slopes"] = torch.rand(Hq, device=device) * 0.5
    return kw, rk


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_outputs_and_gradients_match_reference(case, dtype, device):
    B, Hq, Hkv, Lq, Lk, D, Dv = 2, 6, 2, 37, 45, 40, 24  # GQA, Dv != D, odd lengths
    q = torch.randn(B, Lq, Hq, D, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(B, Lk, Hkv, D, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(B, Lk, Hkv, Dv, device=device, dtype=dtype, requires_grad=True)
    kw, rk = make(CASES[case], B, Hq, Lq, Lk, device)
    out, lse = tt.attention(q, k, v, return_lse=True, **kw)
    assert out.dtype == dtype and out.shape == (B, Lq, Hq, Dv) and lse.shape == (B, Hq, Lq)
    rout, rlse = ref_attention(q, k, v, **rk)
    assert rel_l2(out.detach(), rout.detach()) < TOL[dtype]
    fin = torch.isfinite(rlse)
    assert torch.allclose(lse[fin].double(), rlse[fin], atol=1e-3, rtol=1e-3)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.autograd.grad(rout, (q, k, v), dout.double())
    for g, w in zip(got, want):
        assert g.dtype == dtype
        assert rel_l2(g, w) < GRAD_TOL[dtype]


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1, 1), (3, 1, 1, 1, 200, 8), (1, 2, 2, 130, 3, 256),
                                   (2, 4, 1, 65, 65, 96), (1, 3, 3, 0, 5, 8), (1, 2, 1, 7, 0, 8)])
def test_awkward_shapes(shape, device):
    B, Hq, Hkv, Lq, Lk, D = shape
    q = torch.randn(B, Hq, Lq, D, device=device, requires_grad=True)
    k = torch.randn(B, Hkv, Lk, D, device=device, requires_grad=True)
    v = torch.randn(B, Hkv, Lk, D, device=device, requires_grad=True)
    out = tt.attention(q, k, v, layout="bhsd", causal=True)
    rout, _ = ref_attention(q, k, v, causal=True, bhsd=True)
    assert out.shape == rout.shape
    if rout.numel():
        assert rel_l2(out.detach(), rout.detach()) < TOL[torch.float32] or rout.norm() == 0
    if out.numel():
        dout = torch.randn_like(out)
        for g, w in zip(torch.autograd.grad(out, (q, k, v), dout),
                        torch.autograd.grad(rout, (q, k, v), dout.double(), allow_unused=True)):
            if w is None or w.norm() == 0:
                assert torch.all(g == 0)
            else:
                assert rel_l2(g, w) < 1e-4


def test_non_contiguous_views_are_read_in_place():
    base = torch.randn(2, 16, 3, 4, 32)  # a packed qkv
    q, k, v = base.unbind(2)  # strided BSHD views
    out = tt.attention(q, k, v)
    rout, _ = ref_attention(q, k, v)
    assert rel_l2(out, rout) < TOL[torch.float32]
    # A last dimension that is not contiguous is copied once (tileattn needs it contiguous).
    qt = torch.randn(2, 16, 4, 32).transpose(-1, -2).contiguous().transpose(-1, -2)
    assert rel_l2(tt.attention(qt, k, v), ref_attention(qt, k, v)[0]) < TOL[torch.float32]


def test_dropout_uses_the_library_mask_and_torch_seed():
    B, L, H, D, p = 2, 20, 2, 16, 0.2
    q, k, v = (torch.randn(B, L, H, D, requires_grad=True) for _ in range(3))
    torch.manual_seed(5)
    a = tt.attention(q, k, v, dropout_p=p)
    torch.manual_seed(5)
    b = tt.attention(q, k, v, dropout_p=p)
    c = tt.attention(q, k, v, dropout_p=p)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # The seed the op drew is PyTorch's first randint after manual_seed(5).
    torch.manual_seed(5)
    seed, offset = (x % 2**64 for x in torch.randint(-(1 << 63), (1 << 63) - 1, (2,)).tolist())
    keep = tileattn.dropout.keep_mask(B, H, L, L, p, seed, offset)
    rout, _ = ref_attention(q, k, v, dropout_p=p, keep=keep)
    assert rel_l2(a, rout) < TOL[torch.float32]
    dout = torch.randn_like(a)
    for g, w in zip(torch.autograd.grad(a, (q, k, v), dout),
                    torch.autograd.grad(rout, (q, k, v), dout.double())):
        assert rel_l2(g, w) < 1e-4


def test_deterministic_gradients_are_bitwise_identical():
    q, k, v = (torch.randn(1, 96, 2, 32, requires_grad=True) for _ in range(3))
    grads = []
    for _ in range(3):
        out = tt.attention(q, k, v, causal=True, deterministic=True)
        grads.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    for g in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], g))


def test_mask_requiring_grad_is_refused():
    q = torch.randn(1, 4, 1, 8, requires_grad=True)
    mask = torch.zeros(4, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="argument 'mask'"):
        tt.attention(q, q, q, mask=mask)


def test_library_errors_surface_as_tileattn_error():
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(tileattn.Error, match="argument 'k'"):
        tt.attention(q, torch.randn(1, 4, 3, 8), q)
    with pytest.raises(tileattn.Error, match="argument 'q'"):
        tt.attention(q.double(), q.double(), q.double())
    with pytest.raises(tileattn.Error, match="argument 'alignment'"):
        tt.attention(q, q, q, alignment="middle")


def op_args(q, k, v, mask=None, kl=None, slopes=None, causal=False, top_left=False,
            window=(-1, -1), scale=None, softcap=0.0, bhsd=False, deterministic=False):
    return (q, k, v, mask, kl, slopes, causal, top_left, window[0], window[1], scale, softcap,
            0.0, None, bhsd, deterministic)


@pytest.mark.parametrize("variant", ["plain", "causal-gqa", "masks", "bhsd-softcap"])
def test_opcheck(variant, device):
    def t(*shape):
        return torch.randn(*shape, device=device, requires_grad=True)
    if variant == "plain":
        args = op_args(t(1, 5, 2, 8), t(1, 7, 2, 8), t(1, 7, 2, 8))
    elif variant == "causal-gqa":
        args = op_args(t(2, 9, 4, 16), t(2, 9, 2, 16), t(2, 9, 2, 8), causal=True)
    elif variant == "masks":
        args = op_args(t(2, 6, 2, 8), t(2, 6, 2, 8), t(2, 6, 2, 8),
                       mask=torch.rand(2, 1, 6, 6, device=device) > 0.3,
                       kl=torch.tensor([6, 3], dtype=torch.int32, device=device),
                       slopes=torch.rand(2, device=device), window=(3, 1))
    else:
        args = op_args(t(1, 2, 5, 8), t(1, 2, 5, 8), t(1, 2, 5, 8), bhsd=True, softcap=2.0,
                       scale=0.5, top_left=True, causal=True)
    opcheck(torch.ops.tileattn.attention_forward.default, args)
    q, k, v = args[:3]
    out, lse = torch.ops.tileattn.attention_forward(*args)
    bargs = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(),
             lse.detach()) + args[3:13] + (None, args[14], False)
    opcheck(torch.ops.tileattn.attention_backward.default, bargs)
