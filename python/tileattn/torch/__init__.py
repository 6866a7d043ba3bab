"""tileattn for PyTorch: custom operators with autograd and ``torch.compile`` support, and
drop-ins with the originals' signatures.

  * ``tileattn.torch.attention`` — every tileattn option, differentiable;
  * ``scaled_dot_product_attention`` — for ``torch.nn.functional.scaled_dot_product_attention``;
  * ``flash_attn_func``, ``flash_attn_kvpacked_func``, ``flash_attn_qkvpacked_func``, the
    ``flash_attn_varlen_*`` forms and ``flash_attn_with_kvcache`` — for FlashAttention's
    functions of the same names;
  * ``apply_rotary_emb`` — for FlashAttention's ``flash_attn.layers.rotary.apply_rotary_emb``;
  * ``attention_with_kvcache`` — every option of the KV-cache operator (varlen queries too);
  * ``MultiheadAttention`` — for ``torch.nn.MultiheadAttention``.

The operators are ``torch.ops.tileattn.attention_forward`` and
``torch.ops.tileattn.attention_backward`` (``tileattn.torch._ops``), and
``torch.ops.tileattn.attention_with_kvcache``, ``torch.ops.tileattn.apply_rotary`` and
``torch.ops.tileattn.apply_rotary_`` (``tileattn.torch._kvcache_ops``).
"""

from . import _kvcache_ops, _ops  # registers the custom operators
from .flash import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                    flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                    flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)
from .functional import attention, attention_with_kvcache, scaled_dot_product_attention
from .modules import MultiheadAttention
from .rotary import apply_rotary_emb

__all__ = ["attention", "scaled_dot_product_attention", "flash_attn_func",
           "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_with_kvcache", "apply_rotary_emb", "attention_with_kvcache",
           "MultiheadAttention"]
