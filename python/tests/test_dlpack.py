"""tileattn.attention on torch tensors and on a generic DLPack producer, without copies."""

import numpy as np
import pytest
import torch

import tileattn
from reference import TOL, attention as ref_attention, rel_l2


class Producer:
    """A DLPack producer that is neither numpy nor torch (as CuPy or JAX arrays are)."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_generic_producer_is_read_in_place_and_gets_a_numpy_output():
    q, k, v = (np.random.default_rng(i).standard_normal((1, 6, 2, 8)).astype(np.float32)
               for i in range(3))
    out = tileattn.attention(Producer(q), Producer(k), Producer(v), causal=True)
    assert isinstance(out, np.ndarray)
    want, _ = ref_attention(*(torch.from_numpy(x) for x in (q, k, v)), causal=True)
    assert rel_l2(out, want) < TOL[torch.float32]
    # Writes go to the producer's memory.
    target = np.zeros_like(q)
    tileattn.attention(Producer(q), Producer(k), Producer(v), out=Producer(target))
    assert np.abs(target).sum() > 0


def test_torch_tensors_in_torch_tensors_out(device):
    q = torch.randn(2, 4, 9, 16, device=device, dtype=torch.bfloat16, requires_grad=True)
    out, lse = tileattn.attention(q, q, q, layout="bhsd", causal=True, alignment="top-left",
                                  return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert out.device == q.device and lse.dtype == torch.float32 and lse.shape == (2, 4, 9)
    assert not out.requires_grad  # the raw API does not record autograd
    want, _ = ref_attention(q, q, q, causal=True, top_left=True, bhsd=True)
    assert rel_l2(out, want.detach()) < TOL[torch.bfloat16]
    dq, dk, dv = tileattn.attention_backward(torch.ones_like(out), q, q, q, out, lse,
                                             layout="bhsd", causal=True, alignment="top-left")
    assert dq.shape == q.shape and dq.dtype == torch.bfloat16


def test_out_aliases_the_given_tensor():
    q = torch.randn(1, 5, 2, 8)
    out = torch.empty(1, 5, 2, 8)
    assert tileattn.attention(q, q, q, out=out) is out
    assert torch.allclose(out, ref_attention(q, q, q)[0].float(), atol=1e-6)


def test_empty_tensors_have_no_data_pointer_but_work():
    q = torch.randn(1, 0, 2, 8)
    k = torch.randn(1, 3, 2, 8)
    out = tileattn.attention(q, k, k)
    assert out.shape == (1, 0, 2, 8)
    out = tileattn.attention(k, q, q)  # no keys: every row is fully masked
    assert torch.all(out == 0)


def test_numpy_and_torch_mixed_on_the_cpu():
    q = torch.randn(1, 4, 1, 8)
    out = tileattn.attention(q, q.numpy(), q.numpy())
    assert isinstance(out, torch.Tensor)


def test_unsupported_dtypes_and_bool_masks_from_torch():
    q = torch.randn(1, 4, 1, 8)
    with pytest.raises(tileattn.Error, match="argument 'mask': dtype uint8"):
        tileattn.attention(q, q, q, mask=torch.ones(4, 4, dtype=torch.uint8))
    m = torch.ones(4, 4, dtype=torch.bool).tril()
    got = tileattn.attention(q, q, q, mask=m)
    want = tileattn.attention(q, q, q, causal=True)
    assert torch.allclose(got, want)


def test_jax_arrays_where_installed():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 7, 2, 16)).astype(np.float32) for _ in range(3))
    cpu = jax.devices("cpu")[0]  # a JAX built with CUDA puts arrays on the GPU by default
    q_j, k_j, v_j = (jax.device_put(x, cpu) for x in (q, k, v))
    out, lse = tileattn.attention(q_j, k_j, v_j, causal=True, return_lse=True)
    assert isinstance(out, np.ndarray)  # JAX arrays are immutable: the output is numpy's
    want, _ = ref_attention(*(torch.from_numpy(x) for x in (q, k, v)), causal=True)
    assert rel_l2(out, want) < TOL[torch.float32]
    # bfloat16 JAX arrays are read (DLPack's bfloat16), the output must then be given.
    qb = q_j.astype(jnp.bfloat16)
    with pytest.raises(tileattn.Error, match="argument 'out'"):
        tileattn.attention(qb, qb, qb)
    target = torch.empty(1, 7, 2, 16)
    tileattn.attention(qb, qb, qb, out=target)
    assert torch.isfinite(target).all()
