"""softmax / log_softmax / logsumexp: accuracy against fp64, torch parity on special values, edge shapes,
argument errors, autograd guard, opcheck, torch.compile, and (CUDA) graphs, streams, 64-bit sizes."""
import math
import re

import pytest
import torch

import flash_attn_ext as fae
from reference import (DEVICES, NO_INDUCTOR_CACHE, log_softmax_ref, logsumexp_ref, poison, rel_err,
                       requires_cuda, run_checked, run_cpu_isa_check, run_in_fresh_python, softmax_ref)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
ALGORITHMS = ["safe", "online", "auto"]
LAYOUTS = ["contiguous", "transposed", "sliced"]

# fp16/bf16: ours vs fp64 <= 2 x (torch in the same dtype vs fp64) + LOW_PRECISION_EPS.
# fp32/fp64: a fixed relative threshold, or 2 x torch's own error + half of it where torch errs more (long rows).
LOW_PRECISION_EPS = {torch.float16: 1e-4, torch.bfloat16: 5e-4}
FIXED_BOUND = {torch.float32: 1e-6, torch.float64: 1e-12}

# (shape, dim): odd lengths, every dim position, negative dims, size-1 dims.
CASES = [
    ((1,), -1), ((7,), 0), ((97,), -1), ((1025,), -1), ((4097,), -1),
    ((3, 128), -1), ((5, 2000), 1), ((2, 32768), -1),
    ((4, 7, 97), 2), ((4, 7, 97), 1), ((4, 7, 97), 0), ((4, 7, 97), -2),
    ((1025, 3), 0), ((2, 4097, 3), 1), ((97, 1, 5), 1), ((6, 1), -1), ((1, 1, 1), 1), ((3, 5, 7, 9), -3),
]
# Long rows and columns that reach the multi-block / split paths of the CUDA kernels. Aligned long rows
# (lengths a multiple of 8) reach the pipelined kernel on sm_90: a few rows split over blocks with one block
# per SM (3 x 1_000_000), rows split with two blocks per SM (20 x 200_000), whole rows (300 x 20000). Rows
# split over several rounds take the dual-role kernel (6 x 2_097_152: fp32 in 64 chunks, 16-bit in the 44 the
# chunk cost picks on a 132-SM H100; test_large_magnitude_rows_cuda's 8 x 2_097_152 keeps 32 whole 128 KB
# chunks on 128 SMs), and so do whole rows of one or two dual items where rows fill the SMs (300 x 20000 fp32;
# 140 x 49152: 16-bit rows in one item, fp32 rows of 192 KB in two).
CUDA_CASES = [
    ((4, 1_000_003), -1), ((2, 65537), 1), ((3, 200_003, 2), 1), ((1025, 4097), 0), ((8, 3, 300_007), -1),
    ((300, 20000), -1), ((3, 1_000_000), -1), ((20, 200_000), -1), ((6, 2_097_152), -1), ((140, 49152), -1),
]


def make_input(shape, dtype, device, layout="contiguous", scale=3.0):
    """randn * scale in the given memory layout: "contiguous", "transposed" (last two dims swapped in
    memory) or "sliced" (every other element of a wider tensor)."""
    shape = tuple(shape)
    base_shape = {"contiguous": shape, "transposed": shape[:-2] + shape[-1:] + shape[-2:-1],
                  "sliced": shape[:-1] + (2 * shape[-1] + 1,)}[layout]
    gen_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    base = (torch.randn(base_shape, dtype=gen_dtype, device=device) * scale).to(dtype)
    if layout == "transposed":
        return base.transpose(-1, -2)
    if layout == "sliced":
        return base[..., 1::2]
    return base


def check_against_reference(out, ref, baseline, dtype, what):
    """Asserts the error bound of the module docstring; baseline is torch's result in the op's dtype."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == dtype, f"{what}: dtype {out.dtype} != {dtype}"
    assert not out.isnan().any(), f"{what}: NaN in the output of finite inputs"
    err = rel_err(out, ref)
    if dtype in FIXED_BOUND:
        # Long fp32 reductions may exceed the fixed bound; torch's own error then sets it.
        bound = FIXED_BOUND[dtype]
        if baseline is not None:
            bound = max(bound, 2 * rel_err(baseline, ref) + FIXED_BOUND[dtype] / 2)
    else:
        bound = 2 * rel_err(baseline, ref) + LOW_PRECISION_EPS[dtype]
    assert err <= bound, f"{what}: rel err {err:.3e} > bound {bound:.3e}"
    check_elements(out, ref, dtype, what)


# Element by element, beside the norm-wise bound: a few wrong small elements (an unwritten or dropped tail
# vector of a long row) barely move the norm. |out - ref| <= ELEMENT_ULPS * eps * (|ref| + tiny), plus, in
# the accumulation's eps (float32, or float64 for float64):
# - softmax: ELEMENT_ULPS * eps * |ref| * (1 + |ln ref|), since exp(y) carries y's rounding (|y| eps) as a
#   relative error, and y = ln ref (H100 fp64: e^-102 off by more than 64 ulps otherwise);
# - log_softmax / logsumexp (values x - lse, lse): ELEMENT_ULPS * eps * (1 + max |ref|), the lse's rounding.
# Softmax gets no absolute term: its small elements are what a dropped vector changes. Except below bfloat16's
# smallest normal (2^-126, float32's too), where bfloat16 is subnormal: the CUDA 16-bit kernels' exponential
# (ex2.approx.ftz) flushes such terms to 0 (README, "Semantics"), so there a bfloat16 output may be off by up
# to 2^-126. (float16 has no such outputs: its subnormals lie far above 2^-126.)
ELEMENT_ULPS = {torch.float16: 2, torch.bfloat16: 2, torch.float32: 64, torch.float64: 64}


def check_elements(out, ref, dtype, what):
    if out.numel() == 0:
        return
    info = torch.finfo(dtype)
    ulps = ELEMENT_ULPS[dtype]
    ref = ref.double()
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    acc_tol = ELEMENT_ULPS[acc] * torch.finfo(acc).eps
    bound = ulps * info.eps * (ref.abs() + info.tiny)
    if dtype == torch.bfloat16:
        bound = bound + info.tiny
    if what.startswith("softmax"):
        bound = bound + acc_tol * ref.abs() * (1 + ref.abs().clamp_min(info.tiny).log().abs())
    else:
        bound = bound + acc_tol * (1 + ref.abs().max())
    err = (out.double() - ref).abs()
    bad = err > bound
    if bad.any():
        i = int((err - bound).argmax())
        raise AssertionError(f"{what}: {int(bad.sum())} of {out.numel()} elements off; worst at flat index {i}: "
                             f"{out.reshape(-1)[i].item():.6e} vs {ref.reshape(-1)[i].item():.6e}")


def _cases(device_cases):
    params = []
    for shape, dim in device_cases:
        for layout in LAYOUTS:
            if layout == "transposed" and len(shape) < 2:
                continue
            params.append(pytest.param(shape, dim, layout, id=f"{'x'.join(map(str, shape))}-dim{dim}-{layout}"))
    return params


# (our op, its fp64 reference, torch's op): the row ops that store rows, and with logsumexp.
ROW_OPS = ((fae.softmax, softmax_ref, torch.softmax), (fae.log_softmax, log_softmax_ref, torch.log_softmax))
ROW_AND_LSE_OPS = ROW_OPS + ((fae.logsumexp, logsumexp_ref, torch.logsumexp),)


def _run_accuracy(device, dtype, algorithm, shape, dim, layout):
    x = make_input(shape, dtype, device, layout)
    for op, ref_fn, torch_fn in ROW_OPS:
        poison(device, x.numel() * x.element_size())
        out = op(x, dim, algorithm=algorithm)
        assert out.device == x.device and out.is_contiguous()
        check_against_reference(out, ref_fn(x, dim), torch_fn(x, dim), dtype, op.__name__ + str(tuple(shape)))


@pytest.mark.parametrize("shape, dim, layout", _cases(CASES))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_softmax_accuracy(device, dtype, algorithm, shape, dim, layout):
    _run_accuracy(device, dtype, algorithm, shape, dim, layout)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape, dim, layout", _cases(CUDA_CASES))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_accuracy_long_cuda(dtype, algorithm, shape, dim, layout):
    _run_accuracy("cuda", dtype, algorithm, shape, dim, layout)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_many_whole_rows_cuda(dtype):
    # More than 12 rows per SM of 16-bit rows between 32 and 40 KB: "auto" takes the block kernel with shared
    # memory instead of the pipelined one on sm_90 (rows of 16392 elements: 2049 16-byte vectors, not a
    # multiple of the block; test_many_whole_rows_routing_cuda checks the plan).
    rows = 12 * torch.cuda.get_device_properties(0).multi_processor_count + 1
    _run_accuracy("cuda", dtype, "auto", (rows, 16392), -1, "contiguous")


@pytest.mark.cuda
@requires_cuda
def test_many_whole_rows_routing_cuda():
    # Which kernel "auto" takes for >= 12 16-bit whole rows of 32-64 KB per SM that no teams take: the block kernel
    # up to 40 KB, the pipelined kernel beyond (softmax_cuda.cu: many_short_whole_rows; teams of 8 rows of 48-64 KB
    # a block beyond one wave are left to it too).
    sms = _large_sm90_sms("block")
    expected = [((12 * sms + 1, 16392), "bfloat16", "block"), ((12 * sms + 1, 20480), "float16", "block"),
                ((12 * sms + 1, 20488), "bfloat16", "pipe"), ((12 * sms + 1, 24560), "float16", "pipe"),
                ((12 * sms, 24576), "bfloat16", "pipe"), ((12 * sms, 32768), "float16", "pipe")]
    for ((rows, cols), dtype, kind), line in zip(expected, _auto_plans(expected)):
        assert re.search(rf"plan: {rows}x{cols} kind={kind},", line), (dtype, line)


SHARED_BLOCK_CHECK = """
import torch
import test_softmax as t
sms = torch.cuda.get_device_properties(0).multi_processor_count
for length in (1544, 2048):
    t._run_accuracy("cuda", torch.float32, "auto", (192 * sms + 3, length), -1, "contiguous")
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
def test_fp32_rows_of_two_thousand_in_shared_memory_cuda():
    # fp32 rows of 384-512 16-byte vectors on 128-thread blocks with 2 vectors per thread in registers and the
    # rest of the row in shared memory ("auto" took this plan until s57; forced here, since the kernel stays
    # reachable): 1544 elements fill the shared part in part (386 vectors in 512 slots), 2048 fill every slot.
    config = "kind=block,vpt=small,threads=128"  # smem derived: ceil(vectors / 128) - 2 per thread
    run_checked(SHARED_BLOCK_CHECK, FAE_SOFTMAX_CONFIG=config)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_crowded_whole_rows_cuda(dtype):
    # Whole rows that would fill all but 2 pieces of a one-block-per-SM ring, one row per SM and more: on sm_90
    # "auto" cuts 16-bit rows (98296 elements, 192 KB less 16 bytes) over two pipelined blocks per SM, and
    # fp32 rows of the same bytes go to the dual kernel in two items. So are 16-bit rows of 160 KB at 2.5 rows
    # per SM (few rounds of whole rows).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    _run_accuracy("cuda", dtype, "auto", (sms + 1, 98296 if dtype.itemsize == 2 else 49144), -1, "contiguous")
    if dtype.itemsize == 2:
        _run_accuracy("cuda", dtype, "auto", (sms * 5 // 2, 81920), -1, "contiguous")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_split_rows_alternate_groups_cuda(dtype):
    # 16-bit rows of 512 KB over two rounds of the GPU and part of a third: on sm_90 "auto" runs them on the dual
    # kernel in chunks of at most 128 KB, and every other group of a row's blocks runs the kernel's two item
    # chains the other way round (the swapped groups, softmax_dual.cuh). A row whose chunks met in different
    # chains, or a chain that skipped or repeated an item, fails here.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    _run_accuracy("cuda", dtype, "auto", (sms // 2 + 5, 262144), -1, "contiguous")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_whole_rows_head_and_tail_cuda(dtype):
    # 16-bit rows of 64 KB, 6 per SM and 7 more: on sm_90 "auto" runs them on the pipelined kernel (two blocks
    # per SM) as two launches, a head of 3 whole rounds and a tail of 7 rows whose blocks start in the slots the
    # head frees and wait for the head before they end (GridOrder, softmax_launch.h). The chain consumes each
    # output at once, so a tail that read its input early or ended before the head fails here.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shape = (6 * sms + 7, 32768)
    _run_accuracy("cuda", dtype, "auto", shape, -1, "contiguous")
    x = make_input(shape, dtype, "cuda")
    ref, base, y = x.double(), x, x
    for step in range(4):
        if step % 2 == 0:
            y, ref, base = fae.softmax(y, -1), softmax_ref(ref, -1), torch.softmax(base, -1)
        else:
            y, ref, base = fae.log_softmax(y, -1), log_softmax_ref(ref, -1), torch.log_softmax(base, -1)
    check_against_reference(y, ref, base, dtype, "softmax / log_softmax chain")
    poison("cuda", shape[0] * x.element_size())
    check_against_reference(fae.logsumexp(x, -1), logsumexp_ref(x, -1), torch.logsumexp(x, -1), dtype, "logsumexp")


def check_rows_at_offset(device, dtype, rows, length, offset, ops):
    """ops (of ROW_AND_LSE_OPS) on a (rows, length) input whose base lies `offset` elements past an aligned address,
    each output poisoned first, against the fp64 reference."""
    x = make_input((rows * length + offset,), dtype, device)[offset:].view(rows, length)
    assert x.data_ptr() % 16 == offset * x.element_size() % 16
    for op, ref_fn, torch_fn in ops:
        poison(device, rows * (1 if op is fae.logsumexp else length) * x.element_size())
        check_against_reference(op(x, -1), ref_fn(x, -1), torch_fn(x, -1), dtype,
                                f"{op.__name__} {rows}x{length} at +{offset}")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unaligned_rows_cuda(dtype, offset):
    # Rows that are not 16-byte aligned: odd lengths, where each row starts at its own misalignment, and an input whose
    # base lies `offset` elements past an aligned address, so that its rows and the fresh output's lie on different
    # grids (element-wise stores) even at lengths that are multiples of 8. Rows for the warp kernel (7, 100, 127, 255,
    # 383, 1023, on teams of 8-32 lanes: 16-bit softmax and log_softmax of 383 and 1023 at offset 0 as 16-byte vectors
    # on the memory's grid, folded (grid_softmax_rows; 127 and 255 are too few rows for it), others as element pairs at
    # even offsets where those paid, the input's pairs lying on the output's pair grid, and every other case
    # element-wise), rows the block kernel
    # moves as 16-byte vectors on the memory's grid, first and last element by element (load_group_shifted): block
    # rows (1025 to 10007), rows split over blocks (fewer rows than SMs: 40_003, 100_000); and, on sm_90+ at offset 0
    # (the output on the input's grid), the pipelined kernel's shifted items (ItemVectors; "auto" takes it for tensors
    # of >= 16 MiB): whole rows over several rounds and a tail launch (440 x 20_001), rows split into items of several
    # ring pieces (3 x 3_000_001). The forced configurations (test_forced_configs_cuda) run it on small shapes too.
    for rows, length in ((33, 7), (65, 100), (3001, 127), (1001, 255), (77, 383), (129, 1023), (17, 1025), (9, 4097),
                         (40, 10007), (5, 4096), (3, 40_003), (2, 100_000), (440, 20_001), (3, 3_000_001)):
        check_rows_at_offset("cuda", dtype, rows, length, offset, ROW_AND_LSE_OPS)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_many_short_unaligned_rows_cuda(dtype, offset):
    # Enough unaligned 16-bit rows of one vector a lane to give every SM kManyScalarRowsMinBlocksPerSm (12) blocks of
    # 256 threads: softmax and log_softmax take the instantiation bound for many rows (many_scalar_rows_compiled), as
    # element pairs at offset 0 (the output's pairs on the input's) and element-wise at offset 1. Rows of 13 elements
    # run on teams of 4 lanes (64 rows a block), rows of 61 on 8 (32 rows a block); the gate's blocks plus one row.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for rows, length in ((12 * sms * 64 + 1, 13), (12 * sms * 32 + 1, 61)):
        check_rows_at_offset("cuda", dtype, rows, length, offset, ROW_OPS)


@pytest.mark.cuda
@requires_cuda
def test_many_short_unaligned_fp32_rows_cuda():
    # fp32 log_softmax of unaligned rows at 2 vectors a lane takes the instantiation bound for many rows where teams of
    # >= 16 lanes give every SM >= kManyFp32ScalarRowsMinBlocksPerSm (6) blocks (many_scalar_rows): rows of 97 on 16
    # lanes, of 201 on 32, the gate's blocks plus one row; rows of 61 on 8 lanes keep the general bound. The plans are
    # what the gate reads, so each is checked before its values (in the same child process); softmax beside, at both
    # offsets.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [((6 * sms * rows_a_block + 1, cols, "float32", op, offset, "auto"), (lanes, 2))
             for cols, lanes, rows_a_block in ((97, 16, 16), (201, 32, 8), (61, 8, 32))
             for op in ("log_softmax", "softmax") for offset in (0, 1)]
    for (rows, cols, *_), (lanes, vpt), line in _routed_plans(cases):
        assert re.search(rf"plan: {rows}x{cols} kind=warp,lanes={lanes},vpt={vpt},", line), line


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape, dim, layout", [p for p in _cases(CASES) if p.values[2] != "transposed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_accuracy(device, dtype, shape, dim, layout, keepdim):
    x = make_input(shape, dtype, device, layout)
    ref = logsumexp_ref(x, dim, keepdim)
    poison(device, ref.numel() * x.element_size())
    out = fae.logsumexp(x, dim, keepdim=keepdim)
    check_against_reference(out, ref, torch.logsumexp(x, dim, keepdim), dtype, "logsumexp")


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("length", [97, 1025, 4097])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_wide_rows_need_the_max(device, dtype, algorithm, length, where):
    # One element 100 above the rest of its row (first, or in the last partial vector): exp without the max
    # subtracted overflows float32 there, and a max taken over part of the row misses it.
    x = make_input((5, length), dtype, device)
    x[:, 0 if where == "first" else -1] += 100.0
    for op, ref_fn, torch_fn in ROW_AND_LSE_OPS:
        kwargs = {} if op is fae.logsumexp else {"algorithm": algorithm}
        check_against_reference(op(x, -1, **kwargs), ref_fn(x, -1), torch_fn(x, -1), dtype, op.__name__)


# logsumexp's row kernels on the GPU: aligned rows of up to 32 lanes x kMaxVpt vectors run the warp kernel fixed to
# logsumexp (16-bit: 1, 2 and 4 vectors a lane at 8, 16 and 1024 elements), longer ones the block kernel's (16-bit 1032
# and 2048: 64 threads, since 67 rows are too few for test_wide_warp_logsumexp_cuda's warps; 4096: 128; fp32 2048: 64);
# on 16-bit rows both reduce raw vectors, the max on packed pairs (packed_lse.cuh), so the row max is put in the first
# element or the last vector too. 67 rows: not a multiple of a block's rows.
@pytest.mark.parametrize("where", ["none", "first", "last"])
@pytest.mark.parametrize("length", [8, 16, 1024, 1032, 2048, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_row_kernels(device, dtype, length, where):
    x = make_input((67, length), dtype, device)
    if where != "none":
        x[:, 0 if where == "first" else -1] += 100.0
    poison(device, 67 * x.element_size())
    check_against_reference(fae.logsumexp(x, -1), logsumexp_ref(x, -1), torch.logsumexp(x, -1), dtype,
                            f"logsumexp 67x{length}, max {where}")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape, dim, layout", [p for p in _cases(CUDA_CASES) if p.values[2] != "transposed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_logsumexp_accuracy_long_cuda(dtype, shape, dim, layout):
    x = make_input(shape, dtype, "cuda", layout)
    ref = logsumexp_ref(x, dim)
    poison("cuda", ref.numel() * x.element_size())
    check_against_reference(fae.logsumexp(x, dim), ref, torch.logsumexp(x, dim), dtype, "logsumexp")


@pytest.mark.parametrize("layout", ["row", "column"])
@pytest.mark.parametrize("pattern", ["randn", "near_constant"])
@pytest.mark.parametrize("algorithm", ["safe", "online"])
@pytest.mark.parametrize("device", DEVICES)
def test_longer_than_2_pow_24(device, algorithm, pattern, layout):
    # float32 counts exactly only up to 2^24, and a long running sum of near-equal terms rounds the same way
    # at every step: "near_constant" (exp(x - max) ~ e^-1.5 everywhere) turns a sequential sum's error
    # into ~1e-4, while a blocked / tree reduction stays near 1e-7.
    n = 2**24 + 3
    shape, dim = ((1, n), -1) if layout == "row" else ((n, 2), 0)
    if pattern == "randn":
        x = make_input(shape, torch.float32, device)
    else:
        x = -1.0 + 1e-3 * torch.randn(shape, device=device)
        x[0, 0] = 0.5  # one element off the near-constant values (row, or column 0; column 1 keeps none)
    check_against_reference(fae.softmax(x, dim, algorithm=algorithm), softmax_ref(x, dim), None, torch.float32,
                            "softmax")
    check_against_reference(fae.log_softmax(x, dim, algorithm=algorithm), log_softmax_ref(x, dim), None,
                            torch.float32, "log_softmax")
    check_against_reference(fae.logsumexp(x, dim), logsumexp_ref(x, dim), None, torch.float32, "logsumexp")


# --- special values: parity with torch in the same dtype ---------------------------------------------------

def special_rows(length, dtype, device):
    """(13, length) rows: plain, all -inf, +inf, NaN, scattered -inf, all NaN, ... at positions across the row so
    that they land in different lanes / chunks / blocks of the kernels. (All NaN: every chunk of a split row
    has a NaN max, which the exchange's flagged words must still tell from an unpublished partial.)"""
    inf, nan = math.inf, math.nan
    x = torch.randn(13, length, dtype=torch.float64) * 3
    mid, last = length // 2, length - 1
    x[1] = -inf                                    # all -inf
    x[2, mid] = inf                                # one +inf
    x[3, last] = nan                               # NaN at the end
    x[4, ::3] = -inf                               # -inf scattered (first element included)
    x[5, 0] = inf
    x[5, last] = inf                               # two +inf
    x[6, mid] = inf
    x[6, last // 3] = nan                          # +inf and NaN
    x[7, : max(1, length // 2)] = -inf             # leading -inf: the running max starts at -inf
    x[8, 0] = -inf
    x[8, last] = inf                               # -inf and +inf
    x[9, 0] = nan                                  # NaN first
    x[10] = -inf
    x[10, mid] = 1.5                               # a single finite element
    x[11] = 2.0                                    # all equal
    x[12] = nan                                    # all NaN
    return x.to(device=device, dtype=dtype)


SPECIAL_TOL = {torch.float16: (2e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1e-5, 1e-7),
               torch.float64: (1e-12, 1e-14)}
# fp32 log_softmax's atol: a value near 0 is -log d for a row whose max stands well clear of the rest (-1.3e-3: by ~6.6),
# d near 1 an fp32 sum whose roundings at ulp(1) / 2 (~6e-8) are the thread's sequential adds of its own terms, then
# the block's tree; at 1e-7 it failed once (H200, s99 call 5: 3.3e-7 at -1.3e-3 in the forced block kernel, whose SASS
# was the same as in the runs it passed; the check draws fresh rows each run).
SPECIAL_LOG_SOFTMAX_ATOL = {torch.float32: 1e-6}


def assert_special_match(out, baseline, ref, what):
    """Non-finite positions exactly as torch's in the same dtype; finite values near the fp64 reference
    (torch's own 16-bit log_softmax loses a few ulps near 0, so it is not the value baseline here)."""
    for pred in (torch.isnan, torch.isposinf, torch.isneginf):
        mism = (pred(out) != pred(baseline)).nonzero()
        assert mism.numel() == 0, f"{what}: {pred.__name__} differs from torch at {mism[:8].tolist()}"
    rtol, atol = SPECIAL_TOL[out.dtype]
    if what.startswith("log_softmax"):
        atol = SPECIAL_LOG_SOFTMAX_ATOL.get(out.dtype, atol)
    torch.testing.assert_close(out, ref.to(out.dtype), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def _run_special(x, what, ops=ROW_OPS):
    """Each of ops (ROW_OPS or ROW_AND_LSE_OPS) over the last dim of special-value rows x (special_rows), as
    assert_special_match checks them."""
    for op, ref, base in ops:
        assert_special_match(op(x, -1), base(x, -1), ref(x, -1), f"{op.__name__} special values {what}")


# Odd lengths reach the scalar paths; 128 and 1024 the vectorized warp-per-row instantiations (16-byte rows) and 4096
# the block kernel's, including those specialized for softmax, log_softmax and logsumexp with the safe reduction
# (softmax_rows.cuh); 40000 the long-row kernels "auto" picks on the GPU (sm_90: pipelined or dual for softmax, the
# streaming reduce for logsumexp).
@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("length", [1, 7, 97, 128, 1024, 1025, 4096, 4097, 40_000])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_special_values_match_torch(device, dtype, algorithm, length, layout):
    x = special_rows(length, dtype, device)
    dim = -1
    if layout == "columns":
        x, dim = x.t().contiguous(), 0  # the reduced dim is strided: (length, 12), dim 0
    for name, ref_fn in (("softmax", softmax_ref), ("log_softmax", log_softmax_ref)):
        out = getattr(fae, name)(x, dim, algorithm=algorithm)
        assert_special_match(out, getattr(torch, name)(x, dim), ref_fn(x, dim), name)
    for keepdim in (False, True):
        assert_special_match(fae.logsumexp(x, dim, keepdim), torch.logsumexp(x, dim, keepdim),
                             logsumexp_ref(x, dim, keepdim), "logsumexp")


# --- edge shapes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, dim", [((0,), 0), ((0, 5), 0), ((0, 5), 1), ((5, 0), 0), ((5, 0), -1),
                                        ((3, 0, 4), 0), ((3, 0, 4), 1), ((3, 0, 4), 2)])
@pytest.mark.parametrize("device", DEVICES)
def test_empty(device, shape, dim):
    x = torch.randn(shape, device=device)
    for op, torch_fn in ((fae.softmax, torch.softmax), (fae.log_softmax, torch.log_softmax)):
        out = op(x, dim)
        assert out.shape == x.shape and out.dtype == x.dtype
    for keepdim in (False, True):
        # logsumexp over an empty dim is -inf, as in torch
        torch.testing.assert_close(fae.logsumexp(x, dim, keepdim), torch.logsumexp(x, dim, keepdim))


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_zero_dim(device, dtype, dim):
    x = torch.tensor(1.7, dtype=dtype, device=device)
    torch.testing.assert_close(fae.softmax(x, dim), torch.softmax(x, dim))
    torch.testing.assert_close(fae.log_softmax(x, dim), torch.log_softmax(x, dim))
    for keepdim in (False, True):
        torch.testing.assert_close(fae.logsumexp(x, dim, keepdim), torch.logsumexp(x, dim, keepdim))


# --- argument errors ----------------------------------------------------------------------------------------

SOFTMAX_OPS = [pytest.param(lambda x, dim, **kw: fae.softmax(x, dim, **kw), id="softmax"),
               pytest.param(lambda x, dim, **kw: fae.log_softmax(x, dim, **kw), id="log_softmax")]
ALL_OPS = SOFTMAX_OPS + [pytest.param(lambda x, dim, **kw: fae.logsumexp(x, dim), id="logsumexp")]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_non_float_dtype(device, op, dtype):
    x = torch.ones(3, 4, device=device).to(dtype)
    with pytest.raises(TypeError, match=r"x must be float32, float64, float16 or bfloat16"):
        op(x, -1)


@pytest.mark.parametrize("shape, dim", [((3, 4), 2), ((3, 4), -3), ((5,), 1), ((), 1), ((), -2)])
@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_dim_out_of_range(device, op, shape, dim):
    x = torch.randn(shape, device=device)
    with pytest.raises(IndexError, match=rf"dim={dim} is out of range"):
        op(x, dim)


def softmax_error_in_fresh_process(x_expr: str, dim: int, exception: str, op: str = "softmax", **env_vars) -> str:
    """fae.<op>(x_expr, dim) as the first call of a fresh interpreter, expecting `exception`: the child's
    stdout ("raised: <message>" when it was raised), after checking the child itself did not crash."""
    code = (f"import torch, flash_attn_ext as fae\nx = {x_expr}\n"
            f"try:\n    fae.{op}(x, {dim})\nexcept {exception} as e:\n    print('raised:', e)\n")
    child = run_in_fresh_python(code, **env_vars)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    return child.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_error_message_in_a_fresh_process(device):
    # The first call of a fresh interpreter fails a check whose message formats integers. A build linked
    # against a static copy of libstdc++ crashed exactly here (SIGSEGV while formatting the number: that
    # copy's locale facets were never set up in a process that had loaded the shared libstdc++ first), while
    # the same check passed inside pytest after other calls.
    out = softmax_error_in_fresh_process(f"torch.randn(3, 4, device='{device}')", 5, "IndexError")
    assert "raised: flash_attn_ext.softmax: dim=5 is out of range" in out, out


@pytest.mark.parametrize("algorithm", ["fast", "", "Online", "SAFE"])
@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_unknown_algorithm(device, op, algorithm):
    x = torch.randn(3, 4, device=device)
    with pytest.raises(ValueError, match=r"algorithm must be 'auto', 'safe' or 'online'"):
        op(x, -1, algorithm=algorithm)


# --- autograd guard, opcheck, torch.compile ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("device", DEVICES)
def test_backward_raises(device, name):
    x = torch.randn(4, 33, device=device, requires_grad=True)
    out = getattr(fae, name)(x, -1)
    torch.testing.assert_close(out, getattr(torch, name)(x.detach(), -1))
    assert out.requires_grad
    with pytest.raises(RuntimeError, match=rf"flash_attn_ext\.{name} is forward-only"):
        out.sum().backward()


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("device", DEVICES)
def test_forward_ad_raises(device, name):
    # Forward mode gets an error too: without one the outputs carried no tangent and jvp returned zeros.
    x = torch.randn(4, 33, device=device)
    tangent = torch.randn_like(x)
    match = rf"flash_attn_ext\.{name} is forward-only: forward-mode AD"
    with pytest.raises(RuntimeError, match=match):
        torch.func.jvp(lambda t: getattr(fae, name)(t, -1), (x,), (tangent,))
    with torch.autograd.forward_ad.dual_level(), pytest.raises(RuntimeError, match=match):
        getattr(fae, name)(torch.autograd.forward_ad.make_dual(x, tangent), -1)


def test_every_op_has_the_forward_only_guard():
    # csrc/autograd_guard.cpp names the ops a second time (registration.cpp defines them): an op missing
    # there would get no Autograd kernel and no error on backward.
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("flash_attn_ext::")]
    assert len(names) >= 5, names
    for name in names:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Autograd"), name


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    ops = torch.ops.flash_attn_ext
    inputs = [(torch.randn(5, 97, device=device), -1),
              (torch.randn(7, 3, 33, device=device, dtype=torch.float16), 1),
              (torch.randn(33, 6, device=device).t(), 0)]
    for x, dim in inputs:
        for algorithm in ALGORITHMS:
            torch.library.opcheck(ops.softmax.default, (x, dim, algorithm))
            torch.library.opcheck(ops.log_softmax.default, (x, dim, algorithm))
        for keepdim in (False, True):
            torch.library.opcheck(ops.logsumexp.default, (x, dim, keepdim))


@pytest.mark.parametrize("device", DEVICES)
def test_fake_kernel_matches_real(device):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(9, 5, 33, device=device).transpose(0, 2)
    calls = [lambda t: fae.softmax(t, 1), lambda t: fae.log_softmax(t, -1), lambda t: fae.logsumexp(t, 0),
             lambda t: fae.logsumexp(t, 1, keepdim=True), lambda t: fae.logsumexp(t[0, 0, 0], 0)]
    with FakeTensorMode() as mode:
        fake_x = mode.from_tensor(x)
        fakes = [call(fake_x) for call in calls]
    for call, f in zip(calls, fakes):
        r = call(x)
        assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_fake_kernel_checks_dim_and_dtype(name):
    # Meta tensors run the fake kernel: a dim out of range must not quietly drop another dim of the shape,
    # and an integer input must not trace to an integer result.
    op = getattr(fae, name)
    with pytest.raises(IndexError, match=rf"flash_attn_ext\.{name}: dim=-3 is out of range for a tensor of rank 2"):
        op(torch.empty(2, 3, device="meta"), -3)
    with pytest.raises(IndexError, match=rf"flash_attn_ext\.{name}: dim=2 is out of range"):
        op(torch.empty(2, 3, device="meta"), 2)
    with pytest.raises(TypeError, match=rf"flash_attn_ext\.{name}: x must be float32"):
        op(torch.empty(2, 3, device="meta", dtype=torch.int32), -1)
    assert op(torch.empty((), device="meta"), -1).shape == getattr(torch, name)(torch.empty(()), -1).shape


def _softmax_family(x):
    a = fae.softmax(x * 2.0, -1, algorithm="online")
    b = fae.log_softmax(x, 0, algorithm="safe")
    c = fae.logsumexp(x, -1, keepdim=True)
    return a + b.sum(0) - c


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    x = torch.randn(33, 97, device=device)
    compiled = torch.compile(_softmax_family, fullgraph=True, options=NO_INDUCTOR_CACHE)
    torch.testing.assert_close(compiled(x), _softmax_family(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_with_grad_raises_only_in_backward(device):
    # As in eager, the forward runs and backward raises. AOTAutograd traces the backward while compiling
    # (aot_eager is the cheapest backend that does), so a backward that raised while traced failed the forward.
    x = torch.randn(33, 97, device=device, requires_grad=True)
    compiled = torch.compile(_softmax_family, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    assert out.requires_grad
    torch.testing.assert_close(out, _softmax_family(x.detach()), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match=r"flash_attn_ext\.(softmax|log_softmax|logsumexp) is forward-only"):
        out.sum().backward()


# --- CUDA only: graphs, streams, 64-bit sizes ---------------------------------------------------------------

@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape, dim, dtype", [((64, 1000), -1, torch.float32), ((2, 1_000_003), -1, torch.float32),
                                               ((4097, 7), 0, torch.float32), ((16, 262_144), -1, torch.float32),
                                               ((16, 262_144), -1, torch.bfloat16),
                                               ((1024, 32768), -1, torch.bfloat16),
                                               ((8, 4_194_304), -1, torch.bfloat16)])
def test_cuda_graph_capture_replay(shape, dim, dtype):
    # Replayed twice on fresh inputs: a split-row launch's exchange workspace must be ready again for the
    # second replay (the captured kernel cannot take a new tag; split_exchange.cuh). 1024 bf16 rows of 64 KB:
    # on the H100's 132 SMs softmax runs them as a pipelined head and tail (GridOrder), two captured kernels.
    # bf16 8 x 4M: the resident kernel (sm_90), 16 blocks per row.
    static_x = make_input(shape, dtype, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch recommends
        fae.softmax(static_x, dim)
        fae.log_softmax(static_x, dim)
        fae.logsumexp(static_x, dim)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = (fae.softmax(static_x, dim), fae.log_softmax(static_x, dim, algorithm="safe"),
               fae.logsumexp(static_x, dim))
    for _ in range(2):
        new_x = make_input(shape, dtype, "cuda")
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out[0], softmax_ref(new_x, dim), torch.softmax(new_x, dim), dtype, "softmax")
        check_against_reference(out[1], log_softmax_ref(new_x, dim), torch.log_softmax(new_x, dim), dtype,
                                "log_softmax")
        check_against_reference(out[2], logsumexp_ref(new_x, dim), torch.logsumexp(new_x, dim), dtype, "logsumexp")


# Elementwise relative bound for 16-bit outputs of rows of large magnitude: one rounding (2^-8 bf16, 2^-11
# fp16 relative) plus the kernels' own error; below the dtype's smallest normal, an absolute bound.
LARGE_ROW_TOL = {torch.bfloat16: (2**-8 + 1e-3, 2**-126), torch.float16: (2**-11 + 3e-4, 2**-14)}


def large_magnitude_rows(shape, dtype):
    """randn * 3 around a per-row offset: 0, +-300, +-3000 (where m log2(e) rounded to fp32 is off by up to
    2^-12), and rows of a few distinct values near 6e4 (fp16) or 1e30, -1e30, 2.5e38 (bf16: beyond 2^64 and
    near the largest finite value, where only the elements equal to the row max count)."""
    rows, n = shape
    offsets = [0.0, 300.0, -3000.0, 3000.0, -300.0]
    offsets += [1e30, -1e30, 2.5e38] if dtype == torch.bfloat16 else [6e4]
    x = torch.randn(shape, device="cuda") * 3
    for r in range(rows):
        off = offsets[r % len(offsets)]
        if abs(off) > 1e4:
            x[r] = off * (1 + 2**-7 * torch.randint(0, 4, (n,), device="cuda"))
        else:
            x[r] += off
    return x.to(dtype)


def check_logsumexp_by_row(x, dtype):
    """fae.logsumexp over the last dim of a CUDA tensor x, each row against fp64 and torch on its own: the rows of
    large_magnitude_rows differ in magnitude by up to ~1e38, and check_against_reference's bound scales with the
    largest reference value it is given."""
    poison("cuda", x.shape[0] * x.element_size())
    out = fae.logsumexp(x, -1)
    for r in range(x.shape[0]):
        check_against_reference(out[r], logsumexp_ref(x[r], -1), torch.logsumexp(x[r], -1), dtype, f"logsumexp row {r}")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape", [(8, 2_097_152), (3, 1_000_000), (300, 20000)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_large_magnitude_rows_cuda(dtype, shape):
    # Long 16-bit rows through the split-row kernels (dual: 8 x 2_097_152; pipelined: split, whole), whose
    # exponentials fold the max into one FFMA (FusedExp2): every row against fp64 and torch, and every output
    # element against fp64 within LARGE_ROW_TOL.
    x = large_magnitude_rows(shape, dtype)
    rtol, atol = LARGE_ROW_TOL[dtype]
    for op, ref_fn, torch_fn in ROW_OPS:
        poison("cuda", x.numel() * x.element_size())
        out, ref, base = op(x, -1), ref_fn(x, -1), torch_fn(x, -1)
        for r in range(shape[0]):
            check_against_reference(out[r], ref[r], base[r], dtype, f"{op.__name__} row {r}")
        if op is fae.softmax:
            err = (out.double() - ref).abs()
            bad = (err > rtol * ref.abs() + atol).nonzero()
            assert bad.numel() == 0, f"softmax: {bad.shape[0]} elements off, first {bad[:4].tolist()}"
    check_logsumexp_by_row(x, dtype)


# fp32 / fp64 shapes for the kernel kinds the plans take on an sm_90 part of >= 100 SMs (H200 plan log, NOTES "s99
# call 4"): warp (128; 97 unaligned), block or split (4097), the column kernel (dim 0); on CUDA only, resident (fp32
# whole rows of 160 and 300 KB), dual (fp32 rows of 800 KB in 7 chunks), pipelined (3 rows of 1_000_000; fp64's long
# rows), and under safe / online the streaming kernels.
OFFSET_ROW_SHAPES = [((40, 128), -1), ((40, 97), -1), ((10, 4097), -1), ((2000, 5), 0)]
OFFSET_LONG_ROW_SHAPES = [((100, 40000), -1), ((150, 75000), -1), ((67, 200_000), -1), ((3, 1_000_000), -1)]


def _offset_shape_id(v):
    return "x".join(map(str, v)) if isinstance(v, tuple) else f"dim{v}"


def _run_offset_rows(device, dtype, algorithm, shape, dim):
    # Rows of randn * 3 offset by up to +-3e4: log_softmax's x - (m + log d) with m + log d rounded to one fp32 value
    # put one error, uniform within half an ulp of m, on every output of a row (5-9e-7 norm-wise at 300 against torch's
    # 2.6e-8; 2.6e-6 on the parent's 3000 rows) until the CUDA kernels formed (x - m) - log d, as torch and the CPU
    # kernels do (online_math.cuh, Epilogue). Each row is checked on its own (the largest offsets first, so that even 3
    # rows hold two): at 3e4 the old error passed the 1e-6 bound in ~2 % of draws, at 3000 in ~15 %. (The column
    # kernel accumulates fp32 in fp64: its case checks the plumbing, not this bug.)
    offsets = torch.tensor([3e4, -3000.0, 300.0, -3e4, 3000.0, 0.0, -300.0], dtype=torch.float64)
    lines = shape[dim]  # the reduced dim's length; the offset is per line along it
    count = math.prod(shape) // lines
    x = torch.randn(count, lines, dtype=torch.float64) * 3 + offsets.repeat(count // len(offsets) + 1)[:count, None]
    x = (x if dim == -1 else x.t()).to(device=device, dtype=dtype).contiguous()
    assert tuple(x.shape) == shape
    for op, ref_fn, torch_fn in ROW_AND_LSE_OPS:
        poison(device, x.numel() * x.element_size())
        out = op(x, dim) if op is fae.logsumexp else op(x, dim, algorithm=algorithm)
        ref, base = ref_fn(x, dim), torch_fn(x, dim)
        for r in range(count):  # line r along the reduced dim: row r (dim -1) or column r (dim 0)
            line = (lambda t: t[r]) if op is fae.logsumexp or dim == -1 else (lambda t: t[:, r])
            check_against_reference(line(out), line(ref), line(base), dtype, f"{op.__name__}{shape} dim {dim} line {r}")


@pytest.mark.parametrize("shape, dim", OFFSET_ROW_SHAPES, ids=_offset_shape_id)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_offset_rows_full_precision(device, dtype, algorithm, shape, dim):
    _run_offset_rows(device, dtype, algorithm, shape, dim)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape, dim", OFFSET_LONG_ROW_SHAPES, ids=_offset_shape_id)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_offset_rows_full_precision_long_cuda(dtype, algorithm, shape, dim):
    _run_offset_rows("cuda", dtype, algorithm, shape, dim)


FORCED_RAW_WIDE_LARGE_CHECK = """
import torch
import flash_attn_ext as fae
import test_softmax as t
for dtype in (torch.bfloat16, torch.float16):
    rtol, atol = t.LARGE_ROW_TOL[dtype]
    # d + len past the wide warp's first 5 vectors a lane (1031 at +1, 2047, 2045 at +3: folded on most shifts) and
    # within them (1277 at +3: the last 3 skipped)
    for length, offset in ((1031, 1), (2047, 0), (1277, 3), (2045, 3)):
        flat = t.large_magnitude_rows((67, length + 1), dtype).flatten()
        x = flat[offset:offset + 67 * length].view(67, length)  # rows off the grid by d = offset + row parity
        for op, ref_fn, torch_fn in t.ROW_OPS:
            t.poison("cuda", x.numel() * x.element_size())
            out, ref, base = op(x, -1), ref_fn(x, -1), torch_fn(x, -1)
            for r in range(x.shape[0]):
                t.check_against_reference(out[r], ref[r], base[r], dtype, f"{op.__name__} {length} +{offset} row {r}")
            if op is fae.softmax:
                err = (out.double() - ref).abs()
                bad = (err > rtol * ref.abs() + atol).nonzero()
                assert bad.numel() == 0, f"softmax x{length}: {bad.shape[0]} elements off, first {bad[:4].tolist()}"
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
def test_large_magnitude_raw_wide_warp_rows_cuda():
    # Unaligned 16-bit rows of 1025-2048 elements held raw on one warp (grid=1 at 8 vectors a lane: packed_store.cuh),
    # at large_magnitude_rows' magnitudes, where fp16's FusedExp2 correction (2^-r, |r| <= 2^-8 at |m| = 6e4) scales the
    # softmax output and a dropped or doubled one shows: every row against fp64 and torch, softmax elementwise within
    # LARGE_ROW_TOL.
    run_checked(FORCED_RAW_WIDE_LARGE_CHECK, FAE_SOFTMAX_CONFIG="kind=warp,vpt=8,grid=1")


WIDE_WARP_ROWS_PER_SM = 32  # softmax_cuda.cu: kWideWarpMinRowsPerSm


@pytest.mark.cuda
@requires_cuda
def test_wide_warp_logsumexp_cuda():
    # logsumexp of 16-bit rows of 1025-2048 elements (unaligned ones held on the memory's grid with its edges masked,
    # ShiftedRawLoads, the granule past 256 vectors folded in: FoldedGranule): "auto" runs one warp a row at 8 vectors
    # a lane where the rows give every SM 32 warps, else the block kernel's 64-thread blocks; the row max in the last
    # vector or the first element, inputs 1 element off the grid; and large_magnitude_rows (packed_lse.cuh's
    # FusedExp2), row by row.
    rows = WIDE_WARP_ROWS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    # 5 to 8 of a lane's 8 vectors live (129-160, 161-192, 193-224 and 225-256 vectors a row); 1275 and 1280 at +1 end
    # within a lane's first 5 vectors on some rows and past them on others (d + len against 1280: the 3-vector skip);
    # 2047 spans 257 vectors on the grid on 6 of 8 shifts, 2045 at +3 on half the rows (the fold)
    for dtype, length, offset in ((torch.bfloat16, 1032, 0), (torch.float16, 2048, 0), (torch.bfloat16, 2048, 0),
                                  (torch.bfloat16, 1025, 0), (torch.float16, 2041, 0), (torch.bfloat16, 1100, 3),
                                  (torch.float16, 2040, 1), (torch.bfloat16, 1301, 0), (torch.float16, 1544, 0),
                                  (torch.bfloat16, 1700, 5), (torch.bfloat16, 1275, 0), (torch.float16, 1280, 1),
                                  (torch.bfloat16, 2047, 0), (torch.float16, 2045, 3)):
        x = make_input(((rows + 3) * length + offset,), dtype, "cuda")[offset:].view(rows + 3, length)
        x[::7, -1] += 100.0
        x[3::7, 0] += 100.0
        poison("cuda", x.shape[0] * x.element_size())
        check_against_reference(fae.logsumexp(x, -1), logsumexp_ref(x, -1), torch.logsumexp(x, -1), dtype,
                                f"logsumexp {x.shape[0]}x{length}")
    for dtype, length in ((torch.float16, 1032), (torch.bfloat16, 2048), (torch.bfloat16, 2047)):
        check_logsumexp_by_row(large_magnitude_rows((rows, length), dtype), dtype)
    expected = [((rows, 2048), "bfloat16", "warp,lanes=32,vpt=8"), ((rows, 1032), "float16", "warp,lanes=32,vpt=8"),
                ((rows, 2041), "bfloat16", "warp,lanes=32,vpt=8"), ((rows, 1025), "float16", "warp,lanes=32,vpt=8"),
                ((rows - 1, 2048), "bfloat16", "block"), ((rows, 2047), "bfloat16", "warp,lanes=32,vpt=8"),
                ((rows, 2056), "bfloat16", "block"), ((rows, 1023), "bfloat16", "warp,lanes=32,vpt=4")]
    for ((r, cols), dtype, kind), line in zip(expected, _auto_plans(expected, "logsumexp")):
        assert re.search(rf"plan: {r}x{cols} kind={kind},", line), (dtype, line)


@pytest.mark.cuda
@requires_cuda
def test_unaligned_logsumexp_grid_rows_cuda():
    # logsumexp of unaligned 16-bit and fp32 rows on the warp kernel at every team width, held as 16-byte vectors on
    # the memory's grid with the edges masked (16-bit: ShiftedRawLoads, fp32: load_row_folded; lse_rows_on_grid) in
    # the slots of their own vectors: rows of 1-1023 elements (16-bit: up to 128 vectors, 32 lanes of 4; fp32: up to
    # 256, 32 lanes of 8), inputs on the grid and 1 or 3 elements off it (odd lengths: every shift among the rows), the
    # row max at either edge; special and large-magnitude rows. Where a row's shift takes it one granule past its own
    # vectors (on some shifts: 3, 7, 127, 255, 1023, and for 16-bit 5, 1018 at +1, 1020 at +3), lane 0 folds that
    # granule in (FoldedGranule).
    rows = WIDE_WARP_ROWS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        cases = [(67, length, offset) for length in (1, 3, 5, 7, 9, 15, 31, 63, 97, 127, 255, 383, 511, 1000, 1017)
                 for offset in (0, 1, 3)]
        # 1024 at +7 and 128 at +3: every row d elements off the grid and folded with count = d (lane 0's first vector
        # all but its last places from the granule past the slots; 16-bit d = 7: word 3's halves from both)
        cases += [(67, 1018, 1), (67, 1023, 0), (rows, 1023, 0), (rows, 1020, 3), (67, 1024, 7), (67, 128, 3)]
        for r, length, offset in cases:
            x = make_input((r * length + offset,), dtype, "cuda")[offset:].view(r, length)
            x[::7, -1] += 100.0
            x[3::7, 0] += 100.0
            poison("cuda", r * x.element_size())
            check_against_reference(fae.logsumexp(x, -1), logsumexp_ref(x, -1), torch.logsumexp(x, -1), dtype,
                                    f"logsumexp {r}x{length} at +{offset}")
        for length in (7, 127, 1017):
            _run_special(special_rows(length, dtype, "cuda").repeat(3, 1), f"x{length}", ROW_AND_LSE_OPS[2:])
            check_logsumexp_by_row(large_magnitude_rows((67, length), dtype), dtype)
    expected = [((67, 7), "bfloat16", "warp,lanes=1,vpt=1"), ((67, 127), "float16", "warp,lanes=4,vpt=4"),
                ((67, 1017), "bfloat16", "warp,lanes=32,vpt=4"), ((67, 1023), "bfloat16", "warp,lanes=32,vpt=4"),
                ((rows, 1023), "float16", "warp,lanes=32,vpt=4"), ((67, 127), "float32", "warp,lanes=8,vpt=4"),
                ((67, 1017), "float32", "warp,lanes=32,vpt=8"), ((67, 1023), "float32", "warp,lanes=32,vpt=8")]
    for ((r, cols), dtype, kind), line in zip(expected, _auto_plans(expected, "logsumexp")):
        assert re.search(rf"plan: {r}x{cols} kind={kind},", line), (dtype, line)


@pytest.mark.cuda
@requires_cuda
def test_fp64_wide_warp_rows_cuda():
    # fp64 rows of 257-512 elements on one warp each, 8 vectors (16 doubles) a lane (kDoubleWarpMaxVpl) where rows give
    # every SM kWideWarpMinRowsPerSm, every output and algorithm, element by element on the general instantiation,
    # aligned or not (since session 102; aligned ones had fixed instantiations of their own), as are unaligned softmax
    # and log_softmax rows of 162-256 elements (logsumexp's stay on 4 vectors; since session 101 auto's rows of 129-161
    # do too, at 128 threads, since session 108 those of 162-225 from 96 rows an SM, and its rows of 65-89 take 16
    # lanes of 4 vectors, since session 103 those of 65-97 on a grid capped at 12 blocks an SM since session 104:
    # kDoubleHalfTeamBlocksPerSm; log_softmax's 65-101 uncapped). 320
    # is the last length whose rows end in a lane's first 5 vectors (the rest skipped), 321 the first past it; 511, 257,
    # 255 and 129 odd, 501, 400 and 199 at +1 off the grid; 161 and 131 leave a lane's last vector dead in every lane
    # (skipped: live_vectors; online, at 8 vectors: 5), 67 (auto: 16 x 4) one too, and 67 online (32 lanes x 2 vectors)
    # and 33 (16 x 2) a lane's last value; the row max at either edge.
    rows = WIDE_WARP_ROWS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    dtype = torch.float64
    for length, offset in ((512, 0), (511, 0), (501, 1), (320, 0), (321, 0), (258, 0), (257, 0), (400, 1), (255, 0),
                           (199, 1), (161, 0), (131, 0), (129, 0), (67, 0), (33, 1)):
        x = make_input((rows * length + offset,), dtype, "cuda")[offset:].view(rows, length)
        x[::7, -1] += 100.0
        x[3::7, 0] += 100.0
        for algorithm in ("auto", "online"):
            for op, ref_fn, torch_fn in ROW_AND_LSE_OPS:
                kwargs = {} if op is fae.logsumexp else {"algorithm": algorithm}
                poison("cuda", x.numel() * x.element_size())
                check_against_reference(op(x, -1, **kwargs), ref_fn(x, -1), torch_fn(x, -1), dtype,
                                        f"{op.__name__} {algorithm} {rows}x{length} at +{offset}")
    for length in (512, 501):
        special = special_rows(length, dtype, "cuda")
        _run_special(special.repeat(rows // special.shape[0] + 1, 1), f"x{length}", ROW_AND_LSE_OPS)
    expected = [((rows, 501), "float64", "warp,lanes=32,vpt=8"), ((rows, 512), "float64", "warp,lanes=32,vpt=8"),
                ((rows, 258), "float64", "warp,lanes=32,vpt=8"), ((rows, 256), "float64", "warp,lanes=32,vpt=4"),
                ((rows - 1, 501), "float64", "block"), ((rows, 513), "float64", "block"),
                ((rows, 255), "float64", ("warp,lanes=32,vpt=8", "warp,lanes=32,vpt=4")),
                ((rows - 1, 255), "float64", ("warp,lanes=32,vpt=4",) * 2),
                ((rows, 129), "float64", ("warp,lanes=32,vpt=4,threads=128", "warp,lanes=32,vpt=4")),
                ((rows, 171), "float64", ("warp,lanes=32,vpt=8", "warp,lanes=32,vpt=4")),
                ((rows, 243), "float64", ("warp,lanes=32,vpt=8", "warp,lanes=32,vpt=4")),
                ((rows, 67), "float64", ("warp,lanes=16,vpt=4,.*,bpsm=12", "warp,lanes=16,vpt=4,.*,bpsm=0")),
                ((rows, 97), "float64", ("warp,lanes=16,vpt=4,.*,bpsm=12", "warp,lanes=16,vpt=4,.*,bpsm=0")),
                ((rows, 99), "float64", ("warp,lanes=32,vpt=2,.*,bpsm=0", "warp,lanes=16,vpt=4,.*,bpsm=0")),
                ((rows, 127), "float64", ("warp,lanes=32,vpt=2", "warp,lanes=16,vpt=4"))]
    for i, op in enumerate(("softmax", "logsumexp")):
        for ((r, cols), _, kind), line in zip(expected, _auto_plans(expected, op)):
            kind = kind if isinstance(kind, str) else kind[i]
            assert re.search(rf"plan: {r}x{cols} kind={kind},", line), (op, line)


def _check_fp64_rows(rows, lengths):
    # softmax and log_softmax of fresh fp64 CUDA rows of each length against fp64 after poisoning, the row max at
    # either edge
    for length in lengths:
        x = make_input((rows, length), torch.float64, "cuda")
        x[::7, -1] += 100.0
        x[3::7, 0] += 100.0
        for op, ref_fn, torch_fn in ROW_OPS:
            poison("cuda", x.numel() * x.element_size())
            check_against_reference(op(x, -1), ref_fn(x, -1), torch_fn(x, -1), torch.float64,
                                    f"{op.__name__} {rows}x{length}")


def _assert_fp64_row_plans(rows, kinds_by_op):
    # The plan "auto" takes for fp64 rows x length, per op name and length: a regex the plan line's kind must match.
    for op, kinds in kinds_by_op.items():
        expected = [((rows, length), "float64", kind) for length, kind in kinds.items()]
        for ((r, cols), _, kind), line in zip(expected, _auto_plans(expected, op)):
            assert re.search(rf"plan: {r}x{cols} kind={kind},", line), (op, line)


@pytest.mark.cuda
@requires_cuda
def test_fp64_capped_half_team_rows_cuda():
    # Unaligned fp64 softmax rows of 65-97 elements (kDoubleHalfTeamMaxLen) run 16 lanes of 4 vectors on a grid of at
    # most kDoubleHalfTeamBlocksPerSm (12) blocks an SM, each warp taking row after row, and log_softmax rows of 65-101
    # (kDoubleHalfTeamLogMaxLen) on 16 lanes uncapped: rows past two full passes of that grid and a ragged last pass,
    # against fp64 after poisoning, at 65, 67, 89, 91, 97, 99 and 101 elements (softmax's on 32 lanes from 98), the row
    # max at either edge; and the plans "auto" takes at both ends.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = 2 * 12 * sms * 16 + 21
    _check_fp64_rows(rows, (65, 67, 89, 91, 97, 99, 101))
    capped, uncapped, whole = "warp,lanes=16,vpt=4,.*,bpsm=12", "warp,lanes=16,vpt=4,.*,bpsm=0", "warp,lanes=32,vpt=2"
    _assert_fp64_row_plans(rows, {"softmax": {65: capped, 97: capped, 99: whole, 101: whole},
                                  "log_softmax": {65: uncapped, 97: uncapped, 101: uncapped, 103: whole}})


@pytest.mark.cuda
@requires_cuda
def test_fp64_many_wide_rows_cuda():
    # Unaligned fp64 softmax and log_softmax rows on whole warps of 2 vectors a lane (softmax 98-128 elements,
    # log_softmax 102-128) and of 4 at 128 threads (129-161; since session 108 162-225 from
    # kDoubleFourVectorLongMinRowsPerSm, 96 rows an SM, log_softmax's since session 109 162-256), many of them (from
    # kManyFp64WideScalarRowsMinBlocksPerSm blocks of 256 threads an SM: the many-rows instantiation where
    # many_scalar_rows says so), against fp64 after poisoning, the row max at either edge; and the plans "auto" takes at
    # the ends of each range, and beside them.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = 6 * sms * 8 + 13
    _check_fp64_rows(rows, (99, 103, 105, 127, 129, 143, 161))
    two, four, eight = "warp,lanes=32,vpt=2", "warp,lanes=32,vpt=4,threads=128", "warp,lanes=32,vpt=8"
    _assert_fp64_row_plans(rows, {"softmax": {99: two, 127: two, 129: four, 161: four, 163: eight},
                                  "log_softmax": {103: two, 127: two, 129: four, 161: four, 199: eight}})
    long_rows = 96 * sms + 13
    _check_fp64_rows(long_rows, (163, 199, 225, 227, 241, 255))
    # special values (NaN, +-inf rows) on the many-rows kernels: 16 x 4 (97), 32 x 2 (113), 32 x 4 (199, 241: the
    # log_softmax sums by exp_sum_term), aligned 32 x 4 (200, log_softmax)
    for length in (97, 113, 199, 241, 200):
        special = special_rows(length, torch.float64, "cuda")
        _run_special(special.repeat(long_rows // special.shape[0] + 1, 1), f"x{length}")
    _assert_fp64_row_plans(long_rows, {"softmax": {163: four, 225: four, 227: eight, 255: eight},
                                       "log_softmax": {163: four, 199: four, 225: four, 227: four, 255: four}})


@pytest.mark.cuda
@requires_cuda
def test_fp64_many_aligned_rows_cuda():
    # Aligned fp64 rows (16-byte vectors) on the many-rows instantiations (aligned_many_rows, where many_scalar_rows
    # says so), both ops against fp64 after poisoning, the row max at either edge: whole warps of 2 vectors (66-128
    # elements) and of 4 (130-256) at 48 rows an SM (34 and 64: 16 lanes of 2, the general kernel), and 16 lanes of 4
    # where auto takes them (half_team_rows: from 128 rows an SM).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    _check_fp64_rows(6 * sms * 8 + 13, (34, 64, 66, 100, 128, 130, 160, 200, 256))
    _check_fp64_rows(128 * sms + 13, (66, 128))


FP64_MANY_ROWS_SHORT_CHECK = """
import os
import torch
import test_softmax as t
config = os.environ["FAE_SOFTMAX_CONFIG"]
lanes = int(config.split("lanes=")[1].split(",")[0])
vpt = int(config.split("vpt=")[1].split(",")[0])
rows = 6 * torch.cuda.get_device_properties(0).multi_processor_count * 8 + 13
always_live = 3 if (lanes, vpt) == (32, 2) else 4
edge = lanes * always_live
for length in (1, 7, edge - 1, edge, edge + 1, 2 * lanes * vpt - 1, 2 * lanes * vpt):
    # one element off the 16-byte grid: element by element (the many-rows kernels' layout) at every length
    x = t.make_input((rows * length + 1,), torch.float64, "cuda")[1:].view(rows, length)
    x[::7, -1] += 100.0
    x[3::7, 0] += 100.0
    for op, ref_fn, torch_fn in t.ROW_OPS:
        t.poison("cuda", x.numel() * x.element_size())
        t.check_against_reference(op(x, -1), ref_fn(x, -1), torch_fn(x, -1), torch.float64,
                                  f"{op.__name__} {rows}x{length}")
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=warp,lanes=32,vpt=4,threads=128", "kind=warp,lanes=16,vpt=4",
                                    "kind=warp,lanes=32,vpt=2"])
def test_fp64_many_rows_short_forced_cuda(config):
    # fp64's many-rows kernels load each lane's first elements without a predicate (many_rows_always_live: 4 on 32 x 4
    # and 16 x 4, 3 on 32 x 2), so they run only rows of lanes * that many elements or more; a plan forced onto
    # shorter rows (auto gives them none) takes the general instantiation. Many rows (the many-rows kernels' gate) one
    # element off the grid, at 1 and 7 elements, at the edge and beside it, and at a team's longest row, softmax and
    # log_softmax against fp64 after poisoning, the row max at either edge.
    run_checked(FP64_MANY_ROWS_SHORT_CHECK, FAE_SOFTMAX_CONFIG=config)


@pytest.mark.cuda
@requires_cuda
def test_fp64_long_rows_cuda():
    # fp64 rows beyond 512 threads of registers: on sm_90 the block kernel (with shared memory: 2b.; a block a row of
    # up to 1024 threads where 2b. does not take them) or the streaming kernel, not the pipelined or split ones
    # (heuristic_plan says why): every op on rows of each kind, against fp64 after poisoning (any GPU), and their plans
    # (sm_90 parts of >= 100 SMs: another part's shared memory and kernels give other plans).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [(2 * sms, 16384), (2 * sms + 1, 8192), (3, 262_144), (2, 131_073), (8, 8192), (5, 8191)]
    for shape in shapes:
        x = make_input(shape, torch.float64, "cuda")
        x[::7, -1] += 100.0
        for op, ref_fn, torch_fn in ROW_AND_LSE_OPS:
            poison("cuda", x.numel() * x.element_size())
            check_against_reference(op(x, -1), ref_fn(x, -1), torch_fn(x, -1), torch.float64, f"{op.__name__} {shape}")
    _large_sm90_sms("block or streaming")
    expected = [(shapes[0], "float64", "block"), (shapes[1], "float64", "block"), ((64, 262_144), "float64", "stream"),
                ((8, 8192), "float64", "block"), ((4 * sms, 8191), "float64", "block")]
    for (shape, _, kind), line in zip(expected, _auto_plans(expected, "softmax")):
        assert re.search(rf"plan: {shape[0]}x{shape[1]} kind={kind},", line), line


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("length, dim", [(2, -1), (97, -1), (128, -1), (300, -1), (1025, -1), (4097, -1),
                                         (100_003, -1), (97, 0)])
@pytest.mark.parametrize("device", DEVICES)
def test_fp64_exponential_ulps(device, length, dim, algorithm):
    # The fp64 kernels' exponential read off directly: a row [0, t, -inf, ...] with t <= -37 sums to exactly 1
    # (e^t < 2^-53), so its softmax holds exp(t) itself. Against libm's exp in this process (within ~0.5 ulp; CUDA's
    # exp within 1) the bit patterns of these positive doubles differ by at most 1, subnormal results (t < -708.4)
    # and those that round to 0 (t < -745.13) included, in the warp, block, long-row and column kernels; most match
    # exactly. Why: any faster fp64 exponential must keep this (session 102's branch-free one read 0.96 ulp).
    rows = 16 if length > 10_000 else 2048
    t = -37.0 - torch.rand(rows, dtype=torch.float64) * 709.0
    t[:4] = torch.tensor([-708.3964185322641, -745.1332191019411, -745.1332191019412, -37.0], dtype=torch.float64)
    x = torch.full((rows, length), -math.inf, dtype=torch.float64)
    x[:, 0] = 0.0
    x[:, 1] = t
    x = (x.t().contiguous() if dim == 0 else x).to(device)
    poison(device, x.numel() * x.element_size())
    out = fae.softmax(x, dim, algorithm=algorithm).cpu()
    out = out.t() if dim == 0 else out
    assert (out[:, 0] == 1).all() and (out[:, 2:] == 0).all(), "the row's other elements"
    want = torch.tensor([math.exp(v) for v in t.tolist()], dtype=torch.float64)
    ulps = (out[:, 1].contiguous().view(torch.int64) - want.view(torch.int64)).abs()
    worst = int(ulps.argmax())
    assert int(ulps[worst]) <= 1, f"exp({t[worst].item()!r}) = {out[worst, 1].item()!r}, libm {want[worst].item()!r}"
    assert (ulps == 0).double().mean() >= 0.8, f"only {(ulps == 0).double().mean():.3f} exact"


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape", [(40, 16), (40, 1024), (40, 2048), (40, 4096)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_large_magnitude_logsumexp_rows_cuda(dtype, shape):
    # logsumexp's warp and block rows at large_magnitude_rows' magnitudes: on 16-bit rows their sums take the max into
    # one FFMA (FusedExp2: fp16's correction near 6e4, bf16's scaled constant beyond 2^64; packed_lse.cuh).
    check_logsumexp_by_row(large_magnitude_rows(shape, dtype), dtype)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_split_rows_back_to_back_cuda(dtype):
    # Long rows split across blocks, called again and again on new inputs of one shape: each call's exchange
    # workspace lands on the memory of the previous call's, whose partials must never pass for its own. (fp64 rows of
    # 4000: few rows of <= 512 threads split on every GPU; on sm_90 longer ones stream.)
    shape = (16, 4000) if dtype == torch.float64 else (16, 262_144)
    inputs = [make_input(shape, dtype, "cuda") for _ in range(4)]
    outs = [fae.softmax(x, -1) for x in inputs]
    for x, out in zip(inputs, outs):
        check_against_reference(out, softmax_ref(x, -1), torch.softmax(x, -1), dtype, "softmax")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("shape, dim", [((4096, 128), -1), ((512, 4097), -1), ((16, 262_144), -1), ((4097, 7), 0)],
                         ids=["warp", "block", "split", "columns"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_chained_calls_wait_for_the_previous_kernel_cuda(algorithm, shape, dim):
    # On sm_90 our kernels launch early, overlapping the previous kernel's tail (kernel_launch.h), and must wait
    # for it before touching memory. Each call here consumes the previous call's output at once, and each output
    # lands on NaN-poisoned memory that the call two back read: a kernel that read its input before the
    # previous one wrote it reads NaN, one that wrote before the previous one finished reading corrupts its input.
    x = make_input(shape, torch.float32, "cuda")
    ref = x.double()
    poison("cuda", x.numel() * 4)
    y = x
    for step in range(4):
        op, ref_fn = (fae.softmax, softmax_ref) if step % 2 == 0 else (fae.log_softmax, log_softmax_ref)
        y, ref = op(y, dim, algorithm=algorithm), ref_fn(ref, dim)
    check_against_reference(y, ref, None, torch.float32, f"softmax / log_softmax chain ({algorithm})")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype, shape", [(torch.float32, (16, 262_144)), (torch.bfloat16, (16, 262_144)),
                                          (torch.float64, (16, 4000)), (torch.bfloat16, (8, 4_194_304))])
def test_chained_split_rows_in_graph_cuda(dtype, shape):
    # Split-row calls captured back to back, each consuming the previous call's output, replayed on new inputs.
    # Under capture each call zeroes its exchange workspace by a small kernel, and on sm_90 both it and the
    # cooperative launch start early (kernel_launch.h): a split kernel that read the workspace before the zeroing
    # ended, or the input before the previous call wrote it, fails here; the workspaces of the calls alias.
    # bf16 8 x 4M runs on the resident kernel (sm_90); fp64 rows of 4000, few, split on every GPU (longer ones stream
    # on sm_90).
    static_x = make_input(shape, dtype, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fae.log_softmax(fae.softmax(static_x, -1), -1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = static_x
        for step in range(4):
            y = fae.softmax(y, -1) if step % 2 == 0 else fae.log_softmax(y, -1)
    for _ in range(3):
        new_x = make_input(shape, dtype, "cuda")
        static_x.copy_(new_x)
        y.fill_(math.nan)  # the graph's own output block: unwritten elements stay NaN
        graph.replay()
        torch.cuda.synchronize()
        ref, base = new_x.double(), new_x
        for step in range(4):
            ref = softmax_ref(ref, -1) if step % 2 == 0 else log_softmax_ref(ref, -1)
            base = torch.softmax(base, -1) if step % 2 == 0 else torch.log_softmax(base, -1)
        check_against_reference(y, ref, base, dtype, "softmax / log_softmax chain in a graph")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_cuda_respects_current_stream(name):
    # x is NaN until a side stream, busy sleeping first, fills it. An op launched on any stream other than
    # the current (side) one runs before the fill and reads NaN.
    shape = (256, 4097)
    good = make_input(shape, torch.float32, "cuda")
    x = torch.full(shape, math.nan, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.copy_(good)
        out = getattr(fae, name)(x, -1)
    side.synchronize()
    ref = {"softmax": softmax_ref, "log_softmax": log_softmax_ref, "logsumexp": logsumexp_ref}[name](good, -1)
    check_against_reference(out, ref, None, torch.float32, name)


FORCED_CONFIG_CHECK = """
import os
import torch
import test_softmax as t
ops = t.ROW_AND_LSE_OPS
sms = torch.cuda.get_device_properties(0).multi_processor_count
# (3 sms, 5 sms - 7 and 7 sms - 3 rows: the dual kernel's whole rows in odd round counts, 3 with the last full, 5 and 7
# with the last part-filled; the register role takes the last round: 16-bit rows from 3 rounds, fp32 from 5)
shapes = ((5, 4096), (200, 8192), (7, 40_000), (3 * sms, 4096), (5 * sms - 7, 4096), (7 * sms - 3, 4096))
# odd lengths: each row's items shifted onto the 16-byte grid, every shift among the rows (the 200 and 300 rows: the
# dual kernel's second round, its register role; 300 rows: 3 rounds on 132 SMs; 5 sms: 5 rounds, the last full)
odd = ((5, 4097), (7, 40_003), (200, 8193), (300, 4097), (5 * sms, 4097))
dual = os.environ["FAE_SOFTMAX_CONFIG"].startswith("kind=dual")
for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
    unaligned = not (dual and dtype == torch.float64)  # the dual kernel takes unaligned fp64 rows not at all
    for shape in shapes + (odd if unaligned else ()):
        x = t.make_input(shape, dtype, "cuda")
        for op, ref, base in ops:
            t.poison("cuda", x.numel() * x.element_size())
            t.check_against_reference(op(x, -1), ref(x, -1), base(x, -1), dtype, op.__name__ + str(shape))
    # special values (NaN, +-inf rows) in 52 rows: enough items for a second round of a split configuration
    for length in (40_000, 40_001) if unaligned else (40_000,):
        t._run_special(t.special_rows(length, dtype, "cuda").repeat(4, 1), f"x{length}", t.ROW_AND_LSE_OPS)
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=pipe", "kind=pipe,chunks=3,threads=256", "kind=pipe,chunks=7,threads=512",
                                    "kind=pipe,bpsm=2,chunks=4", "kind=pipe,bpsm=2,pieces=3", "kind=dual",
                                    "kind=dual,chunks=5", "kind=stream", "kind=stream,steps=1"])
def test_forced_configs_cuda(config):
    # FAE_SOFTMAX_CONFIG (the tuning hook) is read once per process: each configuration runs in a child that
    # checks every op, on short and long rows split into the configuration's chunks (or whole rows), aligned and
    # not; with chunks=5 the dual kernel's 200-row and 52-row inputs take several rounds, so both of its roles run.
    if config.startswith(("kind=pipe", "kind=dual")) and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the pipelined and dual kernels need sm_90")
    run_checked(FORCED_CONFIG_CHECK, FAE_SOFTMAX_CONFIG=config)


FORCED_LSE_ROWS_CHECK = """
import os
import torch
import flash_attn_ext as fae
import test_softmax as t
config = os.environ["FAE_SOFTMAX_CONFIG"]
block = config.startswith("kind=block")
vpl = None if block else int(config.split("vpt=")[1].split(",")[0])
for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
    vec = 16 // (torch.finfo(dtype).bits // 8)
    # the longest row the configuration holds: a 1024-thread block of the large size (32 elements a thread, fp64 8),
    # or 32 lanes of vpl vectors; rows enough for several items a block when bpsm=1 caps the grid at one block an SM
    longest, rows = (1024 * (8 if dtype == torch.float64 else 32), 300) if block else (32 * vpl * vec, 3000)
    # one unaligned length: the block's, and the warp's longest (16-bit and fp32 on the memory's grid); and for the
    # warp a short unaligned row, whose derived lanes are 32 where the kernel's team is a whole warp at compile time
    # (16-bit on the grid at 8 vectors), else the fewest that hold it; and one element short of the longest at 4
    # vectors (fp32 and fp64: and 8), on the grid one granule past the lanes' slots on most shifts (16-bit and fp32:
    # folded, FoldedGranule; fp64 element-wise); 127: folded at fewer lanes than 32 (fp32 at 8 vectors: 4 lanes)
    lengths = (vec, longest // 2, longest) + ((longest // 2 + 1,) if block else (longest - vec + 1, 97, 127))
    lengths += (longest - 1,) if vpl == 4 or (vpl == 8 and vec <= 4) else ()
    for length in lengths:
        x = t.make_input((rows, length), dtype, "cuda")
        x[::7, -1] += 100.0  # the row max in the last vector
        t.poison("cuda", rows * x.element_size())
        t.check_against_reference(fae.logsumexp(x, -1), t.logsumexp_ref(x, -1), torch.logsumexp(x, -1), dtype,
                                  f"logsumexp {rows}x{length}")
    for length in (longest,) if block else (longest, longest - vec + 1):  # warp: the unaligned longest too
        t._run_special(t.special_rows(length, dtype, "cuda").repeat(3, 1), f"x{length}", t.ROW_AND_LSE_OPS[2:])
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=block,vpt=large", "kind=block,vpt=large,bpsm=1", "kind=warp,vpt=4,bpsm=1",
                                    "kind=warp,vpt=8,bpsm=1"])
def test_forced_logsumexp_rows_cuda(config):
    # logsumexp's fixed row kernels (SafeLogSumExp, kLse; on 16-bit rows packed_lse.cuh) where "auto" does not take
    # them: the block kernel up to 1024 threads (sm_90 streams rows beyond 512), and grids of one block an SM that walk
    # several row groups (the warp kernel's) or rows (the block kernel's) a block.
    run_checked(FORCED_LSE_ROWS_CHECK, FAE_SOFTMAX_CONFIG=config)


FORCED_WIDE_WARP_CHECK = """
import torch
import flash_attn_ext as fae
import test_softmax as t
for dtype in (torch.bfloat16, torch.float16):
    # 1280: the last length whose rows end in a lane's first 5 vectors (the rest skipped); 1288: the first past it
    for rows, length in ((37, 2048), (97, 1032), (7, 1104), (1, 1536), (1025, 1280), (5, 1288), (3, 520)):
        x = t.make_input((rows, length), dtype, "cuda")
        for op, ref_fn, torch_fn in t.ROW_OPS:
            t.poison("cuda", x.numel() * x.element_size())
            t.check_against_reference(op(x, -1, algorithm="safe"), ref_fn(x, -1), torch_fn(x, -1), dtype,
                                      f"{op.__name__} {rows}x{length}")
    t._run_special(t.special_rows(2048, dtype, "cuda").repeat(3, 1), "x2048", t.ROW_OPS)
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
def test_forced_wide_warp_softmax_cuda():
    # Aligned 16-bit softmax and log_softmax rows forced onto the warp kernel at 8 vectors a lane (rows of up to 2048
    # elements on one warp; shorter ones on fewer lanes), every output element against fp64 after poisoning.
    run_checked(FORCED_WIDE_WARP_CHECK, FAE_SOFTMAX_CONFIG="kind=warp,vpt=8")


FORCED_GRID_ROWS_CHECK = """
import os
import pytest
import torch
import flash_attn_ext as fae
import test_softmax as t
vpl = int(os.environ["FAE_SOFTMAX_CONFIG"].split("vpt=")[1].split(",")[0])
# compiled for 16-bit types only (fp32 lost there): an error naming the dtypes, not a fallback
with pytest.raises(RuntimeError, match="grid=1 is compiled for float16 and bfloat16 only"):
    fae.softmax(t.make_input((3, 97), torch.float32, "cuda"), -1)
for dtype in (torch.bfloat16, torch.float16):
    vec = 8
    longest = 32 * vpl * vec
    # rows the team holds in the slots of its own vectors at every width the lengths derive: one element, one vector, odd
    # lengths on a power of two vectors less one element (folded on most shifts), and the longest, less one and
    # less a vector plus one; inputs on the grid and 1 or 3 elements off it (odd lengths: every shift among the rows)
    lengths = {1, 3, vec, vec + 1, 2 * vec - 1, 97, longest // 2 - 1, longest - vec + 1, longest - 1}
    if vpl == 8:  # one warp, 8 vectors a lane: rows whose d + len ends in a lane's first 5 vectors skip the other 3
        head = 32 * 5 * vec
        lengths |= {head - 3, head, head + 1}
    lengths = sorted(lengths)
    for length in [n for n in lengths if 0 < n <= longest] + [longest]:  # longest: unaligned at +1 and +3 only
        for offset in (0, 1, 3):
            x = t.make_input((67 * length + offset,), dtype, "cuda")[offset:].view(67, length)
            x[::7, -1] += 100.0  # the row max in the last element: folded on most shifts
            x[3::7, 0] += 100.0
            for op, ref_fn, torch_fn in t.ROW_OPS:  # off the grid, the fresh output lies on another: stores apart
                t.poison("cuda", x.numel() * x.element_size())
                t.check_against_reference(op(x, -1), ref_fn(x, -1), torch_fn(x, -1), dtype,
                                          f"{op.__name__} 67x{length} at +{offset}")
    t._run_special(t.special_rows(longest - 1, dtype, "cuda").repeat(3, 1), f"x{longest - 1}")
    # the online reduction has no instantiation on the grid: an error naming it, not a fallback
    with pytest.raises(RuntimeError, match="grid=1 is compiled for the max-then-sum reduction"):
        fae.softmax(t.make_input((3, 97), dtype, "cuda"), -1, algorithm="online")
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=warp,vpt=1,grid=1", "kind=warp,vpt=2,grid=1", "kind=warp,vpt=4,grid=1",
                                    "kind=warp,vpt=8,grid=1", "kind=warp,vpt=2,grid=1,threads=64"])
def test_forced_grid_softmax_rows_cuda(config):
    # softmax and log_softmax of unaligned 16-bit rows held as 16-byte vectors on the memory's grid in the slots of their
    # own vectors, the granule past them folded in (grid=1, FoldedGranule; "auto" takes them where grid_softmax_rows
    # says: test_grid_softmax_routing_cuda): every shift, team widths 1-32 (vpt=8: whole warps, rows of up to 2048
    # elements), the row max in the folded granule; threads=64: blocks of 2-64 rows (the rows a block holds are the
    # launch's block over the team width).
    run_checked(FORCED_GRID_ROWS_CHECK, FAE_SOFTMAX_CONFIG=config)


# softmax / log_softmax of (rows, cols, dtype name, op name, offset, algorithm) CASES through "auto", each checked
ROUTED_ROWS_CHECK = """
import torch
import flash_attn_ext as fae
import test_softmax as t
ops = {fn.__name__: (fn, ref_fn, torch_fn) for fn, ref_fn, torch_fn in t.ROW_OPS}
for rows, cols, dtype, op, offset, algorithm in CASES:
    fn, ref_fn, torch_fn = ops[op]
    x = t.make_input((rows * cols + offset,), getattr(torch, dtype), "cuda")[offset:].view(rows, cols)
    t.poison("cuda", x.numel() * x.element_size())
    t.check_against_reference(fn(x, -1, algorithm=algorithm), ref_fn(x, -1), torch_fn(x, -1), x.dtype,
                              f"{op} {rows}x{cols} at +{offset} ({algorithm})")
print("checked")
"""


def _routed_plans(cases):
    # (case, expected, plan line) for each (case, expected) of cases: the case run through ROUTED_ROWS_CHECK in a child
    # process, its plan as "auto" logged it (FAE_SOFTMAX_LOG_PLAN).
    code = ROUTED_ROWS_CHECK.replace("CASES", repr([case for case, _ in cases]))
    return [(case, expected, line) for (case, expected), line in zip(cases, _logged_plans(code, len(cases)))]


def _assert_block_plans(cases):
    # Each case's plan as "auto" logged it: a block of the expected threads and shared-memory vectors a thread.
    for (rows, cols, *_), (threads, smem), line in _routed_plans(cases):
        assert re.search(rf"plan: {rows}x{cols} kind=block,lanes=0,vpt=\d+,threads={threads},smem={smem},", line), line


@pytest.mark.cuda
@requires_cuda
def test_grid_softmax_routing_cuda():
    # Where "auto" holds unaligned softmax and log_softmax rows on the memory's grid (grid=1, grid_softmax_rows): 16-bit
    # rows of 9-128 vectors whose output lies on the input's grid, teams of >= 8 lanes of <= 4 vectors, rows of <= 32
    # vectors only at >= 32 rows per SM, and rows of 129-256 vectors on whole warps of 8 only there (warp_max_vpl); not
    # rows of 8 vectors, fp32, aligned rows, the online reduction, nor an input off the fresh output's grid (offset 1).
    many = 32 * torch.cuda.get_device_properties(0).multi_processor_count
    cases = [  # rows, cols, dtype, op, offset, algorithm: lanes, vpt (None: off the grid)
        ((many, 65, "bfloat16", "softmax", 0, "auto"), (8, 2)), ((many, 97, "float16", "log_softmax", 0, "auto"), (8, 2)),
        ((many, 127, "bfloat16", "softmax", 0, "safe"), (8, 2)), ((many, 255, "bfloat16", "log_softmax", 0, "auto"), (8, 4)),
        ((67, 257, "float16", "softmax", 0, "auto"), (16, 4)), ((67, 1023, "bfloat16", "log_softmax", 0, "auto"), (32, 4)),
        ((67, 1017, "bfloat16", "softmax", 0, "auto"), (32, 4)),
        ((many, 1031, "bfloat16", "softmax", 0, "auto"), (32, 8)),
        ((many, 2047, "float16", "log_softmax", 0, "safe"), (32, 8)),
        ((many - 1, 1031, "bfloat16", "softmax", 0, "auto"), None),
        ((many, 1031, "bfloat16", "softmax", 0, "online"), None),
        ((many, 2047, "bfloat16", "softmax", 1, "auto"), None),
        ((many - 1, 127, "bfloat16", "softmax", 0, "auto"), None), ((many, 61, "bfloat16", "softmax", 0, "auto"), None),
        ((many, 127, "float32", "softmax", 0, "auto"), None), ((many, 128, "bfloat16", "softmax", 0, "auto"), None),
        ((67, 1023, "bfloat16", "softmax", 0, "online"), None), ((67, 1023, "bfloat16", "softmax", 1, "auto"), None)]
    for (rows, cols, *_), team, line in _routed_plans(cases):
        if team is None:
            assert re.search(rf"plan: {rows}x{cols} kind=.*,grid=0$", line), line
        else:
            assert re.search(rf"plan: {rows}x{cols} kind=warp,lanes={team[0]},vpt={team[1]},.*,grid=1$", line), line


@pytest.mark.cuda
@requires_cuda
def test_half_team_routing_cuda():
    # Where "auto" runs aligned 16-bit softmax and log_softmax rows on half the lanes at 4 vectors each (half_team_rows):
    # rows of 17-64 vectors that fill at most 7/8 of their teams of 2 vectors a lane, any algorithm, where the halved
    # teams give every SM 64 warps; fp32 rows alike from 33 vectors (teams of 32 lanes), those of 33-44 vectors from 44
    # warps an SM; not rows that fill more, rows of a power of two vectors, nor fewer rows. fp64 rows from 17 vectors
    # (34 doubles), full teams too, from 64 warps an SM: 34, 66 and 98 leave a lane's last vector dead in every lane
    # (the kernel skips it: live_vectors).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [  # rows, cols, dtype, op, offset, algorithm: lanes, vpt
        ((256 * sms, 136, "bfloat16", "softmax", 0, "auto"), (8, 4)),
        ((256 * sms, 224, "float16", "softmax", 0, "safe"), (8, 4)),
        ((128 * sms, 320, "float16", "log_softmax", 0, "auto"), (16, 4)),
        ((128 * sms, 448, "bfloat16", "softmax", 0, "online"), (16, 4)),
        ((128 * sms - 1, 320, "bfloat16", "softmax", 0, "auto"), (32, 2)),
        ((256 * sms, 248, "bfloat16", "softmax", 0, "auto"), (16, 2)),
        ((128 * sms, 512, "bfloat16", "log_softmax", 0, "auto"), (32, 2)),
        ((256 * sms, 136, "float32", "softmax", 0, "auto"), (16, 4)),
        ((256 * sms, 224, "float32", "log_softmax", 0, "auto"), (16, 4)),
        ((256 * sms, 232, "float32", "softmax", 0, "auto"), (32, 2)),
        ((256 * sms, 128, "float32", "softmax", 0, "auto"), (16, 2)),
        ((128 * sms - 1, 160, "float32", "softmax", 0, "auto"), (16, 4)),
        ((88 * sms, 136, "float32", "log_softmax", 0, "auto"), (16, 4)),
        ((88 * sms - 1, 160, "float32", "softmax", 0, "auto"), (32, 2)),
        ((128 * sms - 1, 164, "float32", "softmax", 0, "auto"), (16, 4)),
        ((88 * sms - 1, 164, "float32", "log_softmax", 0, "auto"), (32, 2)),
        ((88 * sms, 176, "float32", "softmax", 0, "auto"), (16, 4)),
        ((128 * sms - 1, 180, "float32", "log_softmax", 0, "auto"), (32, 2)),
        ((128 * sms, 180, "float32", "softmax", 0, "auto"), (16, 4)),
        ((128 * sms, 66, "float64", "softmax", 0, "auto"), (16, 4)),
        ((128 * sms, 98, "float64", "log_softmax", 0, "online"), (16, 4)),
        ((128 * sms, 128, "float64", "softmax", 0, "safe"), (16, 4)),
        ((128 * sms - 1, 128, "float64", "softmax", 0, "auto"), (32, 2)),
        ((256 * sms, 34, "float64", "log_softmax", 0, "auto"), (8, 4)),
        ((256 * sms, 64, "float64", "softmax", 0, "auto"), (8, 4)),
        ((256 * sms - 1, 48, "float64", "softmax", 0, "auto"), (16, 2)),
        ((256 * sms, 32, "float64", "softmax", 0, "auto"), (8, 2))]
    for (rows, cols, *_), (lanes, vpt), line in _routed_plans(cases):
        assert re.search(rf"plan: {rows}x{cols} kind=warp,lanes={lanes},vpt={vpt},.*,grid=0$", line), line


@pytest.mark.cuda
@requires_cuda
def test_scalar_rows_lanes_routing_cuda():
    # Where "auto" gives unaligned fp32 softmax and log_softmax rows of <= 2 vectors (<= 8 elements) two lanes a row
    # (kScalarRowsMinLanes) instead of one, and rows of 4 vectors one vector a lane (kFourLaneMinLen); 16-bit rows
    # of 7 elements two lanes and of 13-16 four (scalar_rows_min_lanes), their other rows of one vector one lane and of
    # two vectors two (whole-warp teams of 8 values a lane); not aligned rows, nor longer rows.
    cases = [  # rows, cols, dtype, op, offset, algorithm: lanes, vpt
        ((4097, 7, "float32", "softmax", 0, "auto"), (2, 1)),
        ((4097, 3, "float32", "log_softmax", 0, "online"), (2, 1)),
        ((4097, 8, "float32", "softmax", 1, "auto"), (2, 1)),
        ((4097, 7, "bfloat16", "log_softmax", 0, "auto"), (2, 1)),
        ((4097, 7, "float16", "softmax", 0, "online"), (2, 1)),
        ((4097, 6, "bfloat16", "softmax", 0, "auto"), (1, 1)),
        ((4097, 8, "bfloat16", "softmax", 1, "auto"), (1, 1)),
        ((4097, 5, "float16", "log_softmax", 0, "auto"), (1, 1)),
        ((4097, 9, "bfloat16", "softmax", 0, "auto"), (2, 1)),
        ((4097, 12, "float16", "softmax", 0, "auto"), (2, 1)),
        ((4097, 13, "float16", "softmax", 0, "auto"), (4, 1)),
        ((4097, 15, "bfloat16", "log_softmax", 0, "auto"), (4, 1)),
        ((4097, 16, "bfloat16", "softmax", 1, "auto"), (4, 1)),
        ((4097, 17, "bfloat16", "softmax", 0, "auto"), (4, 1)),
        ((4097, 8, "float32", "softmax", 0, "auto"), (1, 2)),
        ((4097, 9, "float32", "softmax", 0, "auto"), (2, 2)),
        ((4097, 11, "float32", "log_softmax", 0, "auto"), (2, 2)),
        ((4097, 13, "float32", "softmax", 0, "auto"), (4, 1)),
        ((4097, 15, "float32", "log_softmax", 0, "auto"), (4, 1)),
        ((4097, 17, "float32", "softmax", 0, "auto"), (4, 2)),
        ((4097, 15, "float32", "softmax", 0, "online"), (4, 1)),
        ((4097, 16, "float32", "softmax", 0, "auto"), (2, 2))]
    for (rows, cols, *_), (lanes, vpt), line in _routed_plans(cases):
        assert re.search(rf"plan: {rows}x{cols} kind=warp,lanes={lanes},vpt={vpt},", line), line


@pytest.mark.cuda
@requires_cuda
def test_few_rows_block_routing_cuda():
    # Where "auto" gives fewer rows than SMs that a block of <= 512 threads holds a block per row rather than the
    # split kernel (few_rows_split): fp32 but for rows of exactly 512 threads, 16-bit always; fp64 still splits rows of
    # more than 512 vectors.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    few = sms // 2 + 1
    cases = [  # rows, cols, dtype, op, offset, algorithm: kind
        ((few, 4097, "float32", "softmax", 0, "auto"), "block"),
        ((7, 12289, "float32", "log_softmax", 0, "auto"), "block"),
        ((few, 16384, "float32", "softmax", 0, "auto"), "split"),
        ((few, 8192, "bfloat16", "softmax", 0, "auto"), "block"),
        ((few, 16384, "float16", "log_softmax", 0, "auto"), "block"),
        ((few, 3000, "float64", "softmax", 0, "auto"), "split"),
        ((few, 8192, "bfloat16", "softmax", 0, "online"), "block"),
        ((few, 8192, "float32", "softmax", 0, "auto"), "block"),
        ((few, 15360, "float32", "log_softmax", 0, "auto"), "block"),
        ((few, 4097, "bfloat16", "softmax", 0, "auto"), "block"),
        ((sms - 1, 16384, "float32", "softmax", 0, "auto"), "split"),
        ((sms - 1, 8192, "bfloat16", "log_softmax", 0, "auto"), "block"),
        ((sms, 4097, "float32", "softmax", 0, "auto"), "block")]
    for (rows, cols, *_), kind, line in _routed_plans(cases):
        assert re.search(rf"plan: {rows}x{cols} kind={kind},", line), line


@pytest.mark.cuda
@requires_cuda
def test_eight_warp_routing_cuda():
    # Where "auto" (and "safe") gives aligned 16-bit softmax and log_softmax rows of 9-15 warps at kMaxVpt = 4 vectors
    # a thread (8193-15360 elements) 8 warps and the rest of the row in shared memory (eight_warp_rows), under the
    # max-then-sum reduction at >= 32 rows per SM. Not the online reduction, fewer rows, rows of 8 or 16 warps, fp32,
    # nor unaligned rows.
    many = 32 * torch.cuda.get_device_properties(0).multi_processor_count
    cases = [  # rows, cols, dtype, op, offset, algorithm: threads, shared-memory vectors a thread
        ((many, 8200, "bfloat16", "softmax", 0, "auto"), (256, 1)),
        ((many, 10248, "float16", "log_softmax", 0, "safe"), (256, 2)),
        ((many, 15360, "bfloat16", "softmax", 0, "auto"), (256, 4)),
        ((many, 15368, "bfloat16", "softmax", 0, "auto"), (512, 0)),
        ((many, 8192, "bfloat16", "log_softmax", 0, "auto"), (256, 0)),
        ((many - 1, 8200, "bfloat16", "softmax", 0, "auto"), (288, 0)),
        ((many, 8200, "bfloat16", "softmax", 0, "online"), (288, 0)),
        ((many, 8200, "float32", "softmax", 0, "auto"), (288, 0)),
        ((many, 8201, "bfloat16", "softmax", 0, "auto"), (288, 0)),
        ((many, 6152, "float16", "softmax", 0, "auto"), (224, 0))]
    _assert_block_plans(cases)


@pytest.mark.cuda
@requires_cuda
def test_wide_warp_softmax_routing_cuda():
    # Where "auto" runs 16-bit softmax and log_softmax rows of 129-256 vectors (1025-2048 elements) on one warp each
    # at 8 vectors a lane (warp_max_vpl): the max-then-sum reduction (auto, safe) at >= 32 rows per SM, aligned rows and
    # unaligned ones on the memory's grid (grid=1: test_grid_softmax_routing_cuda); not the online reduction, fewer
    # rows, fp32, nor unaligned rows off their output's grid (None: not the warp kernel).
    many = 32 * torch.cuda.get_device_properties(0).multi_processor_count
    cases = [  # rows, cols, dtype, op, offset, algorithm: lanes, vpt
        ((many, 1032, "bfloat16", "softmax", 0, "auto"), (32, 8)),
        ((many, 2048, "float16", "log_softmax", 0, "safe"), (32, 8)),
        ((many, 1536, "bfloat16", "log_softmax", 0, "auto"), (32, 8)),
        ((many, 1536, "bfloat16", "softmax", 0, "online"), None),
        ((many - 1, 1032, "bfloat16", "softmax", 0, "auto"), None),
        ((many, 1032, "float32", "softmax", 0, "auto"), None),
        ((many, 1033, "float16", "softmax", 0, "auto"), (32, 8)),
        ((many, 1033, "float16", "softmax", 1, "auto"), None)]
    for (rows, cols, *_), plan, line in _routed_plans(cases):
        assert f"plan: {rows}x{cols} kind=" in line, line
        if plan is None:
            assert "kind=warp" not in line, line
        else:
            assert re.search(rf"kind=warp,lanes={plan[0]},vpt={plan[1]},", line), line


@pytest.mark.cuda
@requires_cuda
def test_fewer_warp_routing_cuda():
    # Where "auto" gives aligned 16-bit softmax and log_softmax rows one warp fewer than kMaxVpt = 4 vectors a thread
    # needs, with a vector each in shared memory (fewer_warp_rows): rows of 257-320 vectors (2049-2560 elements) 64
    # threads instead of 96, rows of 513-640 (4097-5120) 128 instead of 160 (softmax only to 576 vectors); under the
    # max-then-sum reduction at >= 96 rows per SM (log_softmax >= 32). Not the online reduction, fewer rows, rows the
    # 96 threads fill, other block sizes, fp32, nor unaligned rows.
    many = 96 * torch.cuda.get_device_properties(0).multi_processor_count
    cases = [  # rows, cols, dtype, op, offset, algorithm: threads, shared-memory vectors a thread
        ((many, 2056, "bfloat16", "softmax", 0, "auto"), (64, 1)),
        ((many, 2560, "float16", "log_softmax", 0, "safe"), (64, 1)),
        ((many, 2304, "bfloat16", "softmax", 0, "online"), (96, 0)),
        ((many - 1, 2056, "bfloat16", "softmax", 0, "auto"), (96, 0)),
        ((many, 3072, "bfloat16", "softmax", 0, "auto"), (96, 0)),
        ((many, 2056, "float32", "softmax", 0, "auto"), (96, 0)),
        ((many, 2057, "bfloat16", "log_softmax", 0, "auto"), (96, 0)),
        ((many // 3, 2056, "bfloat16", "log_softmax", 0, "auto"), (64, 1)),
        ((many // 3 - 1, 2056, "float16", "log_softmax", 0, "auto"), (96, 0)),
        ((many // 3, 2056, "bfloat16", "softmax", 0, "auto"), (96, 0)),
        ((many, 3080, "bfloat16", "log_softmax", 0, "auto"), (128, 0)),
        ((many, 4104, "bfloat16", "softmax", 0, "auto"), (128, 1)),
        ((many, 4608, "float16", "softmax", 0, "auto"), (128, 1)),
        ((many, 4616, "bfloat16", "softmax", 0, "auto"), (160, 0)),
        ((many // 3, 5120, "float16", "log_softmax", 0, "auto"), (128, 1)),
        ((many // 3 - 1, 4104, "bfloat16", "log_softmax", 0, "auto"), (160, 0)),
        ((many // 3, 4104, "bfloat16", "softmax", 0, "auto"), (160, 0)),
        ((many, 4104, "bfloat16", "softmax", 0, "online"), (160, 0)),
        ((many, 4104, "float32", "log_softmax", 0, "auto"), (160, 0)),
        ((many, 5128, "bfloat16", "log_softmax", 0, "auto"), (192, 0))]
    _assert_block_plans(cases)


DEAD_VECTORS_CHECK = """
import os
import torch
import flash_attn_ext as fae
import test_softmax as t
split = os.environ["FAE_SOFTMAX_CONFIG"].startswith("kind=split")
for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
    vec = 16 // (torch.finfo(dtype).bits // 8)
    step = 256 * vec  # one vector of every thread of the 256
    group = step * (8 if dtype == torch.float32 else 4)  # the large size's vectors a thread: fp32 8, else 4
    if split:  # a row in 2 or 3 chunks of a group, the last part-filled
        lengths = (group + vec, group + 97, 2 * group + group // 2 + 3)
    else:  # 1 to all of a thread's vectors live; 2 * step - 1: the row's shift alone puts elements in the third
        lengths = (1, 7, 97, step, step + 1, 2 * step - 1, 1025, group // 2 + 3, group - vec + 1, group)
    for length in lengths:
        inputs = [(t.make_input((37, length), dtype, "cuda"), "")]
        if split or length != group:  # an unaligned row of a whole group needs one vector more than 256 threads hold
            # an input 1 element past the grid: its rows and the fresh output's on different grids
            inputs.append((t.make_input((37 * length + 1,), dtype, "cuda")[1:].view(37, length), " at +1"))
        for algorithm in ("safe", "online"):
            for op, ref_fn, torch_fn in t.ROW_AND_LSE_OPS:
                for inp, where in inputs:
                    t.poison("cuda", 37 * (1 if op is fae.logsumexp else length) * inp.element_size())
                    out = op(inp, -1) if op is fae.logsumexp else op(inp, -1, algorithm=algorithm)
                    t.check_against_reference(out, ref_fn(inp, -1), torch_fn(inp, -1), dtype,
                                              f"{op.__name__} {algorithm} 37x{length}{where}")
    t._run_special(t.special_rows(lengths[-2], dtype, "cuda").repeat(3, 1), f"x{lengths[-2]}", t.ROW_AND_LSE_OPS)
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=block,vpt=large,threads=256", "kind=split,vpt=large,threads=256"])
def test_forced_block_dead_vectors_cuda(config):
    # The block and split kernels skip the vectors that lie past the row's end in every thread (live_vectors): forced
    # onto 256 threads, rows that fill one to all of a thread's vectors, and split rows whose last chunk is part-filled;
    # softmax and log_softmax (safe and online) and logsumexp, every output element against fp64 after poisoning.
    run_checked(DEAD_VECTORS_CHECK, FAE_SOFTMAX_CONFIG=config)


RESIDENT_CHECK = """
import os
import torch
import test_softmax as t
# items from a few KB (registers only) to 512 KB (registers, shared memory and L2), last chunks shorter, part-filled
# pieces and L2 groups (16-bit 1_000_008 elements: chunks of 250_048); items of exactly 512 KB (the kernel without
# bounds), one and 16 to a row; fp32 the same bytes; a forced chunk count:
# the shapes it fits. Then unaligned rows at the same bytes (odd lengths: row r starts r * length elements off the
# grid, every shift of a vector among the rows), the fresh output on the input's grid: each item's edge vectors,
# folded and stored element by element by thread 0 (a row's first and last vector; a split row's chunks share theirs).
shapes16 = ((5, 4096), (7, 40_000), (3, 1_000_008), (2, 4_194_312), (2, 4_194_304), (128, 262_144))
shapes32 = ((5, 4096), (7, 40_000), (3, 500_004), (2, 2_097_156), (2, 2_097_152), (128, 131_072))
odd16 = ((5, 4097), (7, 40_001), (3, 1_000_009), (9, 262_143), (2, 4_194_311))
odd32 = ((5, 4097), (7, 40_001), (3, 500_005), (9, 131_071), (2, 2_097_155))
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    shapes, odd = (shapes32, odd32) if dtype == torch.float32 else (shapes16, odd16)
    if "chunks" in os.environ["FAE_SOFTMAX_CONFIG"]:
        shapes, odd = shapes[:3], odd[:3]
    for shape in shapes + odd:
        t._run_accuracy("cuda", dtype, "auto", shape, -1, "contiguous")
    size = torch.finfo(dtype).bits // 8
    # the second: 512 KB items, two to a row (without chunks=N); the third unaligned
    for length in (80_000 // size, 1_048_576 // size, 80_000 // size + 1):
        t._run_special(t.special_rows(length, dtype, "cuda"), length)
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=resident", "kind=resident,chunks=6"])
def test_forced_resident_cuda(config):
    # The resident kernel (16-bit and fp32 softmax and log_softmax, rows * chunks <= SMs), forced on shapes "auto" gives
    # other kernels too: every part of an item (registers, shared-memory pieces, the L2 part) with its tails,
    # whole and split rows, unaligned rows (edge vectors), special values.
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the resident kernel needs sm_90")
    run_checked(RESIDENT_CHECK, FAE_SOFTMAX_CONFIG=config)


RESIDENT_TEAMS_CHECK = """
import os
import torch
import test_softmax as t
teams = int(os.environ["FAE_SOFTMAX_CONFIG"].split("rows=")[1])
# rows a team holds in registers only (8 KB, 8 KB + 16 B: 513 vectors), into its pieces and its L2 part, at most
# 512 KB / teams (from 384 KB / teams the instantiation bounded on the L2 part only: with 8 teams 48 KB rows leave the
# L2 part empty and 49 KB rows one unit of 64 vectors, which the team's first warp claims and its second warp a piece;
# with 4 teams 96 and 97 KB rows alike); 3 * teams - 1 rows: a last block with an idle team; 2 * teams rows of
# exactly 512 KB / teams: the instantiation without bounds. fp32 (forced only): the same bytes.
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    size = torch.finfo(dtype).bits // 8
    bytes_ = (8192, 8208, 49152, 50176, 64000, 80000, 98304, 99328, 131072, 200016, 262144)
    lengths = [b // size for b in bytes_ if b * teams <= 512 * 1024]
    for shape in [(3 * teams - 1, n) for n in lengths] + [(2 * teams, 524288 // size // teams)]:
        t._run_accuracy("cuda", dtype, "auto", shape, -1, "contiguous")
    for n in (lengths[0], lengths[-1]):
        t._run_special(t.special_rows(n, dtype, "cuda"), n)  # 13 rows: special values in every team
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config", ["kind=resident,rows=2", "kind=resident,rows=4", "kind=resident,rows=8"])
def test_forced_resident_teams_cuda(config):
    # The resident kernel with whole rows per block, one per team of 256, 128 or 64 threads (each team its own
    # pieces, barriers and statistics), forced on rows from 8 KB to 512 KB / teams, special values included.
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the resident kernel needs sm_90")
    run_checked(RESIDENT_TEAMS_CHECK, FAE_SOFTMAX_CONFIG=config)


SPLIT_TEAMS_CHECK = """
import torch
import test_softmax as t
# kind=resident,rows=8,chunks=2: rows of 2 x 64 KB, 8 a group of 2 blocks (1 and 3 groups), each block a chunk of 8 rows
for dtype in (torch.bfloat16, torch.float16):
    for shape in ((8, 65536), (24, 65536)):
        t._run_accuracy("cuda", dtype, "auto", shape, -1, "contiguous")
    x = t.special_rows(65536, dtype, "cuda")
    t._run_special(torch.cat([x, x[:3]]), "16 rows")  # two groups: special values in every team's row
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
def test_forced_resident_split_teams_cuda():
    # Teams of 8 over split rows (chunks > 1): block b of a group holds chunk b % chunks of the group's 8 rows, one a
    # team, and each team exchanges its row's (m, d) with the other blocks of its group; forced on 16-bit rows of two
    # 64 KB chunks, special values included.
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the resident kernel needs sm_90")
    run_checked(SPLIT_TEAMS_CHECK, FAE_SOFTMAX_CONFIG="kind=resident,rows=8,chunks=2")


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_split_rows_blocks_agree_cuda(dtype):
    # A row split over blocks is normalized by each block with the statistics of the whole row, merged from the
    # blocks' partials in one order, so every block must use the same (m, d) to the bit: a row made of one 4096-element
    # piece repeated must come out as its first piece repeated, bit for bit, wherever its chunks' boundaries fall. On
    # sm_90 parts of 132 SMs, bf16: teams of 8 over split rows (512 KB items, and whole 256 KB rows in 4 chunks) and
    # single items; fp32: split rows on the resident and dual kernels. Elsewhere the split kernels promise the same.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [(8, max(1, sms // 8) * 262144), (16, max(1, sms // 16) * 262144), (5, 4194304), (1, 8388608)]
    if dtype == torch.bfloat16:
        shapes.append((8 * (sms // 4), 131072))
    for rows, cols in shapes:
        piece = torch.randn(rows, 1, 4096, device="cuda", dtype=dtype) * 4
        x = piece.expand(rows, cols // 4096, 4096).reshape(rows, cols)
        for op in (fae.softmax, fae.log_softmax):
            poison("cuda", x.numel() * x.element_size())
            pieces = op(x, -1).view(rows, cols // 4096, 4096)
            assert torch.equal(pieces, pieces[:, :1].expand_as(pieces)), f"{op.__name__} {rows}x{cols} {dtype}"
            assert not pieces[:, 0].isnan().any(), f"{op.__name__} {rows}x{cols} {dtype}"


def _resident_shapes(dtype=torch.bfloat16):
    # {shape: the plan "auto" takes on sm_90 parts of >= 100 SMs}, for test_resident_whole_rows_cuda and
    # test_resident_routing_cuda; teams (rows=2, 4, 8) or sms / rows chunks (rows=0).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if dtype == torch.float32:  # no teams: whole rows of 144-512 KB, rows of one wave cut in sms / rows chunks
        whole = ((sms - 1, 100000), (sms // 2 + 1, 131072), (3 * sms + 1, 66000), (sms + 2, 131072),
                 (2 * sms + 1, 40000))
        chunks = ((sms // 2 - 1, 100000), (sms // 3, 151936), (sms // 33, 4194304), (1, 4194304), (sms // 8, 600000))
        whole += ((sms - 1, 100001), (2 * sms + 1, 40001))  # unaligned rows (odd lengths): edge vectors
        chunks += ((sms // 3, 151937), (1, 4194303))
        plans = {shape: "chunks=1,.*rows=0" for shape in whole}
        plans.update({(r, c): f"chunks={sms // r},.*rows=0" for r, c in chunks})
        return plans
    # teams beyond one wave (2 or 4 a block) only where their blocks fill 90 % of the waves they span
    teams = {(8 * sms - 3, 32768): 8, (8 * (sms - 4), 32768): 8, (4 * sms - 1, 65536): 4, (8 * sms - 8, 32000): 8,
             (2 * sms - 1, 131072): 2, (4 * sms - 3, 61000): 4, (2 * sms - 1, 100008): 2, (4 * sms, 64000): 4,
             (8 * sms - 2, 65536): 4, (8 * sms - 5, 49152): 4}
    chunks = ((sms, 151936), (sms - 10, 131072), (3 * sms // 4, 151936), (sms - 4, 32768), (sms // 2, 300000),
              (sms // 2 - 6, 151936), (sms // 3, 151936), (5, 4194304), (1, 8388608))
    waves = ((sms + 1, 151936), (2 * sms + 7, 200000), (3 * sms - 5, 262144), (6 * sms - 1, 110000),
             (sms + 9, 61440), (8 * sms + 1, 66000), (2 * sms + 1, 131072), (4 * sms + 2, 65536))
    # unaligned rows (odd lengths), no teams: whole rows within one wave and beyond, split rows
    chunks += ((sms - 4, 32769), (sms // 2, 300001), (5, 4194303))
    # unaligned: from 80 KB (82 KB rows at 2 sms + 3: the dual kernel would cut them in two)
    waves += ((sms + 1, 151937), (3 * sms - 5, 262143), (2 * sms + 3, 50257), (2 * sms + 3, 41001))
    plans = {shape: f"chunks=1,.*rows={t}" for shape, t in teams.items()}
    plans.update({(r, c): f"chunks={sms // r},.*rows=0" for r, c in chunks})
    # split rows of exactly 512 KB items, 8 or 16 rows: teams of 8 over them (resident_split_teams), 8 x the chunks
    plans.update({(r, sms // r * 262144): f"chunks={8 * (sms // r)},.*rows=8" for r in (8, 16)})
    # whole rows of exactly 256 KB, a multiple of 8, groups of 4 blocks within one wave: teams of 8 over 4 chunks
    plans[(8 * (sms // 4), 131072)] = "chunks=4,.*rows=8"
    plans.update({shape: "chunks=1,.*rows=0" for shape in waves})
    return plans


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_resident_whole_rows_cuda(dtype):
    # Rows that fill one wave or more of the resident kernel (on an H100 / H200's 132 SMs; with fewer SMs some shapes
    # take other kernels): on sm_90 "auto" takes it (softmax_cuda.cu: resident_teams, resident_chunks) for 16-bit rows
    # of 64 KB 8 a block, the last block 5 (the instantiation bounded on the L2 part, OnChip) or 8 a block exactly
    # (Whole), 128 KB 4 a block, the last block 3, 256 KB 2 a block, the last block 1, two waves of teams' blocks (128
    # KB rows, the last block 2: beyond one wave, teams of 2 or 4 fill 90 % of their waves), rows that fill
    # a team in part (OnChip): 62.5 KB 8 a block, 96 (two waves, the last block 3) and 119 KB 4 a block, 125 and 195 KB
    # in one wave of teams' blocks; 256 KB rows, a multiple of 8 in one wave: teams of 8 over 4 chunks (Whole); and
    # resident_chunks' sms / rows items a row, one a block: whole rows of 64-384 KB
    # (the single-row kernel with bounds: registers and shared memory, no L2 part), also at 75 % of the SMs, and rows
    # cut into 2, 3, sms / 5 or sms items of 96-512 KB, the last item of a row shorter; and beyond one wave (a plain
    # launch), whole rows of 120-512 KB, one a block, the last wave part-filled. Fp32: whole rows of 144-512 KB, within
    # one wave and beyond, and rows cut into 2, 3, 8, 33 or sms items of 124-497 KB. Unaligned rows (odd lengths) among
    # both, on the single-item kernel with edge vectors.
    for shape in _resident_shapes(dtype):
        _run_accuracy("cuda", dtype, "auto", shape, -1, "contiguous")


RESIDENT_ROUTING_CHECK = """
import torch
import flash_attn_ext as fae
for shape, dtype in SHAPES:
    getattr(fae, ROW_OP)(torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype)), -1)
torch.cuda.synchronize()
print("checked")
"""


@pytest.mark.cuda
@requires_cuda
def test_resident_routing_cuda():
    # Which kernel "auto" takes (FAE_SOFTMAX_LOG_PLAN prints each row call's plan): the shapes of
    # test_resident_whole_rows_cuda (bf16 and fp32), each on the resident kernel with its teams (rows=N) or its
    # chunks; and fp32 rows it leaves to the other kernels (128 KB beyond one wave; 16 MB rows in 5 or 8, whose
    # sms / rows chunks would be over 512 KB), unaligned bf16 rows of under 80 KB beyond one wave, and bf16 rows of
    # 96-120 KB whose teams' blocks (4 a block) fill under 90 % of the waves they span (the dual kernel) and of 48-64 KB
    # whose teams' blocks (8 a block) span more than one wave (the pipelined kernel).
    sms = _large_sm90_sms("resident")
    expected = [(shape, "bfloat16", pattern) for shape, pattern in _resident_shapes().items()]
    expected += [(shape, "float32", pattern) for shape, pattern in _resident_shapes(torch.float32).items()]
    expected += [((3 * sms, 32768), "float32", None), ((5, 4194304), "float32", None), ((8, 4194304), "float32", None)]
    expected += [((2 * sms + 3, 32767), "bfloat16", None), ((2 * sms + 3, 40001), "bfloat16", None)]  # unaligned
    expected += [((4 * sms + 2, 50000), "bfloat16", None), ((5 * sms, 49152), "bfloat16", None)]
    expected += [((8 * sms + 8, 32768), "bfloat16", None), ((10 * sms, 30000), "bfloat16", None)]
    expected += [((16 * sms - 5, 32768), "bfloat16", None)]  # teams of 8 fill 99 % of two waves: pipelined
    for ((rows, cols), dtype, pattern), line in zip(expected, _auto_plans(expected)):
        if pattern is None:
            assert "kind=resident" not in line, (dtype, line)
        else:
            assert re.search(rf"plan: {rows}x{cols} kind=resident,.*{pattern},grid=0$", line), (dtype, line)


def _large_sm90_sms(kernel):
    # The SMs of the device, for the routing tests, whose rules are written for sm_90 parts of >= 100 SMs; skips others.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if torch.cuda.get_device_capability() < (9, 0) or sms < 100:
        pytest.skip(f"the {kernel} kernel's rules are written for sm_90 parts of 100 SMs or more")
    return sms


def _logged_plans(code, count):
    # The plan lines (FAE_SOFTMAX_LOG_PLAN) of code, run in a child process that prints "checked"; there must be count.
    child = run_checked(code, FAE_SOFTMAX_LOG_PLAN="1")
    plans = [line for line in child.stderr.splitlines() if line.startswith("flash_attn_ext softmax plan:")]
    assert len(plans) == count, child.stderr[-3000:]
    return plans


def _auto_plans(expected, op="softmax"):
    # The plan line "auto" prints (FAE_SOFTMAX_LOG_PLAN) for each (shape, dtype name, ...) of expected, from op (a
    # name in flash_attn_ext) in a child process.
    code = RESIDENT_ROUTING_CHECK.replace("SHAPES", repr([(shape, dtype) for shape, dtype, *_ in expected]))
    code = code.replace("ROW_OP", repr(op))
    plans = _logged_plans(code, len(expected))
    for ((rows, cols), dtype, *_), line in zip(expected, plans):
        assert line.startswith(f"flash_attn_ext softmax plan: {rows}x{cols} "), (dtype, line)
    return plans


def _dual_unaligned_shapes():
    # Unaligned rows (odd lengths) "auto" gives the dual kernel on sm_90 parts of >= 100 SMs, as their aligned kin:
    # fp32 whole rows of 64-128 KB where rows fill the SMs, fp32 rows split into items of <= 128 KB over more than
    # one round (resident_chunks takes neither: whole rows from 144 KB, items of <= 512 KB), and 16-bit whole rows of
    # 80-96 KB beyond one wave in one item (else resident_chunks' from 80 KB: dual_chunks cuts 2 sms + 3 of them in
    # two), in an odd number of rounds (the register role takes the last: registers_first) and in an even one.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return [((2 * sms + 3, 32767), torch.float32), ((sms + 5, 20001), torch.float32), ((8, 4194303), torch.float32),
            ((sms - 4, 262143), torch.float32), ((4 * sms + 1, 41001), torch.bfloat16),
            ((4 * sms, 46001), torch.float16), ((3 * sms - 7, 46001), torch.bfloat16)]


@pytest.mark.cuda
@requires_cuda
def test_dual_unaligned_rows_cuda():
    # The shapes of _dual_unaligned_shapes through "auto" (on other parts they may take other kernels): each item's
    # edge vectors, in the ring role and in the register role (shared memory), whole rows and split ones.
    for shape, dtype in _dual_unaligned_shapes():
        _run_accuracy("cuda", dtype, "auto", shape, -1, "contiguous")


@pytest.mark.cuda
@requires_cuda
def test_dual_unaligned_routing_cuda():
    # Which kernel "auto" takes for the shapes of _dual_unaligned_shapes: the dual kernel, every one.
    _large_sm90_sms("dual")
    expected = [(shape, str(dtype).split(".")[1]) for shape, dtype in _dual_unaligned_shapes()]
    for (shape, dtype), line in zip(expected, _auto_plans(expected)):
        assert " kind=dual," in line, (dtype, line)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config, code, message", [
    ("kind=resident,rows=3", "torch.randn(64, 4096, device='cuda', dtype=torch.bfloat16)", "rows must be"),
    ("kind=resident,rows=8", "torch.randn(64, 40000, device='cuda', dtype=torch.bfloat16)", "512 KB / rows"),
    ("kind=resident,rows=2,chunks=2", "torch.randn(64, 4096, device='cuda', dtype=torch.bfloat16)",
     "teams over split rows"),
    ("kind=resident,rows=8,chunks=2", "torch.randn(12, 65536, device='cuda', dtype=torch.bfloat16)",
     "teams over split rows"),
    ("kind=resident,rows=8,chunks=2", "torch.randn(8, 32768, device='cuda', dtype=torch.float32)",
     "teams over split rows"),
    ("kind=resident,rows=8,chunks=4", "torch.randn(8 * 64, 131072, device='cuda', dtype=torch.bfloat16)",
     "more blocks than SMs"),
    ("kind=resident", "torch.randn(64, 4096, device='cuda', dtype=torch.float64)", "16-bit or fp32"),
    ("kind=resident,chunks=2", "torch.randn(200, 4096, device='cuda', dtype=torch.bfloat16)", "more items than SMs"),
    ("kind=resident,chunks=1", "torch.randn(2, 1_048_576, device='cuda', dtype=torch.bfloat16)",
     "chunks of more than 512 KB"),
    ("kind=resident,rows=2", "torch.randn(64, 4097, device='cuda', dtype=torch.bfloat16)", "aligned rows"),
    ("kind=resident", "torch.randn(64 * 4096 + 1, device='cuda', dtype=torch.bfloat16)[1:].view(64, 4096)",
     "output on the input's grid"),
    ("kind=dual", "torch.randn(64, 4097, device='cuda', dtype=torch.float64)", "for fp32 and 16-bit types"),
    ("kind=dual", "torch.randn(64 * 4096 + 1, device='cuda', dtype=torch.bfloat16)[1:].view(64, 4096)",
     "output on the input's grid")])
def test_forced_resident_errors_cuda(config, code, message):
    # (and the dual kernel's unaligned rows)
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the resident and dual kernels need sm_90 (before it, the error names that)")
    out = softmax_error_in_fresh_process(code, -1, "RuntimeError", FAE_SOFTMAX_CONFIG=config)
    assert "raised:" in out and message in out, out

CPU_ISA_CHECK = """
import torch
import flash_attn_ext as fae
import test_softmax as t
ops = t.ROW_AND_LSE_OPS
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for shape in ((7, 1), (5, 97), (3, 1025), (2, 4097)):
        x = t.make_input(shape, dtype, "cpu")
        for op, ref, base in ops:
            for kw in ({},) if op is fae.logsumexp else ({"algorithm": "safe"}, {"algorithm": "online"}):
                t.check_against_reference(op(x, -1, **kw), ref(x, -1), base(x, -1), dtype, f"{op.__name__} {shape}")
    for shape, dim in (((40, 97), 0), ((3, 300, 70), 1)):  # columns: blocks of 64 and tails
        x = t.make_input(shape, dtype, "cpu")
        for op, ref, base in ops:
            for kw in ({},) if op is fae.logsumexp else ({"algorithm": "safe"}, {"algorithm": "online"}):
                t.check_against_reference(op(x, dim, **kw), ref(x, dim), base(x, dim), dtype, f"{op.__name__} {shape}")
    rows = t.special_rows(1025, dtype, "cpu")
    # rows (97: the short-row blocks; 1025: chunks); and 26 columns, so that the block takes the vector column
    # loops (>= 16) and falls back
    for x, dim in ((t.special_rows(97, dtype, "cpu"), -1), (rows, -1), (rows.repeat(2, 1).t().contiguous(), 0)):
        for op, ref, base in ops:
            for kw in ({},) if op is fae.logsumexp else ({"algorithm": "safe"}, {"algorithm": "online"}):
                t.assert_special_match(op(x, dim, **kw), base(x, dim), ref(x, dim), f"{op.__name__} special values")
print("checked")
"""


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_cpu_isa_variants(isa):
    # Every op and algorithm of each CPU variant on odd lengths (chunk tails), columns and special values.
    run_cpu_isa_check(CPU_ISA_CHECK, isa)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("config, message", [
    ("kind=bogus", "kind must be warp, block, split, stream, pipe, dual or resident"),
    ("lanes=4", "names no kind"),
    ("kind=warp,lanes=abc", "lanes=abc is not a non-negative integer"),
    ("kind=warp,lanes=3,vpt=2", "lanes must be a power of two"),
    ("kind=warp,vpt=3", "vpt must be 1, 2, 4 or 8"),
    ("kind=pipe,pieces=1", "a ring of fewer than 2 pieces"),
    ("kind=warp,vpt=2,grid=2", "grid must be 0 or 1"),
    ("kind=warp,vpt=1,threads=288", "threads must be a multiple of 32 in [32, 256] for kind=warp"),
    ("kind=warp,vpt=1,threads=48", "threads must be a multiple of 32 in [32, 256] for kind=warp"),
    ("kind=block,grid=1", "grid is a key of kind=warp only")])
def test_forced_config_errors_cuda(config, message):
    if config.startswith("kind=pipe") and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the pipelined kernel needs sm_90 (before it, the error names that)")
    # A malformed or unfit FAE_SOFTMAX_CONFIG is a RuntimeError naming the problem, in a fresh process (where
    # the build of s13 crashed formatting the message), never a fallback.
    out = softmax_error_in_fresh_process("torch.randn(64, 128, device='cuda')", -1, "RuntimeError",
                                         FAE_SOFTMAX_CONFIG=config)
    assert "raised:" in out and message in out, out


@pytest.mark.cuda
@requires_cuda
def test_forced_warp_vpt_beyond_the_op_errors_cuda():
    # 8 vectors a lane are compiled for 16-bit rows for logsumexp and for softmax and log_softmax rows aligned or on
    # the memory's grid (grid=1; warp_max_vpl) only (fp32 and fp64: every row): unaligned 16-bit softmax and
    # log_softmax off the grid (grid=0) forced there are errors naming it, not launches without a kernel.
    for x_expr, op in (("torch.randn(64, 1023, device='cuda', dtype=torch.bfloat16)", "softmax"),
                       ("torch.randn(64, 1001, device='cuda', dtype=torch.float16)", "log_softmax")):
        out = softmax_error_in_fresh_process(x_expr, -1, "RuntimeError", op, FAE_SOFTMAX_CONFIG="kind=warp,vpt=8")
        assert "raised:" in out and "largest compiled warp kernel" in out, (op, x_expr, out)


@pytest.mark.cuda
@pytest.mark.large
@requires_cuda
@pytest.mark.parametrize("shape, dim, dtype", [
    ((4, 2**29 + 2), -1, torch.bfloat16),       # row offsets past 2^31
    ((2**21 + 3, 1024), -1, torch.bfloat16),    # 2^31 + 3072 elements of short rows
    ((2**16 + 3, 32768), -1, torch.float32),    # whole fp32 rows of the pipelined kernel (sm_90)
    ((2**20 + 3, 2048), 0, torch.bfloat16)],    # columns: element offsets past 2^31
    ids=["rows", "short_rows", "fp32_rows", "columns"])
def test_more_than_2_pow_31_elements(shape, dim, dtype):
    x = make_input(shape, dtype, "cuda")
    assert x.numel() > 2**31
    # rows (columns) at both ends, checked on slices; for rows the last one lies entirely past element 2^31
    other = 1 if dim == 0 else 0
    idx = torch.tensor([0, 1, x.shape[other] - 1], device="cuda")
    xs = x.index_select(other, idx)
    for name, ref_fn in (("softmax", softmax_ref), ("log_softmax", log_softmax_ref)):
        for algorithm in ("safe", "online", "auto"):
            out = getattr(fae, name)(x, dim, algorithm=algorithm).index_select(other, idx)
            check_against_reference(out, ref_fn(xs, dim), getattr(torch, name)(xs, dim), dtype, name)
            del out
    out = fae.logsumexp(x, dim)[idx]
    check_against_reference(out, logsumexp_ref(xs, dim), torch.logsumexp(xs, dim), dtype, "logsumexp")
