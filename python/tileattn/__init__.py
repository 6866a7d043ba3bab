"""tileattn: attention operators for CPUs and NVIDIA GPUs, with one set of semantics.

``tileattn.attention`` and ``tileattn.attention_backward`` take any DLPack array (numpy,
PyTorch, CuPy, JAX, ...) without copying it; ``tileattn.torch`` adds PyTorch custom operators
with autograd and drop-ins for ``scaled_dot_product_attention``, FlashAttention's
``flash_attn_func`` family and ``nn.MultiheadAttention``. The semantics are the C++ library's
(docs/semantics.md).
"""

from ._tileattn import Error, __version__, build_info, build_report

Error.__module__ = "tileattn"
from . import dropout
from ._api import attention, attention_backward, merge_attention_states

__all__ = ["Error", "__version__", "attention", "attention_backward", "build_info", "dropout",
           "build_report", "merge_attention_states"]
