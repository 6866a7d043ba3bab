"""CUDA only (skipped without a GPU or a CUDA build): streams, devices, zero-copy, graph
capture. CPU-vs-GPU agreement of the drop-ins is covered by the device-parametrised tests."""

import pytest
import torch

import tileattn
import tileattn.torch as tt
from reference import attention as ref_attention, rel_l2

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and tileattn.build_info()["cuda"]),
    reason="needs a GPU and a build with TILEATTN_CUDA=ON")


def test_runs_on_the_current_torch_stream():
    q, k, v = (torch.randn(2, 256, 4, 64, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = tileattn.attention(q, k, v, causal=True)
        out_op = tt.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    ref, _ = ref_attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.device == q.device
    assert rel_l2(out, ref) < 2e-2 and torch.equal(out, out_op)


def test_mixed_devices_are_refused():
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(tileattn.Error, match="argument 'k': must be on the same device as q"):
        tileattn.attention(q, q.cpu(), q)
    with pytest.raises(tileattn.Error, match="same device"):
        tileattn.attention(q, q, q, mask=torch.ones(8, 8, dtype=torch.bool))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device():
    q = torch.randn(1, 64, 2, 64, device="cuda:1", dtype=torch.float16)
    out = tileattn.attention(q, q, q)
    assert out.device == q.device
    assert rel_l2(out, ref_attention(q, q, q)[0]) < 2e-3
    with pytest.raises(tileattn.Error, match="same device"):
        tileattn.attention(q, q.to("cuda:0"), q)


def test_cuda_graph_capture_of_forward_and_backward():
    q, k, v = (torch.randn(2, 128, 4, 64, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 128, 4, 64, device="cuda", dtype=torch.bfloat16)

    def step():
        out = tt.flash_attn_func(q, k, v, causal=True)
        return torch.autograd.grad(out, (q, k, v), dout)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    eager = step()
    with torch.no_grad():
        for x in (q, k, v):
            x.add_(0)  # same inputs: the replay must reproduce eager gradients
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(static, eager):
        assert rel_l2(a, b) < 1e-2


def test_dropout_keep_mask_is_the_cpu_backends():
    def keep(device):
        # Uniform probabilities over an identity V: out[b, i, h, j] > 0 iff (b, h, i, j) is kept.
        B, H, Lq, Lk = 2, 3, 5, 64
        q = torch.zeros(B, Lq, H, 64, device=device, dtype=torch.float16)
        k = torch.zeros(B, Lk, 1, 64, device=device, dtype=torch.float16)
        v = torch.eye(Lk).view(1, Lk, 1, Lk).expand(B, Lk, 1, Lk).contiguous().half()
        out = tileattn.attention(q, k, v.to(device), scale=0.0, dropout_p=0.3, seed=11,
                                 offset=2**64 - 2)
        return out.float().cpu() > 0
    gpu = keep("cuda")
    assert torch.equal(gpu, keep("cpu"))
    assert 0.6 < gpu.float().mean().item() < 0.8
