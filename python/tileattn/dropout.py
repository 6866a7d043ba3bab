"""tileattn's dropout keep mask in numpy: the mapping of docs/semantics.md ("Dropout").

Every backend keeps or drops element (b, h, i, j) of the probabilities by Philox4x32-10 keyed by
(seed, offset, b, h, i, j); this module computes the same decisions on the host, for the paths
that must show them (FlashAttention's ``return_attn_probs``, ``MultiheadAttention``'s
``need_weights``) and for tests.
"""

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def philox4x32_10(c0, c1, c2, c3, key0: int, key1: int):
    """Philox4x32-10 of uint32 counter arrays (broadcast together) under a 32-bit key pair."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in np.broadcast_arrays(c0, c1, c2, c3))
    k0, k1 = key0 & 0xFFFFFFFF, key1 & 0xFFFFFFFF
    for rnd in range(10):
        if rnd > 0:
            k0 = (k0 + _W0) & 0xFFFFFFFF
            k1 = (k1 + _W1) & 0xFFFFFFFF
        p0 = _M0 * c0
        p1 = _M1 * c2
        hi0, lo0 = p0 >> _SHIFT, p0 & _MASK32
        hi1, lo1 = p1 >> _SHIFT, p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return c0, c1, c2, c3


def threshold(dropout_p: float) -> int:
    """floor(dropout_p * 2^32), dropout_p taken as the f32 the library receives."""
    return int(np.floor(float(np.float32(dropout_p)) * 4294967296.0))


def keep_scale(dropout_p: float) -> float:
    """1 / (1 - dropout_p) computed in f32, as the library scales kept probabilities."""
    p = np.float32(dropout_p)
    return float(np.float32(1.0) / (np.float32(1.0) - p))


def keep_mask(batch: int, heads_q: int, len_q: int, len_k: int, dropout_p: float, seed: int,
              offset: int = 0) -> np.ndarray:
    """Boolean [B, Hq, Lq, Lk]: True where the element is kept."""
    b = np.arange(batch, dtype=np.uint64)[:, None, None, None]
    h = np.arange(heads_q, dtype=np.uint64)[None, :, None, None]
    i = np.arange(len_q, dtype=np.uint64)[None, None, :, None]
    j = np.arange(len_k, dtype=np.uint64)[None, None, None, :]
    stream = (np.uint64(offset % (1 << 64)) + b * np.uint64(heads_q) + h)  # wraps mod 2^64
    seed %= 1 << 64
    words = philox4x32_10(j >> np.uint64(2), i, stream & _MASK32, stream >> _SHIFT,
                          seed & 0xFFFFFFFF, seed >> 32)
    lane = (j & np.uint64(3)).astype(np.int64)
    word = np.choose(np.broadcast_to(lane, words[0].shape), words)
    return word >= np.uint64(threshold(dropout_p))
