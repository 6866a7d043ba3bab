"""``MultiheadAttention``: a drop-in for ``torch.nn.MultiheadAttention`` whose attention is
computed by tileattn."""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._common import draw_rng, run
from ._math import keep_mask, probabilities

_U64 = 1 << 64


def _float_mask(mask: Tensor, dtype) -> Tensor:
    """A boolean 'masked out' mask (True = ignore, nn.MultiheadAttention's convention) or a float
    mask, as an additive float32 mask."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(
            mask, float("-inf"))
    return mask.to(torch.float32)


class MultiheadAttention(nn.MultiheadAttention):
    """``torch.nn.MultiheadAttention`` with the attention computed by tileattn.

    A subclass: the constructor, the parameters and their names (``in_proj_weight`` or
    ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``, ``in_proj_bias``, ``bias_k``,
    ``bias_v``, ``out_proj``), their initialisation and ``state_dict`` are PyTorch's, so a
    state_dict of either loads into the other. ``forward`` takes the same arguments
    (self and cross attention, ``batch_first``, ``kdim``/``vdim``, ``key_padding_mask`` and
    ``attn_mask`` — bool, True = not allowed, or float, added — ``is_causal``, unbatched inputs,
    ``add_bias_kv``, ``add_zero_attn``, dropout in training) and returns
    ``(attn_output, attn_weights)``.

    ``need_weights=True`` (PyTorch's default) computes the weights too, through a slower path
    that stores the ``[N, H, L, S]`` probabilities in PyTorch (after dropout, as PyTorch returns
    them; averaged over heads with ``average_attn_weights``); the output itself still comes
    from tileattn. Pass ``need_weights=False`` for the fast path.

    Differences: ``is_causal=True`` without a key padding mask uses tileattn's top-left causal
    masking in place of ``attn_mask`` (PyTorch treats the flag as a hint that ``attn_mask`` is
    causal, and does the same on its fast path); dropout draws tileattn's keep mask; rows that
    see no key give 0 (PyTorch's math path gives NaN there).
    """

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Optional[Tensor] = None, need_weights: bool = True,
                attn_mask: Optional[Tensor] = None, average_attn_weights: bool = True,
                is_causal: bool = False):
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                "module method `generate_square_subsequent_mask` to create this mask.")
        batched = query.dim() == 3
        if not batched:  # (L, E): one sequence
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:  # work on (L, N, E) views, as PyTorch does
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        tgt_len, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim

        # Input projections ([L, N, E] each), one matmul when query, key and value are one.
        if self._qkv_same_embed_dim:
            if query is key and key is value:
                q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, -1)
            else:
                w_q, w_k, w_v = self.in_proj_weight.chunk(3)
                b_q, b_k, b_v = (self.in_proj_bias.chunk(3) if self.in_proj_bias is not None
                                 else (None, None, None))
                q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), \
                    F.linear(value, w_v, b_v)
        else:
            b_q, b_k, b_v = (self.in_proj_bias.chunk(3) if self.in_proj_bias is not None
                             else (None, None, None))
            q = F.linear(query, self.q_proj_weight, b_q)
            k = F.linear(key, self.k_proj_weight, b_k)
            v = F.linear(value, self.v_proj_weight, b_v)

        # Masks: PyTorch's conventions (bool True = not allowed) -> one tileattn mask.
        if attn_mask is not None and attn_mask.dim() == 3:  # (N * H, L, S)
            attn_mask = attn_mask.reshape(bsz, heads, tgt_len, attn_mask.shape[-1])
        use_causal = is_causal and key_padding_mask is None and self.bias_k is None \
            and not self.add_zero_attn
        if use_causal:
            attn_mask = None
        if self.bias_k is not None and self.bias_v is not None:
            k = torch.cat([k, self.bias_k.expand(1, bsz, embed_dim)])
            v = torch.cat([v, self.bias_v.expand(1, bsz, embed_dim)])
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        src_len = k.shape[0]
        # [L, N, E] -> [N, L, H, Dh]: BSHD views of the projections.
        q = q.reshape(tgt_len, bsz, heads, head_dim).transpose(0, 1)
        k = k.reshape(src_len, bsz, heads, head_dim).transpose(0, 1)
        v = v.reshape(src_len, bsz, heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = k.new_zeros((bsz, 1, heads, head_dim))
            k, v = torch.cat([k, zeros], 1), torch.cat([v, zeros], 1)
            src_len += 1
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        mask = self._merge_masks(attn_mask, key_padding_mask, bsz, q.dtype)

        dropout_p = self.dropout if self.training else 0.0
        rng = draw_rng(dropout_p)
        out, _ = run(q, k, v, mask=mask, causal=use_causal, top_left=True, dropout_p=dropout_p,
                     rng=rng, bhsd=False)
        out = out.reshape(bsz, tgt_len, embed_dim)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        out = out.transpose(0, 1) if (batched and not self.batch_first) else out
        if not batched:
            out = out.squeeze(0)

        weights = None
        if need_weights:
            weights = self._weights(q, k, mask, use_causal, dropout_p, rng)
            if average_attn_weights:
                weights = weights.mean(dim=1)
            if not batched:
                weights = weights.squeeze(0)
        return out, weights

    @staticmethod
    def _merge_masks(attn_mask, key_padding_mask, bsz, dtype):
        """tileattn's mask (bool True = attend, or float32 added), broadcastable to
        [N, H, L, S]; None without masks."""
        if attn_mask is None and key_padding_mask is None:
            return None
        kpm = None if key_padding_mask is None else key_padding_mask.reshape(
            bsz, 1, 1, key_padding_mask.shape[-1])
        masks = [m for m in (attn_mask, kpm) if m is not None]
        if all(m.dtype == torch.bool for m in masks):
            ignore = masks[0] if len(masks) == 1 else masks[0] | masks[1]
            return ~ignore
        merged = _float_mask(masks[0], dtype)
        if len(masks) == 2:
            merged = merged + _float_mask(masks[1], dtype)
        return merged

    def _weights(self, q, k, mask, causal, dropout_p, rng):
        """The [N, H, L, S] probabilities (after dropout) through PyTorch operations."""
        p = probabilities(q.transpose(1, 2), k.transpose(1, 2), mask=mask, causal=causal,
                          top_left=True)
        if dropout_p > 0.0:
            seed, offset = (x % _U64 for x in rng.tolist())
            keep = keep_mask(*p.shape, dropout_p, seed, offset, p.device)
            p = torch.where(keep, p / (1.0 - dropout_p), torch.zeros_like(p))
        return p.to(q.dtype)
