"""Stubs of tileattn.torch."""

from typing import Optional, Tuple, Union

from torch import Tensor, nn

def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = ..., alignment: str = ...,
              window: Tuple[int, int] = ..., mask: Optional[Tensor] = ...,
              key_lengths: Optional[Tensor] = ..., scale: Optional[float] = ...,
              softcap: float = ..., alibi_slopes: Optional[Tensor] = ...,
              dropout_p: float = ..., layout: str = ..., deterministic: bool = ...,
              return_lse: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Optional[Tensor] = ..., dropout_p: float = ...,
                                 is_causal: bool = ..., scale: Optional[float] = ...,
                                 enable_gqa: bool = ...) -> Tensor: ...
def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = ...,
                    softmax_scale: Optional[float] = ..., causal: bool = ...,
                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                    alibi_slopes: Optional[Tensor] = ..., deterministic: bool = ...,
                    return_attn_probs: bool = ...
                    ) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]: ...
def flash_attn_kvpacked_func(q: Tensor, kv: Tensor, dropout_p: float = ...,
                             softmax_scale: Optional[float] = ..., causal: bool = ...,
                             window_size: Tuple[int, int] = ..., softcap: float = ...,
                             alibi_slopes: Optional[Tensor] = ..., deterministic: bool = ...,
                             return_attn_probs: bool = ...
                             ) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]: ...
def flash_attn_qkvpacked_func(qkv: Tensor, dropout_p: float = ...,
                              softmax_scale: Optional[float] = ..., causal: bool = ...,
                              window_size: Tuple[int, int] = ..., softcap: float = ...,
                              alibi_slopes: Optional[Tensor] = ..., deterministic: bool = ...,
                              return_attn_probs: bool = ...
                              ) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]: ...

class MultiheadAttention(nn.MultiheadAttention):
    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Optional[Tensor] = ..., need_weights: bool = ...,
                attn_mask: Optional[Tensor] = ..., average_attn_weights: bool = ...,
                is_causal: bool = ...) -> Tuple[Tensor, Optional[Tensor]]: ...
