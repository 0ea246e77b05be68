"""Thin functional wrappers over ``torch.ops.flash_attn_ext`` plus fake kernels.

The op schemas live in csrc/registration.cpp, the autograd guard (backward raises) in csrc/autograd_guard.cpp,
the kernels in csrc/. Nothing here computes a result.
"""
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

_ops = torch.ops.flash_attn_ext


def softmax(x: Tensor, dim: int = -1, *, algorithm: str = "auto") -> Tensor:
    """Softmax of ``x`` along ``dim``, as ``torch.softmax(x, dim)``.

    ``algorithm``: ``"safe"`` (3 passes: max, sum of exp(x - max), normalize), ``"online"`` (2 passes:
    running max and rescaled running sum, then normalize) or ``"auto"`` (the fastest path for the shape).
    Accumulates in float32 (float64 for float64 input); the output has ``x``'s dtype and is contiguous.
    """
    return _ops.softmax.default(x, dim, algorithm)


def log_softmax(x: Tensor, dim: int = -1, *, algorithm: str = "auto") -> Tensor:
    """Log-softmax of ``x`` along ``dim``, as ``torch.log_softmax(x, dim)``; see :func:`softmax`."""
    return _ops.log_softmax.default(x, dim, algorithm)


def logsumexp(x: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x), dim))`` computed stably in one pass, as ``torch.logsumexp(x, dim, keepdim)``."""
    return _ops.logsumexp.default(x, dim, keepdim)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: Optional[float] = None,
              return_lse: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Exact attention ``softmax(scale * q @ k^T [masked]) @ v`` without materializing the scores.

    q: (B, Hq, Sq, D); k, v: (B, Hk, Sk, D) with ``Hq % Hk == 0`` (query head h reads key/value head
    ``h // (Hq // Hk)``); any strides with unit stride on D. D is a multiple of 8 up to 256.
    ``scale`` defaults to ``1 / sqrt(D)``. ``causal=True`` is bottom-right aligned: query i sees keys
    ``j <= i + Sk - Sq``; a query that sees no key gets output 0 and lse ``-inf``.
    Returns ``out`` (B, Hq, Sq, D) in q's dtype, and with ``return_lse=True`` also
    ``lse = logsumexp(scale * q @ k^T, masked, over keys)``, (B, Hq, Sq) float32, natural log.
    """
    out, lse = _ops.attention.default(q, k, v, causal, scale)
    return (out, lse) if return_lse else out


def merge_attention(outs: Union[Tensor, Sequence[Tensor]], lses: Union[Tensor, Sequence[Tensor]]
                    ) -> Tuple[Tensor, Tensor]:
    """Combine attention results over N disjoint key blocks into the attention over their union.

    outs: (N, B, H, S, D) (or a sequence of N (B, H, S, D) tensors), lses: (N, B, H, S) float32 (or a
    sequence). Returns ``(out, lse)``: ``lse = logsumexp_i(lses[i])`` and
    ``out = sum_i exp(lses[i] - lse) * outs[i]``. Blocks with lse ``-inf`` contribute nothing; a row with
    every lse ``-inf`` gets out 0 and lse ``-inf``.
    """
    if not isinstance(outs, Tensor):
        outs = torch.stack(list(outs))
    if not isinstance(lses, Tensor):
        lses = torch.stack(list(lses))
    return _ops.merge_attention.default(outs, lses)


# --- fake kernels: shapes, dtypes and strides exactly as the real kernels allocate them ---------------

@torch.library.register_fake("flash_attn_ext::softmax")
def _softmax_fake(x, dim, algorithm):
    return x.new_empty(x.shape)


@torch.library.register_fake("flash_attn_ext::log_softmax")
def _log_softmax_fake(x, dim, algorithm):
    return x.new_empty(x.shape)


@torch.library.register_fake("flash_attn_ext::logsumexp")
def _logsumexp_fake(x, dim, keepdim):
    shape = list(x.shape)
    if x.dim() > 0:
        d = dim + x.dim() if dim < 0 else dim
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
    return x.new_empty(shape)


@torch.library.register_fake("flash_attn_ext::attention")
def _attention_fake(q, k, v, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.register_fake("flash_attn_ext::merge_attention")
def _merge_attention_fake(outs, lses):
    return outs.new_empty(outs.shape[1:]), lses.new_empty(lses.shape[1:])
