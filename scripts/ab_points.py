"""Softmax-family points of one build, for A/B runs between builds on the GPU machine (scripts/ab_softmax.sh).

    python3 scripts/ab_points.py BUILD_ROOT LABEL 'op[/algorithm]:dtype:RxC,...' [--profile]

Imports flash_attn_ext from BUILD_ROOT (a tree built in place) and, per point, prints ours ("auto" unless an algorithm
follows the op) and torch's op in us, cold (common.Timer.time_interleaved: each call after an L2 flush, the two taken
in turn) / streamed (common.Timer.time_stream), with ours' max |difference| from torch's op in float64. --profile
prints instead the CUDA kernels one call of ours launches (torch.profiler), to check which instantiation a shape takes.
Run each build in its own process, alternating builds over rounds: one process cannot import two builds.
"""
import os
import sys

root, label, spec = sys.argv[1], sys.argv[2], sys.argv[3]
profile = "--profile" in sys.argv[4:]
sys.path.insert(0, os.path.abspath(root))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import torch  # noqa: E402

import common  # noqa: E402
import flash_attn_ext as fae  # noqa: E402

assert os.path.abspath(fae.__file__).startswith(os.path.abspath(root)), fae.__file__
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
timer = common.Timer("cuda", reps=100)
for item in spec.split(","):
    op_algo, dt, shape = item.split(":")
    op, _, algo = op_algo.partition("/")
    kw = {"algorithm": algo} if algo else {}
    rows, cols = (int(v) for v in shape.split("x"))
    x = torch.randn(rows, cols, device="cuda").mul_(3).to(DTYPES[dt])

    def ours(x):
        return getattr(fae, op)(x, -1, **kw)

    def theirs(x):
        return getattr(torch, op)(x, -1)

    err = (ours(x).double() - theirs(x.double())).abs().max().item()
    if profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            ours(x)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        print(f"{label} {op_algo} {dt} {shape} kernels: {' | '.join(n[:160] for n in names)}", flush=True)
        continue
    cold = timer.time_interleaved([lambda: ours(x), lambda: theirs(x)])
    xs = timer.stream_inputs(x, x.numel() * x.element_size())
    stream = timer.time_stream([ours, theirs], xs)
    us = [f"{c['median_ms'] * 1e3:7.1f} / {s['median_ms'] * 1e3:7.1f}" for c, s in zip(cold, stream)]
    print(f"{label:5} {op_algo:18} {dt} {shape:>12}  ours {us[0]}  torch {us[1]}  maxerr {err:.1e}", flush=True)
    del x, xs
    torch.cuda.empty_cache()
