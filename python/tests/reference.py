"""A float64 reference of docs/semantics.md in PyTorch, independent of the package's own code:
outputs through plain tensor operations and gradients through autograd."""

import math

import numpy as np
import torch


def philox_keep(batch, heads, len_q, len_k, dropout_p, seed, offset=0):
    """The keep mask of docs/semantics.md with Python integers (slow, exact; small shapes)."""
    M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
    thr = math.floor(float(np.float32(dropout_p)) * 2**32)
    keep = np.zeros((batch, heads, len_q, len_k), dtype=bool)
    for b in range(batch):
        for h in range(heads):
            s = (offset + b * heads + h) % 2**64
            for i in range(len_q):
                for jg in range((len_k + 3) // 4):
                    c = [jg, i, s & 0xFFFFFFFF, s >> 32]
                    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
                    for r in range(10):
                        if r:
                            k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
                        p0, p1 = M0 * c[0], M1 * c[2]
                        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k1,
                             p0 & 0xFFFFFFFF]
                    for lane in range(4):
                        j = 4 * jg + lane
                        if j < len_k:
                            keep[b, h, i, j] = c[lane] >= thr
    return keep


def attention(q, k, v, *, causal=False, top_left=False, window=(-1, -1), mask=None,
              key_lengths=None, scale=None, softcap=0.0, alibi_slopes=None, dropout_p=0.0,
              keep=None, bhsd=False):
    """out [q's layout] and lse [B, Hq, Lq] in float64 from BSHD (or BHSD) tensors; differentiable.
    keep: the boolean [B, Hq, Lq, Lk] dropout keep mask when dropout_p > 0."""
    q, k, v = (x.double() for x in (q, k, v))
    if not bhsd:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, L, D]
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(Hq // Hkv, dim=1)
    v = v.repeat_interleave(Hq // Hkv, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    lens = torch.full((B,), Lk, dtype=torch.int64) if key_lengths is None else \
        key_lengths.cpu().long()
    i = torch.arange(Lq).view(1, 1, Lq, 1)
    j = torch.arange(Lk).view(1, 1, 1, Lk)
    lk_b = lens.view(B, 1, 1, 1).to(s.device)
    i, j = i.to(s.device), j.to(s.device)
    if alibi_slopes is not None:
        sl = alibi_slopes.double()
        sl = sl.view(1, Hq, 1, 1) if sl.dim() == 1 else sl.view(B, Hq, 1, 1)
        s = s - sl * (i + lk_b - Lq - j).abs()
    if mask is not None and mask.dtype != torch.bool:
        s = s + mask.double()
    pos = i if top_left else i + lk_b - Lq
    wl, wr = window
    if causal:
        wr = 0 if wr < 0 else min(wr, 0)
    ok = j < lk_b
    if wl >= 0:
        ok = ok & (j >= pos - wl)
    if wr >= 0:
        ok = ok & (j <= pos + wr)
    if mask is not None and mask.dtype == torch.bool:
        ok = ok & mask
    s = s.masked_fill(~ok, float("-inf"))
    dead = torch.isneginf(s).all(-1, keepdim=True)
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    if dropout_p > 0:
        p = p * torch.as_tensor(keep, device=p.device) / (1.0 - float(np.float32(dropout_p)))
    out = p @ v
    if not bhsd:
        out = out.transpose(1, 2)
    return out, lse


def rel_l2(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# Relative L2 error bounds of a result stored in each dtype against the float64 reference.
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
