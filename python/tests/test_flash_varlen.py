"""flash_attn_varlen_func and its packed forms: FlashAttention's signatures, outputs and
gradients against the float64 reference on each sequence, opcheck and torch.compile of the op
with varlen arguments; on CUDA outputs and gradients against the same reference."""

import inspect

import pytest
import torch
from torch.library import opcheck

import tileattn
import tileattn.torch as tt
from reference import TOL, attention as ref_attention, rel_l2

GRAD_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 4e-2}
FA_TAIL = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
           "deterministic", "return_attn_probs"]


@pytest.mark.parametrize("fn,lead,tail", [
    (tt.flash_attn_varlen_func, ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                 "max_seqlen_k"], ["block_table"]),
    (tt.flash_attn_varlen_kvpacked_func, ["q", "kv", "cu_seqlens_q", "cu_seqlens_k",
                                          "max_seqlen_q", "max_seqlen_k"], []),
    (tt.flash_attn_varlen_qkvpacked_func, ["qkv", "cu_seqlens", "max_seqlen"], [])])
def test_signatures_match_flash_attention(fn, lead, tail):
    assert list(inspect.signature(fn).parameters) == lead + FA_TAIL + tail


def packed(lens_q, lens_k, hq, hkv, d, dtype, device="cpu"):
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), hq, d, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(int(cu_k[-1]), hkv, d, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(int(cu_k[-1]), hkv, d, dtype=dtype, device=device, requires_grad=True)
    return cu_q.to(device), cu_k.to(device), q, k, v


def reference(q, k, v, cu_q, cu_k, **kw):
    """Per-sequence float64 reference, concatenated: out [total_q, H, D]."""
    outs = []
    for b in range(len(cu_q) - 1):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        o, _ = ref_attention(q[None, sq], k[None, sk], v[None, sk], **kw)
        outs.append(o[0])
    return torch.cat(outs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(window_size=(6, 0))],
                         ids=["plain", "causal", "window"])
def test_varlen_matches_reference(dtype, opts):
    lens_q, lens_k = [9, 1, 40, 23], [30, 5, 40, 23]
    cu_q, cu_k, q, k, v = packed(lens_q, lens_k, 4, 2, 32, dtype)
    out = tt.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **opts)
    assert out.shape == q.shape and out.dtype == dtype
    rout = reference(q, k, v, cu_q.tolist(), cu_k.tolist(), causal=opts.get("causal", False),
                     window=opts.get("window_size", (-1, -1)))
    assert rel_l2(out.detach(), rout.detach()) < TOL[dtype]
    dout = torch.randn_like(out)
    for g, w in zip(torch.autograd.grad(out, (q, k, v), dout),
                    torch.autograd.grad(rout, (q, k, v), dout.double())):
        assert rel_l2(g, w) < GRAD_TOL[dtype]


def test_packed_forms_and_lse_layout():
    lens = [7, 12]
    cu, _, q, k, v = packed(lens, lens, 2, 2, 16, torch.float32)
    qkv = torch.stack([q.detach(), k.detach(), v.detach()], dim=1)
    out_a, lse, s = tt.flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, causal=True,
                                              return_attn_probs=True)
    assert lse.shape == (2, 19) and s.numel() == 0
    out_b = tt.flash_attn_varlen_qkvpacked_func(qkv, cu, 12, causal=True)
    out_c = tt.flash_attn_varlen_kvpacked_func(q, qkv[:, 1:], cu, cu, 12, 12, causal=True)
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)
    torch.testing.assert_close(out_a, out_c, rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="block_table"):
        tt.flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, block_table=cu)


@pytest.mark.filterwarnings("ignore:.*script_method.*:DeprecationWarning")
def test_opcheck_and_compile_with_varlen_arguments():
    cu_q, cu_k, q, k, v = packed([3, 5], [4, 6], 2, 1, 8, torch.float32)
    args = (q, k, v, None, None, None, True, False, -1, -1, None, 0.0, 0.0, None, False, False,
            cu_q, cu_k, 5, 6)
    opcheck(torch.ops.tileattn.attention_forward.default, args)

    @torch.compile(fullgraph=True)
    def step(q, k, v):
        return tt.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 6, causal=True).sum()

    loss = step(q, k, v)
    loss.backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.skipif(not (torch.cuda.is_available() and tileattn.build_info()["cuda"]),
                    reason="needs the CUDA backend and a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_cuda_varlen_matches_reference(dtype, causal):
    lens_q, lens_k = [3, 130, 1, 64], [90, 130, 7, 64]
    cu_q, cu_k, q, k, v = packed(lens_q, lens_k, 4, 2, 64, dtype, "cuda")
    out = tt.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
    qc, kc, vc = (t.detach().cpu().requires_grad_() for t in (q, k, v))
    rout = reference(qc, kc, vc, cu_q.tolist(), cu_k.tolist(), causal=causal)
    assert rel_l2(out.detach().cpu(), rout.detach()) < TOL[dtype]
    dout = torch.randn_like(out)
    for g, w in zip(torch.autograd.grad(out, (q, k, v), dout),
                    torch.autograd.grad(rout, (qc, kc, vc), dout.cpu().double())):
        assert rel_l2(g.cpu(), w) < GRAD_TOL[dtype]
