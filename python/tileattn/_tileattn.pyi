"""Stubs of the compiled core (python/ext). Arrays are any DLPack or buffer-protocol object."""

from typing import Any, Callable, Optional

class Error(ValueError):
    """An invalid argument or a backend failure; the message names the argument."""

__version__: str

def build_report() -> str: ...
def build_info() -> dict[str, Any]: ...
def forward(q: Any, k: Any, v: Any, out: Any, lse: Optional[Any], mask: Optional[Any],
            key_lengths: Optional[Any], alibi_slopes: Optional[Any], causal: bool,
            alignment: int, window_left: int, window_right: int, scale: Optional[float],
            softcap: float, dropout_p: float, seed: int, offset: int, bhsd: bool, backend: int,
            threads: int, cpu_isa: int, stream: int) -> None: ...
def backward(dout: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, dq: Any, dk: Any, dv: Any,
             mask: Optional[Any], key_lengths: Optional[Any], alibi_slopes: Optional[Any],
             causal: bool, alignment: int, window_left: int, window_right: int,
             scale: Optional[float], softcap: float, dropout_p: float, seed: int, offset: int,
             bhsd: bool, deterministic: bool, backend: int, threads: int, cpu_isa: int,
             stream: int, workspace: Optional[Callable[[int], Any]] = None) -> None: ...
def kvcache(q: Any, k_cache: Any, v_cache: Any, k_new: Optional[Any], v_new: Optional[Any],
            rotary_cos: Optional[Any], rotary_sin: Optional[Any], cache_seqlens: Optional[Any],
            cache_batch_idx: Optional[Any], block_table: Optional[Any],
            alibi_slopes: Optional[Any], cu_seqlens_q: Optional[Any],
            cu_seqlens_k_new: Optional[Any], out: Any, lse: Optional[Any],
            scale: Optional[float], causal: bool, window_left: int, window_right: int,
            softcap: float, rotary_interleaved: bool, num_splits: int, max_seqlen_q: int,
            backend: int, threads: int, cpu_isa: int, stream: int,
            workspace: Optional[Callable[[int], Any]] = None,
            cache_leftpad: Optional[Any] = None) -> None: ...
def rotary(x: Any, cos: Any, sin: Any, out: Any, seqlen_offsets: Optional[Any],
           cu_seqlens: Optional[Any], interleaved: bool, backend: int, threads: int,
           stream: int) -> None: ...
