"""flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func: FlashAttention's
arguments, layouts and return conventions, against the float64 reference."""

import inspect

import pytest
import torch

import tileattn
import tileattn.torch as tt
from reference import TOL, attention as ref_attention, rel_l2

GRAD_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 4e-2}

FA_PARAMS = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
             "deterministic", "return_attn_probs"]
FA_DEFAULTS = [0.0, None, False, (-1, -1), 0.0, None, False, False]


@pytest.mark.parametrize("fn,lead", [(tt.flash_attn_func, ["q", "k", "v"]),
                                     (tt.flash_attn_kvpacked_func, ["q", "kv"]),
                                     (tt.flash_attn_qkvpacked_func, ["qkv"])])
def test_signatures_match_flash_attention(fn, lead):
    params = inspect.signature(fn).parameters
    assert list(params) == lead + FA_PARAMS
    assert [params[n].default for n in FA_PARAMS] == FA_DEFAULTS


def check(out, rout, inputs, dtype):
    assert rel_l2(out.detach(), rout.detach()) < TOL[dtype]
    dout = torch.randn_like(out)
    for g, w in zip(torch.autograd.grad(out, inputs, dout),
                    torch.autograd.grad(rout, inputs, dout.double())):
        assert rel_l2(g, w) < GRAD_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(window_size=(4, 2)),
                                  dict(causal=True, window_size=(8, -1)),
                                  dict(softcap=4.0, softmax_scale=0.3), dict(alibi=True),
                                  dict(alibi=True, causal=True)],
                         ids=["plain", "causal", "window", "causal-window", "softcap", "alibi",
                              "alibi-causal"])
@pytest.mark.parametrize("lq,lk", [(31, 47), (47, 31)])  # bottom-right with Lq > Lk too
def test_flash_attn_func(dtype, opts, lq, lk, device):
    B, Hq, Hkv, D = 2, 4, 2, 64
    q = torch.randn(B, lq, Hq, D, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(B, lk, Hkv, D, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(B, lk, Hkv, D, device=device, dtype=dtype, requires_grad=True)
    kw, rk = dict(opts), {}
    if kw.pop("alibi", False):
        kw["alibi_slopes"] = rk["alibi_slopes"] = torch.rand(B, Hq, device=device) * 0.3
    rk["causal"] = kw.get("causal", False)
    rk["window"] = kw.get("window_size", (-1, -1))
    rk["softcap"] = kw.get("softcap", 0.0)
    rk["scale"] = kw.get("softmax_scale")
    out = tt.flash_attn_func(q, k, v, **kw)
    assert out.shape == (B, lq, Hq, D) and out.dtype == dtype
    rout, _ = ref_attention(q, k, v, **rk)
    check(out, rout, (q, k, v), dtype)


def test_packed_variants(device):
    B, L, H, D = 2, 19, 3, 32
    qkv = torch.randn(B, L, 3, H, D, device=device, requires_grad=True)
    out = tt.flash_attn_qkvpacked_func(qkv, causal=True)
    rout, _ = ref_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    check(out, rout, (qkv,), torch.float32)
    q = torch.randn(B, 7, 6, D, device=device, requires_grad=True)
    kv = torch.randn(B, L, 2, H, D, device=device, requires_grad=True)
    out = tt.flash_attn_kvpacked_func(q, kv, causal=True)
    rout, _ = ref_attention(q, kv[:, :, 0], kv[:, :, 1], causal=True)
    check(out, rout, (q, kv), torch.float32)


def test_return_attn_probs_conventions(device):
    q, k, v = (torch.randn(1, 9, 2, 16, device=device) for _ in range(3))
    out, lse, s = tt.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert lse.shape == (1, 2, 9) and lse.dtype == torch.float32 and s.numel() == 0
    rout, rlse = ref_attention(q, k, v, causal=True)
    assert torch.allclose(lse.double(), rlse, atol=1e-5)


def test_dropout_mask_in_s_dmask_is_the_one_applied(device):
    B, L, H, D, p = 2, 24, 2, 16, 0.3
    q, k, v = (torch.randn(B, L, H, D, device=device, requires_grad=True) for _ in range(3))
    out, lse, s_dmask = tt.flash_attn_func(q, k, v, p, causal=True, return_attn_probs=True)
    assert s_dmask.shape == (B, H, L, L)
    keep = (s_dmask >= 0).cpu().numpy()
    visible = torch.ones(L, L, dtype=torch.bool).tril().numpy()
    dropped = (~keep)[..., visible].mean()
    assert 0.2 < dropped < 0.4
    rout, _ = ref_attention(q, k, v, causal=True, dropout_p=p, keep=keep)
    check(out, rout, (q, k, v), torch.float32)
    # The probabilities themselves (magnitudes) are softmax's.
    probs = torch.softmax((q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / 4.0
                          + torch.full((L, L), float("-inf"), device=device).triu(1), -1)
    assert torch.allclose(s_dmask.abs(), probs.detach(), atol=1e-6)


def test_deterministic_flag_gives_bitwise_identical_gradients():
    q, k, v = (torch.randn(1, 80, 2, 32, requires_grad=True) for _ in range(3))
    runs = []
    for _ in range(3):
        out = tt.flash_attn_func(q, k, v, causal=True, deterministic=True)
        runs.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    assert all(torch.equal(a, b) for r in runs[1:] for a, b in zip(runs[0], r))


def test_unsupported_arguments_raise():
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(tileattn.Error, match="argument 'window_left'"):
        tt.flash_attn_func(q, q, q, window_size=(-3, 0))
    with pytest.raises(ValueError, match="window_size"):
        tt.flash_attn_func(q, q, q, window_size=5)
    with pytest.raises(tileattn.Error, match="argument 'q'"):  # head dim beyond 256
        big = torch.randn(1, 4, 1, 512)
        tt.flash_attn_func(big, big, big)
    with pytest.raises(ValueError, match="qkv"):
        tt.flash_attn_qkvpacked_func(torch.randn(1, 4, 2, 2, 8))
