"""tileattn for PyTorch: custom operators with autograd and ``torch.compile`` support, and
drop-ins with the originals' signatures.

  * ``tileattn.torch.attention`` — every tileattn option, differentiable;
  * ``scaled_dot_product_attention`` — for ``torch.nn.functional.scaled_dot_product_attention``;
  * ``flash_attn_func``, ``flash_attn_kvpacked_func``, ``flash_attn_qkvpacked_func`` and the
    ``flash_attn_varlen_*`` forms — for FlashAttention's functions of the same names;
  * ``MultiheadAttention`` — for ``torch.nn.MultiheadAttention``.

The operators are ``torch.ops.tileattn.attention_forward`` and
``torch.ops.tileattn.attention_backward`` (``tileattn.torch._ops``).
"""

from . import _ops  # registers the custom operators
from .flash import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                    flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                    flash_attn_varlen_qkvpacked_func)
from .functional import attention, scaled_dot_product_attention
from .modules import MultiheadAttention

__all__ = ["attention", "scaled_dot_product_attention", "flash_attn_func",
           "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "MultiheadAttention"]
