"""tileattn.torch.MultiheadAttention against torch.nn.MultiheadAttention with the same weights."""

import pytest
import torch
from torch import nn

import tileattn
import tileattn.torch as tt
from reference import rel_l2

E, H = 32, 4


def pair(device, **kw):
    torch.manual_seed(1)
    ref = nn.MultiheadAttention(E, H, **kw).to(device)
    ours = tt.MultiheadAttention(E, H, **kw).to(device)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def run_both(ref, ours, args, kwargs, grads=True):
    a_out, a_w = ref(*args, **kwargs)
    b_out, b_w = ours(*args, **kwargs)
    assert b_out.shape == a_out.shape
    assert rel_l2(b_out.detach(), a_out.detach()) < 1e-5
    if a_w is None:
        assert b_w is None
    else:
        assert b_w.shape == a_w.shape
        assert torch.allclose(b_w, a_w, atol=1e-6)
    if grads:
        dout = torch.randn_like(a_out)
        pa = torch.autograd.grad(a_out, list(ref.parameters()), dout)
        pb = torch.autograd.grad(b_out, list(ours.parameters()), dout)
        for x, y in zip(pa, pb):
            assert rel_l2(y, x) < 1e-4


def test_state_dicts_are_interchangeable():
    ref, ours = nn.MultiheadAttention(E, H, kdim=20, vdim=12, add_bias_kv=True), \
        tt.MultiheadAttention(E, H, kdim=20, vdim=12, add_bias_kv=True)
    assert ref.state_dict().keys() == ours.state_dict().keys()
    ref.load_state_dict(ours.state_dict())
    assert isinstance(ours, nn.MultiheadAttention)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_self_attention(batch_first, need_weights, average, device):
    ref, ours = pair(device, batch_first=batch_first)
    x = torch.randn((3, 10, E) if batch_first else (10, 3, E), device=device)
    run_both(ref, ours, (x, x, x), dict(need_weights=need_weights,
                                        average_attn_weights=average))


@pytest.mark.parametrize("bias", [True, False])
def test_cross_attention_with_kdim_vdim(bias, device):
    ref, ours = pair(device, kdim=20, vdim=12, bias=bias, batch_first=True)
    q = torch.randn(2, 7, E, device=device)
    k = torch.randn(2, 11, 20, device=device)
    v = torch.randn(2, 11, 12, device=device)
    run_both(ref, ours, (q, k, v), dict(need_weights=False))
    ref2, ours2 = pair(device, batch_first=True)
    kv = torch.randn(2, 11, E, device=device)
    run_both(ref2, ours2, (q, kv, kv), dict())


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("with_kpm", [False, True])
@pytest.mark.parametrize("attn_mask_rank", [None, 2, 3])
def test_masks(mask_kind, with_kpm, attn_mask_rank, device):
    ref, ours = pair(device, batch_first=True)
    N, L, S = 3, 6, 9
    q = torch.randn(N, L, E, device=device)
    kv = torch.randn(N, S, E, device=device)
    kwargs = dict(need_weights=True)
    if with_kpm:
        kpm = torch.zeros(N, S, dtype=torch.bool, device=device)
        kpm[0, 5:] = True
        kpm[2, 1] = True
        kwargs["key_padding_mask"] = kpm if mask_kind == "bool" else \
            torch.zeros(N, S, device=device).masked_fill(kpm, float("-inf"))
    if attn_mask_rank:
        shape = (L, S) if attn_mask_rank == 2 else (N * H, L, S)
        am = torch.rand(shape, device=device) < 0.2
        am[..., 0] = False  # every row keeps a key: PyTorch gives NaN for fully masked rows
        kwargs["attn_mask"] = am if mask_kind == "bool" else \
            torch.randn(shape, device=device).masked_fill(am, float("-inf"))
    run_both(ref, ours, (q, kv, kv), kwargs)


def test_is_causal(device):
    ref, ours = pair(device, batch_first=True)
    x = torch.randn(2, 8, E, device=device)
    causal = nn.Transformer.generate_square_subsequent_mask(8, device=device)
    run_both(ref, ours, (x, x, x), dict(attn_mask=causal, is_causal=True, need_weights=False))
    run_both(ref, ours, (x, x, x), dict(attn_mask=causal, is_causal=True))
    with pytest.raises(RuntimeError, match="is_causal"):
        ours(x, x, x, is_causal=True)


def test_bias_kv_and_zero_attn(device):
    ref, ours = pair(device, add_bias_kv=True, add_zero_attn=True)
    q = torch.randn(5, 2, E, device=device)
    kv = torch.randn(7, 2, E, device=device)
    kpm = torch.zeros(2, 7, dtype=torch.bool, device=device)
    kpm[1, 4:] = True
    run_both(ref, ours, (q, kv, kv), dict(key_padding_mask=kpm))


def test_unbatched(device):
    ref, ours = pair(device)
    x = torch.randn(6, E, device=device)
    run_both(ref, ours, (x, x, x), dict())


def test_fully_masked_rows_give_zero_not_nan(device):
    _, ours = pair(device, batch_first=True)
    x = torch.randn(1, 4, E, device=device)
    am = torch.zeros(4, 4, dtype=torch.bool, device=device)
    am[1] = True
    out, w = ours(x, x, x, attn_mask=am)
    assert torch.isfinite(out).all() and torch.all(w[0, 1] == 0)


def test_dropout_in_training_only(device):
    _, ours = pair(device, dropout=0.5, batch_first=True)
    x = torch.randn(2, 16, E, device=device)
    ours.eval()
    a, _ = ours(x, x, x)
    b, _ = ours(x, x, x)
    assert torch.equal(a, b)
    ours.train()
    torch.manual_seed(3)
    c, w = ours(x, x, x, average_attn_weights=False)
    assert not torch.allclose(a, c)
    # The returned weights carry the dropout the output used: recompute the output from them.
    q, k, v = (ours.in_proj_weight.chunk(3)[i] for i in range(3))
    bq, bk, bv = ours.in_proj_bias.chunk(3)
    vv = (x @ v.T + bv).reshape(2, 16, H, E // H).transpose(1, 2)
    manual = (w @ vv).transpose(1, 2).reshape(2, 16, E) @ ours.out_proj.weight.T \
        + ours.out_proj.bias
    assert torch.allclose(manual, c, atol=1e-5)
    assert ((w == 0).float().mean() - 0.5).abs() < 0.1
