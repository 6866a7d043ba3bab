"""tileattn: attention operators for CPUs and NVIDIA GPUs, with one set of semantics.

``tileattn.attention`` and ``tileattn.attention_backward`` take any DLPack array (numpy,
PyTorch, CuPy, JAX, ...) without copying it, as do the serving operators
``tileattn.attention_with_kvcache`` (a contiguous or paged KV cache appended in place) and
``tileattn.apply_rotary``; ``tileattn.torch`` adds PyTorch custom operators with autograd and
drop-ins for ``scaled_dot_product_attention``, FlashAttention's ``flash_attn_func`` family,
``flash_attn_with_kvcache`` and ``apply_rotary_emb``, and ``nn.MultiheadAttention``. The
semantics are the C++ library's (docs/semantics.md).
"""

from ._tileattn import Error, __version__, build_info, build_report

Error.__module__ = "tileattn"
from . import dropout
from ._api import attention, attention_backward, merge_attention_states
from ._kvcache import apply_rotary, attention_with_kvcache

__all__ = ["Error", "__version__", "apply_rotary", "attention", "attention_backward",
           "attention_with_kvcache", "build_info", "dropout", "build_report",
           "merge_attention_states"]
