"""fp64 references, the error metric, device parameters and the output poison shared by the tests.

The references compute in float64 from the *same* (already rounded) inputs the op sees, so the difference
measures the op's arithmetic alone. Their results are ground truth for the bounds in the tests; torch's own
kernels in the op's dtype serve as the baseline that says how much error is reasonable.
"""
import math
import os
import subprocess
import sys
from typing import Optional, Tuple

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# Every device-parametrized test runs on the CPU, and on CUDA when a GPU is present (skipped otherwise).
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda,
                                              pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU")])]
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU")


def run_in_fresh_python(code: str, timeout: Optional[float] = 300, **env_vars) -> subprocess.CompletedProcess:
    """Runs `code` in a child interpreter with this process's import path, the tests folder as its working
    directory and `env_vars` added to the environment: for what a process reads once (FAE_SOFTMAX_CONFIG,
    FLASH_ATTN_EXT_CPU_ISA) and failures that show only in a fresh process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env_vars)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.abspath(__file__)))


def run_checked(code: str, **env_vars) -> subprocess.CompletedProcess:
    """Runs `code` (a check that prints "checked" when done) in a fresh child with `env_vars` added, for what a process
    reads once (FAE_SOFTMAX_CONFIG, FAE_SOFTMAX_LOG_PLAN), and asserts that it got there; returns the child."""
    child = run_in_fresh_python(code, timeout=None, **env_vars)
    assert child.returncode == 0 and "checked" in child.stdout, child.stderr[-3000:]
    return child


def run_cpu_isa_check(code: str, isa: str) -> None:
    """Runs `code` (which prints "checked" when done) in a child pinned with FLASH_ATTN_EXT_CPU_ISA=isa: the CPU
    kernels' loops are compiled per instruction set and picked at run time (csrc/common/cpu_isa.h), so the
    variants other than this CPU's widest never run in the test process. Skips when this CPU or build lacks
    `isa`."""
    child = run_in_fresh_python(code, timeout=None, FLASH_ATTN_EXT_CPU_ISA=isa)
    if "lacks" in child.stderr or "has no x86 variants" in child.stderr:
        pytest.skip(f"this CPU or build has no {isa} variant")
    assert child.returncode == 0 and "checked" in child.stdout, child.stderr[-3000:]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; the absolute norm when ``ref`` is all zeros (or empty)."""
    diff = (out.double() - ref.double()).norm().item()
    denom = ref.double().norm().item()
    return diff / denom if denom > 0 else diff


def poison(device, *output_nbytes: int) -> None:
    """Make the CUDA caching allocator hand NaN bytes to the op's next allocations, so output elements a kernel
    never writes read as NaN (all-ones bytes are NaN in float16, bfloat16, float32 and float64 alike).

    The ops allocate their outputs, so the only way to poison them is through the allocator, whose choice is
    deterministic: the smallest free block that fits, split at its start. Blocks of exactly each size in
    `output_nbytes` (three of each: a contiguous copy of the input or a workspace of the same size may come
    first) are taken and filled here, then freed, so the op's allocations of those sizes land on the same
    bytes. Checked: a fresh allocation of the first size must read all NaN. (Large generic blocks alone did not
    reach the outputs: the allocator gave them the input's freed temporaries.) A no-op on the CPU, whose
    allocator gives fresh pages back to the OS and back from it.
    """
    if torch.device(device).type != "cuda":
        return
    sizes = [n for n in output_nbytes if n > 0]
    held = [torch.full((n,), 255, dtype=torch.uint8, device=device) for n in sizes for _ in range(3)]
    held += [torch.full((16 << 20,), 255, dtype=torch.uint8, device=device)] + \
            [torch.full((1 << 20,), 255, dtype=torch.uint8, device=device) for _ in range(2)]
    del held
    if sizes:
        probe = torch.empty(sizes[0], dtype=torch.uint8, device=device)
        assert bool((probe == 255).all()), "poison: the allocator did not hand back the poisoned block"
        del probe


# --- softmax family -----------------------------------------------------------------------------------------

def softmax_ref(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.softmax(x.double(), dim)


def log_softmax_ref(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.log_softmax(x.double(), dim)


def logsumexp_ref(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    return torch.logsumexp(x.double(), dim, keepdim)


# --- attention ----------------------------------------------------------------------------------------------

def causal_mask(sq: int, sk: int, device) -> torch.Tensor:
    """Bottom-right aligned causal mask, True where query i may see key j (j <= i + sk - sq)."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (sk - sq)


def attention_ref(q, k, v, causal: bool = False, scale: Optional[float] = None
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    """fp64 ``softmax(scale * q @ k^T [masked]) @ v`` and its natural-log lse, by explicit matmul.

    GQA: query head h reads kv head h // (Hq // Hk). Rows that see no key get out 0 and lse -inf.
    """
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, Hq, Sq, Sk)
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(nan=0.0)  # rows with lse -inf: all-zero weights
    return torch.matmul(p, v), lse


def sdpa_baseline(q, k, v, causal: bool = False, scale: Optional[float] = None, math_only: bool = False
                  ) -> torch.Tensor:
    """torch's scaled_dot_product_attention in q's dtype on q's device: the error baseline.

    GQA by repeating k/v heads. Causal with Sq <= Sk uses torch's lower-right causal bias; with Sq > Sk an
    explicit boolean mask (rows that see no key are NaN or garbage there; callers exclude them). math_only:
    SDPA's math backend alone (the fused CUDA kernel it picked returned NaN for a negative scale in fp16: H100,
    torch 2.11).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    if math_only:
        with sdpa_kernel([SDPBackend.MATH]):
            return sdpa_baseline(q, k, v, causal, scale)

    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    sq, sk = q.shape[2], k.shape[2]
    mask = None
    if causal:
        mask = causal_lower_right(sq, sk) if sq <= sk else causal_mask(sq, sk, q.device)
    if q.shape[0] == 0:
        return torch.empty_like(q)
    # batches of at most ~16K (batch, head) pairs: some SDPA backends put B * H on a 65535-limited grid axis
    step = max(1, 16384 // max(1, q.shape[1]))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return torch.cat([sdpa(q[b:b + step], k[b:b + step], v[b:b + step], attn_mask=mask, scale=scale)
                      for b in range(0, q.shape[0], step)])


def merge_ref(outs, lses) -> Tuple[torch.Tensor, torch.Tensor]:
    """fp64 merge of N partial results: blocks with lse -inf (and whatever their out holds) are ignored; a row
    with no finite lse gets out 0 and lse -inf."""
    outs, lses = outs.double(), lses.double()
    live = lses != -math.inf
    lse = torch.logsumexp(lses, dim=0)  # -inf where every block is -inf
    w = torch.where(live, torch.exp(lses - lse.masked_fill(lse == -math.inf, 0.0)), 0.0)
    out = (w[..., None] * torch.where(live[..., None], outs, 0.0)).sum(0)
    return out, lse


# torch.compile options for the compile tests: inductor's FX graph cache keys on the graph, not on the fake
# kernels, so a cached artifact could hide a fake kernel that no longer matches the real one.
NO_INDUCTOR_CACHE = {"fx_graph_cache": False}
