"""torch.compile(fullgraph=True) traces the custom operators: a small model with the module and
the functional drop-ins, forward and backward, equal to eager."""

import os

import pytest
import torch
from torch import nn

import tileattn.torch as tt


class Block(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.attn = tt.MultiheadAttention(32, 4, batch_first=True, dropout=dropout)
        self.norm = nn.LayerNorm(32)
        self.mlp = nn.Linear(32, 32)

    def forward(self, x, kpm=None):
        a, _ = self.attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        x = self.norm(x + a)
        q = x.view(x.shape[0], x.shape[1], 4, 8)
        y = tt.flash_attn_func(q, q, q, causal=True).reshape(x.shape)
        z = tt.scaled_dot_product_attention(q.transpose(1, 2), q.transpose(1, 2),
                                            q.transpose(1, 2), is_causal=True)
        return self.mlp(y + z.transpose(1, 2).reshape(x.shape)).square().mean()


BACKENDS = ["aot_eager"] + (["inductor"] if os.environ.get("TILEATTN_TEST_INDUCTOR") == "1"
                            or torch.cuda.is_available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fullgraph_forward_backward_equals_eager(backend, device):
    torch._dynamo.reset()
    model = Block().to(device)
    x = torch.randn(2, 12, 32, device=device)
    kpm = torch.zeros(2, 12, dtype=torch.bool, device=device)
    kpm[1, 9:] = True
    loss = model(x, kpm)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    closs = compiled(x, kpm)
    cgrads = torch.autograd.grad(closs, list(model.parameters()))
    assert torch.allclose(closs, loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, cgrads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_fullgraph_with_dropout_and_dynamic_shapes(device):
    torch._dynamo.reset()
    model = Block(dropout=0.2).to(device).train()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    for length in (8, 13):
        x = torch.randn(2, length, 32, device=device)
        loss = compiled(x)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
