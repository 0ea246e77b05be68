"""attention and merge_attention: accuracy against fp64 and SDPA over head dims, lengths, GQA and layouts;
rows that see no key; merge of key blocks; argument errors; autograd guard; opcheck; torch.compile of a
transformer block; and (CUDA) graphs, streams, huge grids, split-KV and very long keys."""
import math

import pytest
import torch

import flash_attn_ext as fae
from reference import (DEVICES, HAS_CUDA, NO_INDUCTOR_CACHE, attention_ref, merge_ref, poison, rel_err,
                       requires_cuda, run_cpu_isa_check, sdpa_baseline)

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
HEAD_DIMS = [8, 16, 40, 64, 72, 96, 128, 200, 256]
LAYOUTS = ["bhsd", "bshd", "packed"]

# On compute capability 9.0 (with a build that has sm_90a code) fp16/bf16 run on the wgmma kernel and the
# mma.sync kernel is the fallback that every other GPU runs: the accuracy grids run CUDA twice there,
# "cuda" as dispatched and "cuda-sm80" with FLASH_ATTN_EXT_ATTENTION_KERNEL=sm80 forcing the fallback.
IS_SM90 = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
KERNEL_DEVICES = DEVICES + [pytest.param("cuda-sm80", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not IS_SM90, reason="only compute capability 9.0 has a second kernel")])]


@pytest.fixture(autouse=True)
def _forced_kernel(request, monkeypatch):
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("device") == "cuda-sm80":
        monkeypatch.setenv("FLASH_ATTN_EXT_ATTENTION_KERNEL", "sm80")

# Bounds. out: fp32 rel err vs fp64 <= FP32_BOUND; fp16/bf16 rel err <= 2 x SDPA's own (same dtype, same
# device) + LOW_PRECISION_EPS. lse: computed in fp32 from the rounded inputs whatever their dtype, so the
# absolute error vs the fp64 lse of those same inputs is an fp32 rounding matter for every dtype.
FP32_BOUND = 1e-5
LOW_PRECISION_EPS = 1e-4
LSE_ATOL = 1e-4


def make_qkv(b, hq, hk, sq, sk, d, dtype, device, layout="bhsd"):
    """q (b, hq, sq, d), k/v (b, hk, sk, d) in the given memory layout:
    "bhsd" contiguous; "bshd" (b, s, h, d) memory passed as .transpose(1, 2); "packed" slices of one packed
    (b, s, hq + 2 hk, d) qkv tensor (when sq == sk; otherwise q alone and a packed (b, sk, 2 hk, d) kv)."""
    device = "cuda" if device == "cuda-sm80" else device

    def randn(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    if layout == "bhsd":
        return randn(b, hq, sq, d), randn(b, hk, sk, d), randn(b, hk, sk, d)
    if layout == "bshd":
        return (randn(b, sq, hq, d).transpose(1, 2), randn(b, sk, hk, d).transpose(1, 2),
                randn(b, sk, hk, d).transpose(1, 2))
    if layout == "packed":
        if sq == sk:
            qkv = randn(b, sq, hq + 2 * hk, d)
            q, kv = qkv[:, :, :hq], qkv[:, :, hq:]
        else:
            q, kv = randn(b, sq, hq + 1, d)[:, :, 1:], randn(b, sk, 2 * hk, d)
        return q.transpose(1, 2), kv[:, :, :hk].transpose(1, 2), kv[:, :, hk:].transpose(1, 2)
    raise ValueError(layout)


def check_attention(q, k, v, causal=False, scale=None, math_baseline=False):
    """Runs fae.attention once (on a poisoned allocator) and checks it with check_result. Returns (out, lse)."""
    poison(q.device, q.numel() * q.element_size(), q.shape[:3].numel() * 4)
    out, lse = fae.attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    check_result(out, lse, q, k, v, causal, scale, math_baseline)
    return out, lse


def check_result(out, lse, q, k, v, causal=False, scale=None, math_baseline=False):
    """Checks out and lse of attention(q, k, v) against the fp64 reference (bounds above); rows that see no
    key must be exactly out 0 and lse -inf. math_baseline: the low-precision bound from SDPA's math backend."""
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32 and lse.is_contiguous()
    assert not out.isnan().any(), "NaN in out"
    assert not lse.isnan().any(), "NaN in lse"

    ref_out, ref_lse = attention_ref(q, k, v, causal, scale)
    seen = torch.isfinite(ref_lse)  # rows that see at least one key
    assert (out[~seen] == 0).all(), "a row that sees no key must be 0"
    assert (lse[~seen] == -math.inf).all(), "a row that sees no key must have lse -inf"
    if not seen.any():
        return

    err = rel_err(out[seen], ref_out[seen])
    if q.dtype == torch.float32:
        bound = FP32_BOUND
    else:
        baseline = sdpa_baseline(q, k, v, causal, scale, math_baseline)  # NaN or garbage on unseen rows: excluded
        bound = 2 * rel_err(baseline[seen], ref_out[seen]) + LOW_PRECISION_EPS
    assert err <= bound, f"out: rel err {err:.3e} > bound {bound:.3e}"
    lse_err = (lse[seen].double() - ref_lse[seen]).abs().max().item()
    assert lse_err <= LSE_ATOL, f"lse: abs err {lse_err:.3e} > {LSE_ATOL:.0e}"


def _too_big_for_cpu(device, cpu_ok):
    """CUDA-only sizes: the CPU suite keeps to cases that are cheap on two cores."""
    return device == "cpu" and not cpu_ok


# --- accuracy grids -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlens", [(97, 97), (7, 200)], ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_head_dims(device, dtype, d, seqlens, causal):
    sq, sk = seqlens
    check_attention(*make_qkv(2, 4, 2, sq, sk, d, dtype, device), causal=causal)


# (sq, sk, cpu_ok): odd lengths, sq != sk both ways (sq > sk causal leaves rows with no visible key)
SEQLENS = [
    (1, 1, True), (1, 7, True), (7, 1, True), (7, 7, True), (1, 97, True), (97, 1, True), (7, 97, True),
    (97, 7, True), (97, 97, True), (1, 1025, True), (97, 1025, True), (1025, 97, True), (1025, 1025, True),
    (1, 4097, True), (7, 4097, True), (4097, 7, True),
    (4097, 4097, False), (1025, 4097, False), (4097, 1025, False), (2048, 2048, False), (1, 32768, False),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk, cpu_ok", SEQLENS, ids=[f"sq{s[0]}-sk{s[1]}" for s in SEQLENS])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_seqlens(device, dtype, sq, sk, cpu_ok, causal):
    if _too_big_for_cpu(device, cpu_ok):
        pytest.skip("CUDA-only size")
    check_attention(*make_qkv(1, 2, 1, sq, sk, 64, dtype, device), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hk", [8, 4, 2, 1], ids=lambda h: f"group{8 // h}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_gqa(device, dtype, hk, causal):
    # Hq = 8: group sizes 1 (MHA), 2, 4, 8 (MQA)
    check_attention(*make_qkv(2, 8, hk, 37, 97, 64, dtype, device), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlens", [(97, 97), (7, 130)], ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_layouts(device, dtype, layout, seqlens, causal):
    sq, sk = seqlens
    q, k, v = make_qkv(2, 4, 2, sq, sk, 64, dtype, device, layout)
    if layout != "bhsd":
        assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    check_attention(q, k, v, causal=causal)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_broadcast_kv_heads(device, dtype):
    # K/V heads broadcast with stride 0 (expand): no copy is made, and the Hopper kernel's bulk tensor copies
    # cannot walk a zero stride, so this takes the fallback path there
    q, k, v = make_qkv(2, 8, 1, 77, 200, 64, dtype, device)
    k, v = k.expand(2, 4, 200, 64), v.expand(2, 4, 200, 64)
    assert k.stride(1) == 0
    check_attention(q, k, v, causal=True)


@pytest.mark.parametrize("scale", [0.05, 0.3, 1.0, 2.5])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_scale(device, dtype, scale):
    q, k, v = make_qkv(1, 4, 4, 33, 97, 64, dtype, device)
    check_attention(q, k, v, causal=True, scale=scale)


@pytest.mark.parametrize("scale", [-1.3, -0.2, 0.0, 0.7])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_scale_of_any_sign(device, dtype, causal, d, scale):
    # A scale may be any finite float, zero and negative included (the max of the scaled scores is then the
    # scaled min). 200 queries x 600 keys give the Hopper kernel's head-dim-128 tile both unmasked 128-key
    # tiles (max over the raw scores, one FFMA per exponent) and masked ones (scaled first). The bound comes
    # from SDPA's math backend: the fused CUDA kernel SDPA picked returned NaN for a negative scale (fp16, H100).
    q, k, v = make_qkv(1, 2, 2, 200, 600, d, dtype, device)
    check_attention(q, k, v, causal=causal, scale=scale, math_baseline=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128, 160, 192, 256])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_running_max_rising_across_key_tiles(device, dtype, d, causal):
    # Scores that climb in steps over the keys, so a row's running max rises again and again, by more than the
    # Hopper kernel's lag of 2^8 (it then rescales O) and by less (it keeps its max, and P reaches up to 2^8),
    # on boundaries that fall anywhere in a key tile. Even query rows climb, odd rows see the steps reversed
    # (their max is in the first tile), so the rows of one warp disagree on whether to rescale. Head dims 160 and
    # 192 run 80-key tiles on the Hopper kernel (160 zero-padded to 192), 64 the form that always rescales.
    dev = "cuda" if device == "cuda-sm80" else device
    sq, sk = 150, 1025
    steps = torch.tensor([6.5, 1.5, 4.0, 0.3, 9.0], device=dev)  # natural-log units; lag 8 log2 = 5.5
    level = torch.cumsum(steps.repeat(sk // 97 // 5 + 1)[: sk // 97 + 1], 0)[torch.arange(sk, device=dev) // 97]
    q = torch.randn(1, 2, sq, d, device=dev) * 0.1
    k = torch.randn(1, 2, sk, d, device=dev) * 0.1
    q[..., 0] = torch.where(torch.arange(sq, device=dev) % 2 == 0, 1.0, -1.0)
    k[..., 0] = level - level[-1] / 2  # scores from about -level/2 to +level/2 (scale 1)
    v = torch.randn(1, 2, sk, d, device=dev)
    check_attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal, scale=1.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_plus_inf_score_makes_its_row_nan(device, dtype):
    # README: a score of +inf makes that row's output and lse NaN, and no other row changes.
    q, k, v = make_qkv(1, 2, 2, 33, 97, 64, dtype, device)
    k[0, 1, :, 0] = 1.0
    q_inf = q.clone()
    q_inf[0, 1, 5] = 0.0
    q_inf[0, 1, 5, 0] = float("inf")  # every score of row 5 of head 1 is +inf
    out, lse = fae.attention(q_inf, k, v, return_lse=True)
    assert out[0, 1, 5].isnan().all() and lse[0, 1, 5].isnan()
    ref_out, ref_lse = fae.attention(q, k, v, return_lse=True)
    keep = torch.ones(q.shape[:3], dtype=torch.bool, device=q.device)
    keep[0, 1, 5] = False
    assert torch.equal(out[keep], ref_out[keep]) and torch.equal(lse[keep], ref_lse[keep])


@pytest.mark.parametrize("d", [16, 72, 256])
@pytest.mark.parametrize("device", DEVICES)
def test_default_scale_is_rsqrt_head_dim(device, d):
    q, k, v = make_qkv(1, 2, 2, 7, 97, d, torch.float32, device)
    torch.testing.assert_close(fae.attention(q, k, v), fae.attention(q, k, v, scale=1.0 / math.sqrt(d)),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sk, cpu_ok", [(4097, True), (32768, False), (65537, False)], ids=lambda x: str(x))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_decode(device, dtype, sk, cpu_ok, causal):
    # one query per sequence (Sq = 1) over a long cache, GQA 4
    if _too_big_for_cpu(device, cpu_ok):
        pytest.skip("CUDA-only size")
    check_attention(*make_qkv(2, 8, 2, 1, sk, 128, dtype, device), causal=causal)


@pytest.mark.parametrize("shape", [(2, 4, 4, 512, 512, 128), (2, 8, 2, 1, 32768, 128)], ids=["prefill", "decode"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("device", [d for d in KERNEL_DEVICES if d != "cpu"])
def test_chained_calls_wait_for_the_previous_kernel(device, dtype, shape):
    # On sm_90 our kernels launch early, overlapping the previous kernel's tail (common/kernel_launch.h), and
    # must wait for it before touching memory; the split-KV decode chains its merge kernel the same way. The
    # second call takes the first one's output as q at once, on NaN-poisoned memory: a kernel that read q before
    # the first call wrote it would read NaN or stale values.
    q, k, v = make_qkv(*shape, dtype, device)
    poison(q.device, q.numel() * q.element_size(), q.shape[:3].numel() * 4)
    out1, lse1 = fae.attention(q, k, v, return_lse=True)
    out2, lse2 = fae.attention(out1, k, v, return_lse=True)
    check_result(out1, lse1, q, k, v)
    check_result(out2, lse2, out1, k, v)


CPU_ISA_CHECK = """
import test_attention as t
import torch
for dtype in (torch.float32, torch.bfloat16):
    for d, sq, sk, causal in ((8, 7, 1, False), (72, 65, 130, True), (200, 3, 97, False), (256, 97, 40, True)):
        t.check_attention(*t.make_qkv(1, 4, 2, sq, sk, d, dtype, "cpu"), causal=causal)
print("checked")
"""


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_cpu_isa_variants(isa):
    # The CPU tile math of each instruction set's variant, on every head-dim class and the causal mask.
    run_cpu_isa_check(CPU_ISA_CHECK, isa)


# --- degenerate sizes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sq, sk", [(97, 7), (1025, 1), (7, 3), (4, 0), (1, 0)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_rows_without_keys(device, dtype, sq, sk):
    # causal with sq > sk: query i < sq - sk sees no key; sk = 0: no row sees a key (causal or not)
    for causal in (True, False):
        out, lse = check_attention(*make_qkv(1, 2, 1, sq, sk, 64, dtype, device), causal=causal)
        blind = sq - sk if causal else (sq if sk == 0 else 0)
        assert (lse[:, :, :blind] == -math.inf).all() and (lse[:, :, blind:] > -math.inf).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_nan_inputs_propagate(device, dtype):
    # NaN in one query poisons exactly that row (out and lse); NaN in key 5 poisons exactly the causal rows that
    # see it (i >= 5). A NaN must never be mistaken for "no key" (out 0, lse -inf).
    q, k, v = make_qkv(1, 2, 1, 5, 100, 64, dtype, device)
    q[0, 1, 3, 7] = math.nan
    out, lse = fae.attention(q, k, v, return_lse=True)
    assert out[0, 1, 3].isnan().all() and lse[0, 1, 3].isnan()
    rest = torch.ones_like(lse, dtype=torch.bool)
    rest[0, 1, 3] = False
    assert torch.isfinite(out[rest]).all() and torch.isfinite(lse[rest]).all()
    q, k, v = make_qkv(1, 2, 1, 8, 8, 64, dtype, device)
    k[0, 0, 5, 0] = math.nan
    out, lse = fae.attention(q, k, v, causal=True, return_lse=True)
    assert out[0, :, 5:].isnan().all() and lse[0, :, 5:].isnan().all()
    assert torch.isfinite(out[0, :, :5]).all() and torch.isfinite(lse[0, :, :5]).all()


@pytest.mark.parametrize("shape", [(0, 2, 7, 64), (2, 2, 0, 64), (2, 0, 7, 64)], ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_empty(device, shape):
    b, h, s, d = shape
    q = torch.randn(b, h, s, d, device=device)
    k = torch.randn(b, 1, 5, d, device=device)
    out, lse = fae.attention(q, k, k.clone(), return_lse=True)
    assert out.shape == q.shape and lse.shape == q.shape[:3] and lse.dtype == torch.float32


# --- merge_attention ------------------------------------------------------------------------------------------

# a merged out went through one more rounding to dtype than the full call's: allow ~2 ulps
MERGED_VS_FULL_TOL = {torch.float16: dict(rtol=2e-3, atol=1e-4), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-3),
                      torch.float32: dict(rtol=1e-5, atol=1e-6)}
SPLITS = {2: [0, 300, 1025], 3: [0, 1, 600, 1025], 4: [0, 100, 101, 700, 1025]}


@pytest.mark.parametrize("form", ["tensor", "sequence", "strided"])
@pytest.mark.parametrize("blocks", sorted(SPLITS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_merge_matches_full(device, dtype, blocks, form):
    q, k, v = make_qkv(2, 4, 2, 37, 1025, 64, dtype, device)
    bounds = SPLITS[blocks]
    parts = [fae.attention(q, k[:, :, a:b], v[:, :, a:b], return_lse=True) for a, b in zip(bounds, bounds[1:])]
    outs, lses = [o for o, _ in parts], [l for _, l in parts]
    if form == "tensor":
        outs, lses = torch.stack(outs), torch.stack(lses)
    elif form == "strided":  # (N, B, H, S, D) views of (B, N, H, S, D) / (B, N, H, S) memory
        outs, lses = torch.stack(outs, dim=1).transpose(0, 1), torch.stack(lses, dim=1).transpose(0, 1)
        assert not outs.is_contiguous() and not lses.is_contiguous()
    poison(device, q.numel() * q.element_size(), q.shape[:3].numel() * 4)
    out, lse = fae.merge_attention(outs, lses)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == q.shape[:3] and lse.dtype == torch.float32

    ref_out, ref_lse = attention_ref(q, k, v)
    err = rel_err(out, ref_out)
    if dtype == torch.float32:
        bound = FP32_BOUND
    else:
        # each block's out was rounded to dtype once before the merge rounds again
        bound = 3 * rel_err(sdpa_baseline(q, k, v), ref_out) + LOW_PRECISION_EPS
    assert err <= bound, f"merged out: rel err {err:.3e} > bound {bound:.3e}"
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=LSE_ATOL)  # -inf rows compare equal
    full_out, full_lse = fae.attention(q, k, v, return_lse=True)
    torch.testing.assert_close(lse, full_lse, rtol=0, atol=LSE_ATOL)
    torch.testing.assert_close(out, full_out, **MERGED_VS_FULL_TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_merge_ignores_blocks_with_lse_neg_inf(device, dtype):
    n, b, h, s, d = 3, 2, 3, 33, 40
    outs = torch.randn(n, b, h, s, d, device=device).to(dtype)
    lses = torch.randn(n, b, h, s, device=device) * 4
    lses[1, :, :, ::3] = -math.inf          # rows of block 1 that saw no key: their out is garbage
    outs[1, :, :, ::3] = math.nan
    lses[0, 0, 1, 5] = -math.inf            # two of three blocks empty
    outs[0, 0, 1, 5] = math.inf
    lses[:, 1, 2, 7:9] = -math.inf          # every block empty: out 0, lse -inf
    outs[:, 1, 2, 7:9] = math.nan
    poison(device, outs[0].numel() * outs.element_size(), lses[0].numel() * 4)
    out, lse = fae.merge_attention(outs, lses)
    ref_out, ref_lse = merge_ref(outs, lses)
    assert not out.isnan().any() and not lse.isnan().any()
    assert (out[1, 2, 7:9] == 0).all() and (lse[1, 2, 7:9] == -math.inf).all()
    assert torch.equal(lse == -math.inf, ref_lse == -math.inf)
    torch.testing.assert_close(out, ref_out.to(dtype))
    torch.testing.assert_close(lse, ref_lse.float(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_merge_single_block_and_empty_key_block(device, dtype):
    q, k, v = make_qkv(1, 4, 4, 9, 50, 64, dtype, device)
    full_out, full_lse = fae.attention(q, k, v, return_lse=True)
    out, lse = fae.merge_attention([full_out], [full_lse])
    torch.testing.assert_close(out, full_out)
    torch.testing.assert_close(lse, full_lse)
    # a key block of length 0 yields out 0, lse -inf: merging it in changes nothing
    empty_out, empty_lse = fae.attention(q, k[:, :, :0], v[:, :, :0], return_lse=True)
    out, lse = fae.merge_attention([empty_out, full_out, empty_out], [empty_lse, full_lse, empty_lse])
    torch.testing.assert_close(out, full_out)
    torch.testing.assert_close(lse, full_lse)


# --- argument errors ----------------------------------------------------------------------------------------

def _qkv(device="cpu", dtype=torch.float32, b=2, hq=4, hk=2, sq=5, sk=6, d=64):
    return make_qkv(b, hq, hk, sq, sk, d, dtype, device)


def _replace(qkv, **changes):
    q, k, v = qkv
    return changes.get("q", q), changes.get("k", k), changes.get("v", v)


ATTENTION_ERRORS = [
    ("q_rank", lambda dev: _replace(_qkv(dev), q=torch.randn(4, 5, 64, device=dev)), RuntimeError,
     r"q must have rank 4"),
    ("k_rank", lambda dev: _replace(_qkv(dev), k=torch.randn(1, 2, 2, 6, 64, device=dev)), RuntimeError,
     r"k must have rank 4"),
    ("q_dtype", lambda dev: _qkv(dev, torch.float64), TypeError, r"q must be float16, bfloat16 or float32"),
    ("k_dtype", lambda dev: _replace(_qkv(dev), k=_qkv(dev)[1].half()), TypeError, r"k must have q's dtype"),
    ("v_dtype", lambda dev: _replace(_qkv(dev), v=_qkv(dev)[2].bfloat16()), TypeError, r"v must have q's dtype"),
    ("head_dim_mismatch", lambda dev: _replace(_qkv(dev), k=torch.randn(2, 2, 6, 32, device=dev)), RuntimeError,
     r"k has head dim 32 but q has head dim 64"),
    ("v_head_dim", lambda dev: _replace(_qkv(dev), v=torch.randn(2, 2, 6, 128, device=dev)), RuntimeError,
     r"v has head dim 128 but q has head dim 64"),
    ("batch_mismatch", lambda dev: _replace(_qkv(dev), k=torch.randn(3, 2, 6, 64, device=dev)), RuntimeError,
     r"k has batch 3 but q has batch 2"),
    ("v_keys", lambda dev: _replace(_qkv(dev), v=torch.randn(2, 2, 7, 64, device=dev)), RuntimeError,
     r"v has 7 keys but k has 6"),
    ("v_heads", lambda dev: _replace(_qkv(dev), v=torch.randn(2, 1, 6, 64, device=dev)), RuntimeError,
     r"v has 1 heads but k has 2"),
    ("heads_not_multiple", lambda dev: _qkv(dev, hq=6, hk=4), RuntimeError,
     r"q's head count \(6\) must be a multiple of k's \(4\)"),
    ("head_dim_too_big", lambda dev: _qkv(dev, d=264), RuntimeError,
     r"head dim D must be a multiple of 8 in \[8, 256\], got 264"),
    ("head_dim_not_multiple_of_8", lambda dev: _qkv(dev, d=20), RuntimeError, r"head dim D must be a multiple of 8"),
    ("q_last_stride", lambda dev: _replace(_qkv(dev), q=torch.randn(2, 4, 5, 128, device=dev)[..., ::2]),
     RuntimeError, r"q must have unit stride on its last dim"),
    ("k_last_stride", lambda dev: _replace(_qkv(dev), k=torch.randn(2, 2, 64, 6, device=dev).transpose(-1, -2)),
     RuntimeError, r"k must have unit stride on its last dim"),
    ("v_last_stride", lambda dev: _replace(_qkv(dev), v=torch.randn(2, 2, 6, 128, device=dev)[..., 1::2]),
     RuntimeError, r"v must have unit stride on its last dim"),
]
BAD_SCALES = [float("nan"), float("inf"), -float("inf"), 1e39]  # 1e39: finite as a double, inf as a float


@pytest.mark.parametrize("scale", BAD_SCALES)
@pytest.mark.parametrize("device", DEVICES)
def test_attention_rejects_non_finite_scale(device, scale):
    with pytest.raises(RuntimeError, match=r"scale must be finite as a float32"):
        fae.attention(*_qkv(device), scale=scale)


@pytest.mark.parametrize("make, exc, match", [e[1:] for e in ATTENTION_ERRORS], ids=[e[0] for e in ATTENTION_ERRORS])
@pytest.mark.parametrize("device", DEVICES)
def test_attention_errors(device, make, exc, match):
    q, k, v = make(device)
    with pytest.raises(exc, match=match):
        fae.attention(q, k, v)


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("which", ["k", "v"])
def test_attention_device_mismatch(which):
    q, k, v = _qkv("cuda")
    args = _replace((q, k, v), **{which: (k if which == "k" else v).cpu()})
    with pytest.raises(RuntimeError, match=rf"{which} is on cpu but q is on cuda"):
        fae.attention(*args)


def test_fake_kernels_check_devices_and_dtypes():
    # A meta tensor among CPU tensors dispatches to the fake kernel, which must refuse the mix rather than
    # return uninitialized CPU memory; and a dtype the real kernel refuses must not trace to an output.
    q, k, v = _qkv()
    qm, km, vm = (t.to("meta") for t in (q, k, v))
    with pytest.raises(TypeError, match=r"flash_attn_ext\.attention: q must be float16, bfloat16 or float32"):
        fae.attention(qm.double(), km.double(), vm.double())
    with pytest.raises(TypeError, match=r"flash_attn_ext\.attention: v must have q's dtype"):
        fae.attention(qm, km, vm.half())
    with pytest.raises(TypeError, match=r"flash_attn_ext\.merge_attention: outs must be float16"):
        fae.merge_attention(torch.empty(2, 1, 3, 4, 8, device="meta", dtype=torch.int32),
                            torch.empty(2, 1, 3, 4, device="meta"))
    with pytest.raises(TypeError, match=r"flash_attn_ext\.merge_attention: lses must be float32"):
        fae.merge_attention(torch.empty(2, 1, 3, 4, 8, device="meta"),
                            torch.empty(2, 1, 3, 4, device="meta", dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.attention: k is on meta but q is on cpu"):
        fae.attention(q, k.to("meta"), v)
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.attention: v is on meta but q is on cpu"):
        fae.attention(q, k, v.to("meta"))
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.merge_attention: lses is on meta but outs is on cpu"):
        fae.merge_attention(torch.randn(2, 1, 3, 4, 8), torch.randn(2, 1, 3, 4, device="meta"))


MERGE_ERRORS = [
    ("outs_rank", lambda dev: (torch.randn(2, 3, 4, 8, device=dev), torch.randn(2, 3, 4, 5, device=dev)),
     RuntimeError, r"outs must have rank 5"),
    ("lses_rank", lambda dev: (torch.randn(2, 1, 3, 4, 8, device=dev), torch.randn(2, 3, 4, device=dev)),
     RuntimeError, r"lses must have rank 4"),
    ("lses_shape", lambda dev: (torch.randn(2, 1, 3, 4, 8, device=dev), torch.randn(2, 1, 3, 5, device=dev)),
     RuntimeError, r"lses must have shape outs.shape\[:4\]"),
    ("lses_splits", lambda dev: (torch.randn(2, 1, 3, 4, 8, device=dev), torch.randn(3, 1, 3, 4, device=dev)),
     RuntimeError, r"lses must have shape outs.shape\[:4\]"),
    ("lses_dtype", lambda dev: (torch.randn(2, 1, 3, 4, 8, device=dev), torch.randn(2, 1, 3, 4, device=dev).half()),
     TypeError, r"lses must be float32"),
    ("lses_float64", lambda dev: (torch.randn(2, 1, 3, 4, 8, device=dev), torch.randn(2, 1, 3, 4, device=dev).double()),
     TypeError, r"lses must be float32"),
    ("outs_dtype", lambda dev: (torch.randn(2, 1, 3, 4, 8, device=dev).double(), torch.randn(2, 1, 3, 4, device=dev)),
     TypeError, r"outs must be float16, bfloat16 or float32"),
    ("no_blocks", lambda dev: (torch.randn(0, 1, 3, 4, 8, device=dev), torch.randn(0, 1, 3, 4, device=dev)),
     RuntimeError, r"at least one partial result"),
    # Lists are checked before they are stacked: torch.stack would promote mixed dtypes silently.
    ("empty_lists", lambda dev: ([], []), RuntimeError, r"outs must hold at least one partial result"),
    ("list_dtypes", lambda dev: ([torch.randn(1, 3, 4, 8, device=dev), torch.randn(1, 3, 4, 8, device=dev).half()],
                                 [torch.randn(1, 3, 4, device=dev)] * 2), TypeError,
     r"outs\[1\] has dtype torch.float16 but outs\[0\] has torch.float32"),
    ("list_shapes", lambda dev: ([torch.randn(1, 3, 4, 8, device=dev)] * 2,
                                 [torch.randn(1, 3, 4, device=dev), torch.randn(1, 3, 5, device=dev)]), RuntimeError,
     r"lses\[1\] has shape \(1, 3, 5\)"),
    ("list_item", lambda dev: ([torch.randn(1, 3, 4, 8, device=dev), None], [torch.randn(1, 3, 4, device=dev)] * 2),
     TypeError, r"outs\[1\] must be a Tensor"),
]


@pytest.mark.parametrize("make, exc, match", [e[1:] for e in MERGE_ERRORS], ids=[e[0] for e in MERGE_ERRORS])
@pytest.mark.parametrize("device", DEVICES)
def test_merge_errors(device, make, exc, match):
    outs, lses = make(device)
    with pytest.raises(exc, match=match):
        fae.merge_attention(outs, lses)


@requires_cuda
@pytest.mark.cuda
def test_merge_device_mismatch():
    with pytest.raises(RuntimeError, match=r"lses is on cpu but outs is on cuda"):
        fae.merge_attention(torch.randn(2, 1, 3, 4, 8, device="cuda"), torch.randn(2, 1, 3, 4))


# --- autograd guard, opcheck, torch.compile -----------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_backward_raises(device):
    q, k, v = _qkv(device)
    q.requires_grad_(True)
    out, lse = fae.attention(q, k, v, return_lse=True)
    assert out.requires_grad
    torch.testing.assert_close(out, attention_ref(q.detach(), k, v)[0].float(), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.attention is forward-only"):
        out.sum().backward()
    outs = torch.randn(2, 2, 4, 5, 64, device=device, requires_grad=True)
    merged, _ = fae.merge_attention(outs, torch.randn(2, 2, 4, 5, device=device))
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.merge_attention is forward-only"):
        merged.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_forward_ad_raises(device):
    q, k, v = _qkv(device)
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.attention is forward-only: forward-mode AD"):
        torch.func.jvp(lambda t: fae.attention(t, k, v), (q,), (torch.randn_like(q),))
    outs, lses = torch.randn(2, 2, 4, 5, 64, device=device), torch.randn(2, 2, 4, 5, device=device)
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.merge_attention is forward-only: forward-mode AD"):
        torch.func.jvp(lambda t: fae.merge_attention(outs, t), (lses,), (torch.randn_like(lses),))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    ops = torch.ops.flash_attn_ext
    cases = [(make_qkv(2, 4, 2, 7, 33, 64, torch.float32, device), True, None),
             (make_qkv(1, 2, 1, 9, 5, 40, torch.float16, device, "bshd"), True, 0.3),
             (make_qkv(1, 4, 4, 17, 17, 128, torch.bfloat16, device, "packed"), False, None)]
    for (q, k, v), causal, scale in cases:
        torch.library.opcheck(ops.attention.default, (q, k, v, causal, scale))
    for dtype in (torch.float32, torch.float16):
        outs = torch.randn(3, 2, 4, 5, 64, device=device).to(dtype)
        lses = torch.randn(3, 2, 4, 5, device=device)
        lses[0, 0, 0, 0] = -math.inf
        torch.library.opcheck(ops.merge_attention.default, (outs, lses))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("device", DEVICES)
def test_fake_kernel_matches_real(device, layout):
    # opcheck compares shapes and dtypes; torch.compile also relies on the fake strides (a real output laid
    # out differently from its fake would be read wrongly by generated code)
    from torch._subclasses.fake_tensor import FakeTensorMode

    # (b, sq): also size-1 dims (a decode step at batch 1), whose strides a fake empty_like recomputes
    for b, sq in ((2, 9), (1, 1), (1, 7)):
        q, k, v = make_qkv(b, 4, 2, sq, 9, 64, torch.float16, device, layout)
        outs = torch.randn(3, b, sq, 4, 64, device=device).transpose(2, 3)  # non-contiguous partials
        lses = torch.randn(3, b, sq, 4, device=device).transpose(2, 3)
        real = fae.attention(q, k, v, return_lse=True) + fae.merge_attention(outs, lses)
        with FakeTensorMode() as mode:
            fake_args = [mode.from_tensor(t) for t in (q, k, v, outs, lses)]
            fake = fae.attention(*fake_args[:3], return_lse=True) + fae.merge_attention(*fake_args[3:])
        for r, f in zip(real, fake):
            assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride()), (b, sq, layout)


class TransformerBlock(torch.nn.Module):
    """Pre-norm causal self-attention: qkv projection, fae.attention (GQA), output projection.

    fused: q, k, v are slices of one packed projection (non-dense views); otherwise separate projections
    give dense (B, S, H, D) tensors passed as (B, H, S, D) views, whose output keeps that layout."""

    def __init__(self, dim=128, heads=4, kv_heads=2, fused=True):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.fused = heads, kv_heads, dim // heads, fused
        self.norm = torch.nn.LayerNorm(dim)
        self.q = torch.nn.Linear(dim, heads * self.head_dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm(x)
        if self.fused:
            w, bias = torch.cat([self.q.weight, self.kv.weight]), torch.cat([self.q.bias, self.kv.bias])
            qkv = torch.nn.functional.linear(h, w, bias).view(b, s, self.heads + 2 * self.kv_heads, self.head_dim)
            q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=2)
        else:
            q = self.q(h).view(b, s, self.heads, self.head_dim)
            k, v = self.kv(h).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2)
            k, v = k.contiguous(), v.contiguous()
        o = fae.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        return x + self.proj(o.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("fused", [True, False], ids=["packed_qkv", "separate_qkv"])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_transformer_block(device, fused):
    block = TransformerBlock(fused=fused).to(device)
    x = torch.randn(2, 37, 128, device=device)
    with torch.no_grad():
        eager = block(x)
        # fullgraph=True: any graph break is an error
        compiled = torch.compile(block, fullgraph=True, options=NO_INDUCTOR_CACHE)(x)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_with_grad_raises_only_in_backward(device):
    # Parameters that require grad and no torch.no_grad(): the compiled forward works as eager does (the
    # backward AOTAutograd traces calls the raising op's fake kernel), and backward raises when it runs.
    block = TransformerBlock(fused=True).to(device)
    x = torch.randn(2, 37, 128, device=device)
    out = torch.compile(block, fullgraph=True, backend="aot_eager", dynamic=True)(x)
    assert out.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(out, block(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.attention is forward-only"):
        out.sum().backward()


# --- CUDA only ----------------------------------------------------------------------------------------------

@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("sq, sk", [(128, 128), (1, 8192), (300, 77)])
def test_cuda_graph_capture_replay(sq, sk):
    static = make_qkv(2, 8, 2, sq, sk, 64, torch.float16, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        fae.attention(*static, causal=True, return_lse=True)
    torch.cuda.current_stream().wait_stream(side)
    half = sk // 2
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = fae.attention(*static, causal=True, return_lse=True)
        q, k, v = static
        parts = [fae.attention(q, k[:, :, a:b], v[:, :, a:b], return_lse=True) for a, b in ((0, half), (half, sk))]
        merged, merged_lse = fae.merge_attention([p[0] for p in parts], [p[1] for p in parts])
    fresh = make_qkv(2, 8, 2, sq, sk, 64, torch.float16, "cuda")
    for s, f in zip(static, fresh):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    check_result(out, lse, *fresh, causal=True)
    ref_full, ref_full_lse = attention_ref(*fresh)
    assert rel_err(merged, ref_full) <= 3 * rel_err(sdpa_baseline(*fresh), ref_full) + LOW_PRECISION_EPS
    torch.testing.assert_close(merged_lse.double(), ref_full_lse, rtol=0, atol=LSE_ATOL)


@pytest.mark.cuda
@requires_cuda
def test_cuda_respects_current_stream():
    # q/k/v are NaN until a side stream, busy sleeping first, fills them; a kernel launched on any stream
    # other than the current (side) one reads NaN.
    good = make_qkv(2, 8, 2, 256, 1025, 64, torch.float16, "cuda")
    static = [torch.full_like(t, math.nan) for t in good]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        for s, g in zip(static, good):
            s.copy_(g)
        out, lse = fae.attention(*static, causal=True, return_lse=True)
        merged, merged_lse = fae.merge_attention([out, out], [lse, lse])
    side.synchronize()
    check_result(out, lse, *good, causal=True)
    torch.testing.assert_close(merged, out)
    torch.testing.assert_close(merged_lse, lse + math.log(2.0))


def cuda_kernel_names(call):
    """Names of the profiler events (CUDA kernels among them) of one call, which is synchronized."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events()]


@pytest.mark.cuda
@pytest.mark.skipif(not IS_SM90, reason="the wgmma kernel runs on compute capability 9.0 only")
@pytest.mark.parametrize("forced, kernel", [("auto", "attention_fwd_sm90_kernel<"), ("sm80", "attention_fwd_kernel<")])
def test_cuda_dispatch_picks_the_hopper_kernel(monkeypatch, forced, kernel):
    # A build whose TORCH_CUDA_ARCH_LIST lacks 9.0a has no wgmma kernel and fails here on an H100/H200.
    monkeypatch.setenv("FLASH_ATTN_EXT_ATTENTION_KERNEL", forced)
    q, k, v = make_qkv(2, 4, 2, 300, 300, 128, torch.bfloat16, "cuda")
    names = cuda_kernel_names(lambda: fae.attention(q, k, v))
    assert any(kernel in n for n in names), f"{kernel} not among {sorted(set(names))}"


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq, hk", [(32, 32), (64, 16), (64, 2), (48, 16)], ids=["g1", "g4", "g32", "g3"])
@pytest.mark.parametrize("d", [64, 128, 192, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_more_items_than_sms(dtype, d, hq, hk, causal):
    # hundreds of (m block, batch, kv head) items: the Hopper kernel's persistent blocks each work through
    # several pairs of items, their K/V rings and Q buffers (one at head dim 256) running on from one item to
    # the next; an odd number of m blocks per head, so the middle one of each head is a pair of one. Groups of
    # 1 and 4 query heads: Q in and O out by bulk tensor copies; 32: the same where the producer stores whole
    # tiles (two Q buffers), Q only at head dim 256 (a warp's 16 rows are not whole positions); 3: neither (Q by
    # the narrow form's loader warps at head dim 64, one-item blocks above)
    check_attention(*make_qkv(3, hq, hk, 300, 257, d, dtype, "cuda"), causal=causal)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("b, hq, hk, sq, sk", [(2, 8, 8, 2305, 2305), (2, 16, 4, 1100, 1100), (2, 16, 4, 700, 3000)],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_head_dim_64_long_keys(dtype, b, hq, hk, sq, sk, causal):
    # more than 8 key tiles at head dim 64: on 132 SMs the Hopper kernel's wide form (three consumer warpgroups,
    # 192-row items; each head's last item partly rows past Sq, GQA rows packed) takes these without a mask
    # (persistent: Q by bulk tensor copies), the causal ones of fewer than 4096 packed rows above 16 key tiles (one
    # item a block) and the causal 1100-key one, 4400 packed rows of 9 key tiles (persistent)
    check_attention(*make_qkv(b, hq, hk, sq, sk, 64, dtype, "cuda"), causal=causal)


# (head dim, query heads, kv heads, queries, keys, causal) -> the Hopper kernel's form, by the template arguments of
# its traits in the kernel's name (head dim, key tile, consumer warpgroups, stages, persistent). 4 batches: enough
# items that no call splits its keys, and for the wide form's waves to win on any SM count from 78 (H20) to 132
# (H100 SXM, H200). Head dim 64, causal: the wide form persistent from 4096 packed rows (queries x group) above 8
# key tiles, else two warpgroups persistent up to 16 key tiles and the wide form one item a block above.
HOPPER_FORMS = [
    (64, 16, 16, 3072, 1024, True, ", 64, 128, 2, 3, true,"),   # causal, 3072 rows: two warpgroups, persistent
    (64, 16, 4, 768, 1024, True, ", 64, 128, 2, 3, true,"),     # the same with groups of 4 (Q map of 5 dims)
    (64, 12, 4, 768, 1024, True, ", 64, 128, 1, 2, true,"),     # groups of 3 do not divide 128 rows: narrow
    (64, 16, 4, 3072, 2048, True, ", 64, 128, 3, 3, true,"),    # 12288 packed rows, 16 key tiles: wide, persistent
    (64, 12, 4, 3072, 2048, True, ", 64, 128, 3, 3, true,"),    # groups of 3 divide its 192 rows
    (64, 16, 4, 3072, 1024, True, ", 64, 128, 2, 3, true,"),    # 8 key tiles: two warpgroups (s54 call 9)
    (64, 16, 16, 4096, 4096, True, ", 64, 128, 3, 3, true,"),   # 4096 rows, 32 key tiles: wide, persistent
    (64, 16, 16, 4096, 4224, True, ", 64, 128, 3, 3, true,"),   # and at 33 key tiles (one item a block before a5a26d8)
    (64, 16, 16, 3072, 1024, False, ", 64, 128, 3, 3, true,"),  # no mask: the wide form, persistent
    (64, 16, 16, 3072, 4224, True, ", 64, 128, 3, 3, false,"),  # causal, 3072 rows, 33 key tiles: wide, one item a block
    (128, 16, 16, 1024, 1024, True, ", 128, 128, 2, 2, true,"),  # persistent, two Q buffers
    (128, 16, 2, 1024, 1024, False, ", 128, 128, 2, 2, true,"),  # groups of 8
    (128, 12, 4, 1024, 1024, False, ", 128, 128, 2, 3, false,"),  # groups of 3: one item a block
    (192, 16, 16, 1024, 1024, True, ", 192, 80, 2, 2, true,"),   # persistent, two Q buffers, 80-key tiles
    (256, 16, 16, 1024, 1024, False, ", 256, 64, 2, 2, true,"),  # persistent, one Q buffer
    (256, 12, 4, 1024, 1024, True, ", 256, 64, 2, 2, false,"),
]


@pytest.mark.cuda
@pytest.mark.skipif(not IS_SM90, reason="the wgmma kernel runs on compute capability 9.0 only")
@pytest.mark.parametrize("d, hq, hk, sq, sk, causal, form", HOPPER_FORMS, ids=str)
def test_cuda_hopper_kernel_forms(d, hq, hk, sq, sk, causal, form):
    q, k, v = make_qkv(4, hq, hk, sq, sk, d, torch.bfloat16, "cuda")
    names = [n for n in cuda_kernel_names(lambda: fae.attention(q, k, v, causal=causal))
             if "attention_fwd_sm90_kernel<" in n]
    assert names, "the Hopper kernel did not run"
    assert all(form in n for n in names), names


@pytest.mark.cuda
@requires_cuda
def test_cuda_unknown_forced_kernel(monkeypatch):
    monkeypatch.setenv("FLASH_ATTN_EXT_ATTENTION_KERNEL", "sm70")
    q, k, v = make_qkv(1, 2, 2, 7, 7, 64, torch.float16, "cuda")
    with pytest.raises(RuntimeError, match="FLASH_ATTN_EXT_ATTENTION_KERNEL"):
        fae.attention(q, k, v)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_huge_batch_times_heads(dtype):
    # B * Hq = 70_000 > 65_535: a grid laid out with batch*heads on y or z would overflow
    check_attention(*make_qkv(700, 100, 50, 3, 5, 64, dtype, "cuda"), causal=True)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq", [1, 16, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_split_kv(dtype, sq, causal):
    # few (batch, head) pairs, few queries, many keys: the kernel must split keys across blocks and merge
    check_attention(*make_qkv(1, 2, 1, sq, 100_003, 128, dtype, "cuda"), causal=causal)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sk", [97, 4097])
@pytest.mark.parametrize("sq, hq, hk", [(1, 32, 8), (2, 16, 2), (16, 4, 4), (5, 6, 2), (17, 2, 2), (3, 12, 2)],
                         ids=lambda x: str(x))
@pytest.mark.parametrize("d", [40, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_decode_kernel_rows(dtype, d, sq, hq, hk, sk, causal):
    # Sq * Hq / Hk packed rows: 4, 16, 16 and 15 run the decode kernel (one 16-row tile, the warps of a block
    # taking turns over the keys, split across blocks at Sk = 4097); 17 and 18 the prefill kernels
    check_attention(*make_qkv(2, hq, hk, sq, sk, d, dtype, "cuda"), causal=causal)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("b, hq, hk, sq, sk, d", [
    (150, 16, 4, 1, 200, 64),     # 600 (batch, kv head) blocks, more than resident: no key split
    (1, 4, 1, 3, 20000, 128),     # one block's keys split ~34 ways: the merge takes partials 32 at a time
    (3, 15, 5, 1, 1025, 256),     # split with Q re-read from shared memory (head dim 256)
    (2, 4, 2, 7, 1, 32),          # one key: causal rows that see none
], ids=str)
def test_cuda_decode_kernel_shapes(b, hq, hk, sq, sk, d, causal):
    check_attention(*make_qkv(b, hq, hk, sq, sk, d, torch.bfloat16, "cuda"), causal=causal)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("sq, decode", [(4, True), (5, False)])
def test_cuda_dispatch_picks_the_decode_kernel(sq, decode):
    q, k, v = make_qkv(1, 8, 2, sq, 3000, 64, torch.bfloat16, "cuda")  # packed rows: 16, then 20
    names = cuda_kernel_names(lambda: fae.attention(q, k, v))
    assert any("attention_decode_kernel<" in n for n in names) == decode, sorted(set(names))


@pytest.mark.cuda
@pytest.mark.large
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_512k_keys(dtype):
    check_attention(*make_qkv(1, 8, 2, 1, 512 * 1024, 128, dtype, "cuda"), causal=True)
