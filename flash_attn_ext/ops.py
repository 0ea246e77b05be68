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
    return _ops.merge_attention.default(_stack_parts("outs", outs), _stack_parts("lses", lses))


def _stack_parts(name: str, parts: Union[Tensor, Sequence[Tensor]]) -> Tensor:
    """A sequence of per-block tensors as one (N, ...) tensor. Checked here because torch.stack would promote
    mixed dtypes and name neither argument nor block."""
    if isinstance(parts, Tensor):
        return parts
    parts = list(parts)
    if not parts:
        raise RuntimeError(f"flash_attn_ext.merge_attention: {name} must hold at least one partial result (N >= 1)")
    first = parts[0]
    for i, part in enumerate(parts):
        if not isinstance(part, Tensor):
            raise TypeError(f"flash_attn_ext.merge_attention: {name}[{i}] must be a Tensor, got {type(part).__name__}")
        if part.dtype != first.dtype:
            raise TypeError(f"flash_attn_ext.merge_attention: {name}[{i}] has dtype {part.dtype} but {name}[0] has "
                            f"{first.dtype}")
        if part.shape != first.shape or part.device != first.device:
            raise RuntimeError(f"flash_attn_ext.merge_attention: {name}[{i}] has shape {tuple(part.shape)} on "
                               f"{part.device} but {name}[0] has shape {tuple(first.shape)} on {first.device}")
    return torch.stack(parts)


# --- fake kernels: shapes, dtypes and strides exactly as the real kernels allocate them ---------------
# They also repeat the checks that decide those (dtype, dim) and the device checks: a call mixing meta and
# CPU tensors dispatches here, not to the real kernel, and would otherwise return uninitialized CPU memory.
# The messages are the real kernels' (csrc/common/checks.h, csrc/attention/attention_problem.cpp).

_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _wrap_softmax_dim(op: str, x: Tensor, dim: int) -> int:
    if x.dtype not in _FLOATING:
        raise TypeError(f"flash_attn_ext.{op}: x must be float32, float64, float16 or bfloat16, got {x.dtype}")
    rank = max(x.dim(), 1)  # a 0-d tensor has one implicit dim, as in torch
    if not -rank <= dim < rank:
        raise IndexError(f"flash_attn_ext.{op}: dim={dim} is out of range for a tensor of rank {x.dim()} "
                         f"(expected a value in [{-rank}, {rank - 1}])")
    return dim % rank


def _check_attention_dtype(op: str, name: str, t: Tensor) -> None:
    if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"flash_attn_ext.{op}: {name} must be float16, bfloat16 or float32, got {t.dtype}")


def _check_same_device(op: str, ref_name: str, ref: Tensor, **others: Tensor) -> None:
    for name, t in others.items():
        if t.device != ref.device:
            raise RuntimeError(f"flash_attn_ext.{op}: {name} is on {t.device} but {ref_name} is on {ref.device}")


@torch.library.register_fake("flash_attn_ext::softmax")
def _softmax_fake(x, dim, algorithm):
    _wrap_softmax_dim("softmax", x, dim)
    return x.new_empty(x.shape)


@torch.library.register_fake("flash_attn_ext::log_softmax")
def _log_softmax_fake(x, dim, algorithm):
    _wrap_softmax_dim("log_softmax", x, dim)
    return x.new_empty(x.shape)


@torch.library.register_fake("flash_attn_ext::logsumexp")
def _logsumexp_fake(x, dim, keepdim):
    d = _wrap_softmax_dim("logsumexp", x, dim)
    shape = list(x.shape)
    if x.dim() > 0:
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
    return x.new_empty(shape)


@torch.library.register_fake("flash_attn_ext::attention")
def _attention_fake(q, k, v, causal, scale):
    _check_attention_dtype("attention", "q", q)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"flash_attn_ext.attention: {name} must have q's dtype {q.dtype}, got {t.dtype}")
    _check_same_device("attention", "q", q, k=k, v=v)
    return _empty_like_real(q), q.new_empty(q.shape[:3], dtype=torch.float32)


def _empty_like_real(t: Tensor) -> Tensor:
    """torch.empty_like as the C++ at::empty_like lays it out: a non-overlapping and dense tensor's strides
    exactly, those of size-1 dims included; otherwise the same rule (dense strides in t's stride order).
    Why: under FakeTensorMode empty_like recomputes the strides of size-1 dims, so the fake output of a
    decode step (q of B = 1, Sq = 1 as a (B, S, H, D) view) had other strides than the real one. Inductor's
    stride asserts skip size-1 dims, but a fake should match its kernel exactly (test_fake_kernel_matches_real)."""
    if torch._prims_common.is_non_overlapping_and_dense_or_false(t):  # False when symbolic sizes leave it open
        return t.new_empty_strided(t.shape, t.stride())
    return torch.empty_like(t)


@torch.library.register_fake("flash_attn_ext::merge_attention")
def _merge_attention_fake(outs, lses):
    _check_attention_dtype("merge_attention", "outs", outs)
    if lses.dtype != torch.float32:
        raise TypeError(f"flash_attn_ext.merge_attention: lses must be float32, got {lses.dtype}")
    _check_same_device("merge_attention", "outs", outs, lses=lses)
    return outs.new_empty(outs.shape[1:]), lses.new_empty(lses.shape[1:])


@torch.library.register_fake("flash_attn_ext::_forward_only_grad")
def _forward_only_grad_fake(grad, size, dtype, op):
    return grad.new_empty(size, dtype=dtype)
