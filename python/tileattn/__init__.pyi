"""Stubs of the public API (python/tileattn/_api.py); arrays are any DLPack or buffer-protocol
object: numpy, torch, CuPy, JAX, ..."""

from typing import Any, Literal, Optional, Tuple, TypeVar, Union, overload

from . import dropout as dropout
from ._tileattn import Error as Error, __version__ as __version__
from ._tileattn import build_info as build_info, build_report as build_report

Array = TypeVar("Array")
Alignment = Literal["bottom-right", "bottom_right", "top-left", "top_left"]
Layout = Literal["bshd", "bhsd"]
Backend = Literal["auto", "automatic", "cpu", "reference", "cuda"]
CpuIsa = Literal["best", "amx_bf16", "avx512_bf16", "avx512", "avx2", "portable"]

@overload
def attention(q: Array, k: Any, v: Any, *, causal: bool = ..., alignment: Alignment = ...,
              window: Tuple[int, int] = ..., mask: Optional[Any] = ...,
              key_lengths: Optional[Any] = ..., scale: Optional[float] = ...,
              softcap: float = ..., alibi_slopes: Optional[Any] = ..., dropout_p: float = ...,
              seed: int = ..., offset: int = ..., layout: Layout = ...,
              out: Optional[Any] = ..., return_lse: Literal[False] = ...,
              backend: Backend = ..., threads: int = ..., cpu_isa: CpuIsa = ...,
              stream: Optional[int] = ...) -> Array: ...
@overload
def attention(q: Array, k: Any, v: Any, *, causal: bool = ..., alignment: Alignment = ...,
              window: Tuple[int, int] = ..., mask: Optional[Any] = ...,
              key_lengths: Optional[Any] = ..., scale: Optional[float] = ...,
              softcap: float = ..., alibi_slopes: Optional[Any] = ..., dropout_p: float = ...,
              seed: int = ..., offset: int = ..., layout: Layout = ...,
              out: Optional[Any] = ..., return_lse: Literal[True],
              backend: Backend = ..., threads: int = ..., cpu_isa: CpuIsa = ...,
              stream: Optional[int] = ...) -> Tuple[Array, Array]: ...
def attention_backward(dout: Any, q: Array, k: Any, v: Any, out: Any, lse: Any, *,
                       causal: bool = ..., alignment: Alignment = ...,
                       window: Tuple[int, int] = ..., mask: Optional[Any] = ...,
                       key_lengths: Optional[Any] = ..., scale: Optional[float] = ...,
                       softcap: float = ..., alibi_slopes: Optional[Any] = ...,
                       dropout_p: float = ..., seed: int = ..., offset: int = ...,
                       layout: Layout = ..., deterministic: bool = ...,
                       dq: Optional[Any] = ..., dk: Optional[Any] = ..., dv: Optional[Any] = ...,
                       backend: Backend = ..., threads: int = ..., cpu_isa: CpuIsa = ...,
                       stream: Optional[int] = ...) -> Tuple[Array, Array, Array]: ...
@overload
def attention_with_kvcache(q: Array, k_cache: Any, v_cache: Any, k: Optional[Any] = ...,
                           v: Optional[Any] = ..., rotary_cos: Optional[Any] = ...,
                           rotary_sin: Optional[Any] = ...,
                           cache_seqlens: Union[int, Any, None] = ...,
                           cache_batch_idx: Optional[Any] = ..., block_table: Optional[Any] = ...,
                           softmax_scale: Optional[float] = ..., causal: bool = ...,
                           window_size: Tuple[int, int] = ..., softcap: float = ...,
                           rotary_interleaved: bool = ..., alibi_slopes: Optional[Any] = ...,
                           num_splits: int = ..., return_softmax_lse: Literal[False] = ..., *,
                           cu_seqlens_q: Optional[Any] = ..., max_seqlen_q: Optional[int] = ...,
                           cu_seqlens_k_new: Optional[Any] = ...,
                           cache_leftpad: Optional[Any] = ..., out: Optional[Any] = ...,
                           backend: Backend = ..., threads: int = ..., cpu_isa: CpuIsa = ...,
                           stream: Optional[int] = ...) -> Array: ...
@overload
def attention_with_kvcache(q: Array, k_cache: Any, v_cache: Any, k: Optional[Any] = ...,
                           v: Optional[Any] = ..., rotary_cos: Optional[Any] = ...,
                           rotary_sin: Optional[Any] = ...,
                           cache_seqlens: Union[int, Any, None] = ...,
                           cache_batch_idx: Optional[Any] = ..., block_table: Optional[Any] = ...,
                           softmax_scale: Optional[float] = ..., causal: bool = ...,
                           window_size: Tuple[int, int] = ..., softcap: float = ...,
                           rotary_interleaved: bool = ..., alibi_slopes: Optional[Any] = ...,
                           num_splits: int = ..., *, return_softmax_lse: Literal[True],
                           cu_seqlens_q: Optional[Any] = ..., max_seqlen_q: Optional[int] = ...,
                           cu_seqlens_k_new: Optional[Any] = ...,
                           cache_leftpad: Optional[Any] = ..., out: Optional[Any] = ...,
                           backend: Backend = ..., threads: int = ..., cpu_isa: CpuIsa = ...,
                           stream: Optional[int] = ...) -> Tuple[Array, Array]: ...
def apply_rotary(x: Array, cos: Any, sin: Any, seqlen_offsets: Union[int, Any] = ...,
                 cu_seqlens: Optional[Any] = ..., interleaved: bool = ..., inplace: bool = ...,
                 out: Optional[Any] = ..., *, backend: Backend = ..., threads: int = ...,
                 stream: Optional[int] = ...) -> Array: ...
