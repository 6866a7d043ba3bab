"""Names of the C++ enums and checks of the Python-side arguments, shared by every entry point."""

import operator

from ._tileattn import Error

ALIGNMENTS = {"bottom-right": 0, "bottom_right": 0, "top-left": 1, "top_left": 1}
BACKENDS = {"auto": 0, "automatic": 0, "cpu": 1, "reference": 2, "cuda": 3}
CPU_ISAS = {"amx_bf16": 0, "avx512_bf16": 1, "avx512": 2, "avx2": 3, "portable": 4, "best": 255}
LAYOUTS = ("bshd", "bhsd")
_U64 = 1 << 64


def fail(argument: str, what: str):
    raise Error(f"tileattn: argument '{argument}': {what}")


def choice(argument: str, value, table):
    try:
        return table[value]
    except (KeyError, TypeError):
        names = ", ".join(repr(n) for n in table)
        fail(argument, f"must be one of {names}, got {value!r}")


def layout_is_bhsd(layout) -> bool:
    if layout not in LAYOUTS:
        fail("layout", f"must be 'bshd' ([B, L, H, D] arrays) or 'bhsd' ([B, H, L, D]), "
                       f"got {layout!r}")
    return layout == "bhsd"


def window_pair(window):
    try:
        left, right = window
        return int(left), int(right)
    except (TypeError, ValueError):
        fail("window", f"must be a pair (left, right) of ints (-1: unbounded), got {window!r}")


def u64(argument: str, value) -> int:
    """An unsigned 64-bit integer (Python, numpy or torch integer scalars)."""
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or isinstance(value, bool) or not 0 <= number < _U64:
        fail(argument, f"must be an integer in [0, 2^64), got {value!r}")
    return number


def scale_value(scale):
    return None if scale is None else float(scale)
