"""flash_attn_ext: exact softmax and fused attention forward (with logsumexp) as PyTorch custom ops.

Every call is a registered op under ``torch.ops.flash_attn_ext`` with a fake kernel, so it traces under
``torch.compile``. The ops are inference/functional kernels: backward through them raises an error.
"""
import torch  # noqa: F401  (first: loads libc10/libtorch, which _C links against without an rpath)

from . import _C  # noqa: F401  (loads the library, which registers the ops)
from .ops import attention, log_softmax, logsumexp, merge_attention, softmax

__all__ = ["softmax", "log_softmax", "logsumexp", "attention", "merge_attention", "cuda_available"]
__version__ = "0.1.0"


def cuda_available() -> bool:
    """True when the extension was built with its CUDA kernels (a GPU may still be absent)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("flash_attn_ext::softmax", "CUDA")
