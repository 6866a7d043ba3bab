"""The attention probabilities computed with PyTorch operations: the slow path behind
``MultiheadAttention(need_weights=True)`` and ``flash_attn_func(return_attn_probs=True)``.

Follows the score pipeline of docs/semantics.md (scale, softcap, ALiBi, additive mask, boolean
mask / key lengths / window, softmax; fully masked rows are 0) in float32, on [B, H, Lq, D]
tensors. It stores the B x H x Lq x Lk matrix, which the tileattn kernels never do.
"""

import math
from typing import Optional

import torch
from torch import Tensor

from .. import dropout as _dropout


def visible(len_q: int, len_k: int, causal: bool, top_left: bool, window_left: int,
            window_right: int, device) -> Tensor:
    """Boolean [Lq, Lk]: the causal/window band (without key lengths)."""
    i = torch.arange(len_q, device=device)[:, None]
    j = torch.arange(len_k, device=device)[None, :]
    pos = i if top_left else i + (len_k - len_q)
    if causal:
        window_right = 0 if window_right < 0 else min(window_right, 0)
    ok = torch.ones(len_q, len_k, dtype=torch.bool, device=device)
    if window_left >= 0:
        ok &= j >= pos - window_left
    if window_right >= 0:
        ok &= j <= pos + window_right
    return ok


def probabilities(q: Tensor, k: Tensor, *, mask: Optional[Tensor] = None, causal: bool = False,
                  top_left: bool = False, window=(-1, -1), scale: Optional[float] = None,
                  softcap: float = 0.0, alibi_slopes: Optional[Tensor] = None) -> Tensor:
    """softmax of the modified scores, float32 [B, Hq, Lq, Lk]; q [B, Hq, Lq, D], k [B, Hkv, Lk,
    D] (GQA: query head h reads kv head h // (Hq // Hkv)). mask: bool (True = attend) or float,
    broadcastable to [B, Hq, Lq, Lk]."""
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=1)
    len_q, len_k = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        i = torch.arange(len_q, device=q.device)[:, None]
        j = torch.arange(len_k, device=q.device)[None, :]
        dist = (i + len_k - len_q - j).abs().float()
        slopes = alibi_slopes.float()
        slopes = slopes[None, :, None, None] if slopes.dim() == 1 else slopes[:, :, None, None]
        s = s - slopes * dist
    ok = visible(len_q, len_k, causal, top_left, window[0], window[1], q.device)
    if mask is not None:
        if mask.dtype == torch.bool:
            ok = ok & mask
        else:
            s = s + mask.float()
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p.masked_fill(s.isneginf().all(-1, keepdim=True), 0.0)  # fully masked rows: 0


def keep_mask(batch: int, heads: int, len_q: int, len_k: int, dropout_p: float, seed: int,
              offset: int, device) -> Tensor:
    """The library's dropout keep decisions as a boolean [B, H, Lq, Lk] tensor."""
    return torch.from_numpy(_dropout.keep_mask(batch, heads, len_q, len_k, dropout_p, seed,
                                               offset)).to(device)
