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
