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

def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                            k: Optional[Tensor] = ..., v: Optional[Tensor] = ...,
                            rotary_cos: Optional[Tensor] = ..., rotary_sin: Optional[Tensor] = ...,
                            cache_seqlens: Optional[Union[int, Tensor]] = ...,
                            cache_batch_idx: Optional[Tensor] = ...,
                            cache_leftpad: Optional[Tensor] = ...,
                            block_table: Optional[Tensor] = ...,
                            softmax_scale: Optional[float] = ..., causal: bool = ...,
                            window_size: Tuple[int, int] = ..., softcap: float = ...,
                            rotary_interleaved: bool = ..., alibi_slopes: Optional[Tensor] = ...,
                            num_splits: int = ..., return_softmax_lse: bool = ...
                            ) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                           k: Optional[Tensor] = ..., v: Optional[Tensor] = ...,
                           rotary_cos: Optional[Tensor] = ..., rotary_sin: Optional[Tensor] = ...,
                           cache_seqlens: Optional[Union[int, Tensor]] = ...,
                           cache_batch_idx: Optional[Tensor] = ...,
                           block_table: Optional[Tensor] = ...,
                           softmax_scale: Optional[float] = ..., causal: bool = ...,
                           window_size: Tuple[int, int] = ..., softcap: float = ...,
                           rotary_interleaved: bool = ..., alibi_slopes: Optional[Tensor] = ...,
                           num_splits: int = ..., return_softmax_lse: bool = ..., *,
                           cu_seqlens_q: Optional[Tensor] = ..., max_seqlen_q: Optional[int] = ...,
                           cu_seqlens_k_new: Optional[Tensor] = ...,
                           cache_leftpad: Optional[Tensor] = ...
                           ) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = ...,
                     inplace: bool = ..., seqlen_offsets: Union[int, Tensor] = ...,
                     cu_seqlens: Optional[Tensor] = ..., max_seqlen: Optional[int] = ...
                     ) -> Tensor: ...

class MultiheadAttention(nn.MultiheadAttention):
    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Optional[Tensor] = ..., need_weights: bool = ...,
                attn_mask: Optional[Tensor] = ..., average_attn_weights: bool = ...,
                is_causal: bool = ...) -> Tuple[Tensor, Optional[Tensor]]: ...
