"""tileattn.torch.scaled_dot_product_attention against torch.nn.functional's."""

import pytest
import torch
import torch.nn.functional as F

import tileattn.torch as tt
from reference import TOL, rel_l2

GRAD_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 4e-2}


def compare(query, key, value, dtype, **kw):
    q, k, v = (x.to(dtype).requires_grad_() for x in (query, key, value))
    out = tt.scaled_dot_product_attention(q, k, v, **kw)
    # PyTorch's own result in float64 is the reference (its f16/bf16 CPU math is not exact).
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    kw64 = dict(kw)
    if kw.get("attn_mask") is not None and kw["attn_mask"].is_floating_point():
        kw64["attn_mask"] = kw["attn_mask"].double()
    ref = F.scaled_dot_product_attention(q64, k64, v64, **kw64)
    assert out.shape == ref.shape and out.dtype == dtype
    assert rel_l2(out.detach(), ref.detach()) < TOL[dtype]
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert rel_l2(g, w) < GRAD_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_torch(dtype, is_causal, device):
    q = torch.randn(2, 3, 17, 32, device=device)
    k = torch.randn(2, 3, 23, 32, device=device)
    v = torch.randn(2, 3, 23, 16, device=device)
    compare(q, k, v, dtype, is_causal=is_causal)


@pytest.mark.parametrize("mask_shape", [(17, 23), (1, 17, 23), (2, 1, 17, 23), (2, 3, 17, 23),
                                        (2, 3, 1, 23)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast_like_torch(mask_shape, kind, device):
    q = torch.randn(2, 3, 17, 32, device=device)
    k = torch.randn(2, 3, 23, 32, device=device)
    v = torch.randn(2, 3, 23, 32, device=device)
    if kind == "bool":
        mask = torch.rand(mask_shape, device=device) > 0.3
    else:
        mask = torch.randn(mask_shape, device=device)
    compare(q, k, v, torch.float32, attn_mask=mask)


def test_half_float_mask_and_scale(device):
    q, k, v = (torch.randn(1, 2, 9, 16, device=device) for _ in range(3))
    mask = torch.randn(9, 9, device=device).half()
    out = tt.scaled_dot_product_attention(q.half(), k.half(), v.half(), attn_mask=mask,
                                          scale=0.7)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                         attn_mask=mask.double(), scale=0.7)
    assert rel_l2(out, ref) < TOL[torch.float16]


def test_gqa(device):
    q = torch.randn(2, 8, 11, 16, device=device)
    k = torch.randn(2, 2, 11, 16, device=device)
    v = torch.randn(2, 2, 11, 16, device=device)
    compare(q, k, v, torch.float32, enable_gqa=True, is_causal=True)
    with pytest.raises(RuntimeError, match="enable_gqa"):
        tt.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("shape", [(5, 8), (3, 5, 8), (2, 2, 3, 5, 8)])
def test_other_ranks(shape, device):
    q, k, v = (torch.randn(shape, device=device) for _ in range(3))
    compare(q, k, v, torch.float32)
    mask = torch.rand(shape[:-1] + (shape[-2],), device=device) > 0.2
    compare(q, k, v, torch.float32, attn_mask=mask)


def test_fully_masked_rows_are_zero_like_torch_cpu():
    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    out = tt.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(out[:, :, 2] == 0)
    assert torch.allclose(out, ref, atol=1e-6)
    (gq,) = torch.autograd.grad(out.sum(), q)
    assert torch.all(gq[:, :, 2] == 0)


def test_causal_with_mask_is_refused_like_torch():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(RuntimeError, match="attn_mask"):
        tt.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool),
                                        is_causal=True)


def test_dropout_keeps_expected_fraction_and_scales():
    q = torch.zeros(1, 4, 64, 8)
    k = torch.zeros(1, 4, 64, 8)
    v = torch.ones(1, 4, 64, 8)
    out = tt.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
    # Uniform probabilities: each row's output is (kept keys / 64) / 0.75.
    kept = out[..., 0] * 0.75 * 64
    assert torch.allclose(kept, kept.round(), atol=1e-3)
    assert abs(kept.mean().item() / 64 - 0.75) < 0.03


def test_signature_matches_torch():
    import inspect
    ours = inspect.signature(tt.scaled_dot_product_attention).parameters
    assert list(ours) == ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                          "enable_gqa"]
    assert [p.default for p in ours.values()][3:] == [None, 0.0, False, None, False]


@pytest.mark.parametrize("dim_v", [16, 24], ids=["dv_eq_d", "dv_ne_d"])
def test_output_and_gradients_keep_the_inputs_memory_order(dim_v):
    # A BHSD view of BSHD memory (what a model with (B, L, H, D) projections passes): out and
    # the gradients come back in BSHD memory too, as PyTorch's flash SDPA lays out its output,
    # so that torch.compile needs no copy to match a tangent's or a primal's strides.
    q, k = (torch.randn(2, 7, 3, 16).transpose(1, 2).requires_grad_() for _ in range(2))
    v = torch.randn(2, 7, 3, dim_v).transpose(1, 2).requires_grad_()
    out = tt.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.shape == (2, 3, 7, dim_v)
    assert out.transpose(1, 2).is_contiguous()
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    for g, x in zip((dq, dk, dv), (q, k, v)):
        assert g.stride() == x.stride()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert rel_l2(out.detach(), ref.detach()) < TOL[torch.float32]
