"""Softmax family: flash_attn_ext vs torch, effective bandwidth against the measured copy bandwidth.

Effective bandwidth = (bytes of x read once + bytes of the output written once) / median time; the floor of a
memory-bound row op is those bytes over the copy bandwidth, so "% copy" is how close a kernel is to it.

    python3 benchmarks/bench_softmax.py                  # full grid on the GPU (about 1-2 minutes on an H100)
    python3 benchmarks/bench_softmax.py --quick --device cpu
    python3 benchmarks/bench_softmax.py --ops softmax --dtypes bf16 --shapes 8x4194304
    python3 benchmarks/bench_softmax.py --ops softmax --impls fae:auto --shapes 8x4m   # one implementation
    python3 benchmarks/bench_softmax.py --points softmax:fp32:65536x97,log_softmax/online:bf16:128x4097 --kernels

--points names single points instead of the grid, each as op[/algorithm]:dtype:RxC, and times ours (that algorithm,
"auto" if none) beside torch's op; --kernels prints the CUDA kernels one call of ours launches at each point (which
instantiation a shape takes); --kernel-times prints, per implementation, the device time of its kernels a call under
the cold method (torch.profiler) beside the events' median: what of a cold call is the kernel and what its start-up.
scripts/ab_softmax.sh runs --points once per build (PYTHONPATH=BUILD_ROOT) for A/B runs.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402

SHAPES = [(65536, 128), (16384, 1024), (4096, 4096), (1024, 32768), (128, 262144), (8, 4194304), (32768, 2000)]
QUICK_SHAPES = [(4096, 128), (1024, 1024), (256, 4096), (32, 32768), (4, 262144), (2, 1048576), (1024, 2000)]
OPS = ("softmax", "log_softmax", "logsumexp")
# max rel error (||out - ref|| / ||ref|| against torch on float32 upcast input) above which a row is flagged "!"
REL_TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 2e-2}


IDENTITY = ("op", "impl", "dtype", "shape", "max_abs_diff", "rel_err", "flag")


def impls(fae, op):
    """(impl name, callable(x) -> output) pairs for one op; the torch peer after ours. softmax also times a copy
    of x (``x.clone()``: the same bytes read and written, a fresh output like the ops'): the ceiling of this
    method at this size, which for short calls sits below the 1 GiB copy bandwidth (NOTES.md, Method)."""
    if op == "softmax":
        return [(f"fae:{a}", lambda x, a=a: fae.softmax(x, -1, algorithm=a)) for a in ("auto", "online", "safe")] + \
               [("torch", lambda x: torch.softmax(x, -1)), ("copy", lambda x: x.clone())]
    if op == "log_softmax":
        return [("fae:auto", lambda x: fae.log_softmax(x, -1, algorithm="auto")),
                ("torch", lambda x: torch.log_softmax(x, -1))]
    return [("fae", lambda x: fae.logsumexp(x, -1)), ("torch", lambda x: torch.logsumexp(x, -1))]


def point_impls(fae, op, algorithm):
    """Ours at one algorithm ("fae" for logsumexp, which has none) and torch's op: a --points point."""
    if op == "logsumexp":
        return impls(fae, op)
    return [(f"fae:{algorithm}", lambda x: getattr(fae, op)(x, -1, algorithm=algorithm)),
            ("torch", lambda x: getattr(torch, op)(x, -1))]


def parse_points(text):
    """'op[/algorithm]:dtype:RxC,...' -> [(dtype name, rows, cols, op, algorithm)]."""
    points = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        try:
            op_algo, dname, shape = item.split(":")
        except ValueError:
            raise SystemExit(f"--points: {item!r} is not op[/algorithm]:dtype:RxC")
        op, _, algorithm = op_algo.partition("/")
        if op not in OPS or dname not in common.DTYPES or (algorithm and op == "logsumexp"):
            raise SystemExit(f"--points: {item!r}: op among {', '.join(OPS)} (logsumexp takes no algorithm), "
                             f"dtype among {', '.join(common.DTYPES)}")
        (rows, cols), = parse_shapes(shape)
        points.append((dname, rows, cols, op, algorithm or "auto"))
    return points


def cuda_events(calls):
    """The CUDA events (kernels, copies, fills) that calls() enqueues, once they have run (torch.profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        calls()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def print_kernels(fn, x, what):
    """The CUDA kernels one call of fn(x) launches."""
    names = sorted({e.name for e in cuda_events(lambda: fn(x))})
    print(f"{what} kernels: {' | '.join(n[:160] for n in names)}", flush=True)


def print_kernel_times(timer, fns, names, x, what, reps=20):
    """Mean device time (us) of each fn's CUDA kernels a call, each call after the cold method's flush (torch.profiler;
    the flush's own kernels, profiled alone first, left out): the cold median less this is the call's start-up."""
    flush_names = {e.name for e in cuda_events(lambda: [timer.flush() for _ in range(3)])}
    parts = []
    for name, fn in zip(names, fns):
        def calls(fn=fn):
            for _ in range(reps):
                timer.flush()
                fn(x)
        kernels = [e for e in cuda_events(calls) if e.name not in flush_names]
        parts.append(f"{name} {sum(e.device_time for e in kernels) / reps:.2f} us ({len(kernels) // reps} a call)")
    print(f"{what} kernel time a call: {', '.join(parts)}", flush=True)


def reference(op, x):
    """torch's op in float64. (In float32, torch's own CPU softmax of a 1M-element row is 1.8e-4 off, and the check
    flagged ours, 1.1e-6 off, against it.)"""
    xd = x.double()
    if op == "softmax":
        return torch.softmax(xd, -1)
    if op == "log_softmax":
        return torch.log_softmax(xd, -1)
    return torch.logsumexp(xd, -1)


def parse_shapes(text):
    shapes = []
    for s in text.split(","):
        r, c = s.lower().split("x")
        shapes.append((common.parse_ints(r)[0], common.parse_ints(c)[0]))
    return shapes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(p)
    p.add_argument("--shapes", default=None, help="comma list of RxC, e.g. 4096x4096,8x4m (k = 1024, m = 1024^2)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list among {','.join(OPS)}")
    p.add_argument("--impls", default=None,
                   help="comma list of the implementations to run (fae:auto, fae:online, fae:safe, torch, copy; "
                        "default all): e.g. fae:auto alone for quick A/B runs between builds")
    p.add_argument("--timing", default="cold,stream",
                   help="cold (each call alone after an L2 flush) and/or stream (calls back to back over rotating "
                        "inputs in a CUDA graph); see common.Timer")
    p.add_argument("--points", default=None,
                   help="comma list of op[/algorithm]:dtype:RxC to run instead of the grid (ours and torch's op)")
    p.add_argument("--kernels", action="store_true", help="print the CUDA kernels one call of ours launches per point")
    p.add_argument("--kernel-times", action="store_true",
                   help="print each implementation's kernel time a cold call (torch.profiler)")
    args = p.parse_args(argv)

    device = common.resolve_device(args.device)
    fae = common.import_fae()
    cuda = device.type == "cuda"
    shapes = parse_shapes(args.shapes) if args.shapes else (QUICK_SHAPES if args.quick or not cuda else SHAPES)
    dtypes = common.parse_dtypes(args.dtypes, "fp32,bf16")
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in OPS:
            raise SystemExit(f"unknown op {o!r}; choose among {', '.join(OPS)}")
    known = {impl for op in OPS for impl, _ in impls(fae, op)}
    wanted = None if args.impls is None else {i.strip() for i in args.impls.split(",") if i.strip()}
    if wanted is not None and (not wanted or wanted - known):
        raise SystemExit(f"--impls takes a comma list among {', '.join(sorted(known))}, got {args.impls!r}")
    if args.points and (args.shapes or args.impls):
        raise SystemExit("--points names its own shapes and implementations: leave out --shapes and --impls")
    timings = [t.strip() for t in args.timing.split(",") if t.strip()]
    if not timings or any(t not in ("cold", "stream") for t in timings):
        raise SystemExit(f"--timing takes cold and/or stream, got {args.timing!r}")

    # Cases: (dtype, rows, cols, [(op, [(impl, fn)])]), one input each: a grid shape with its ops, or a point.
    if args.points:
        cases = [(d, r, c, [(op, point_impls(fae, op, a))]) for d, r, c, op, a in parse_points(args.points)]
        dtypes, shapes, ops = sorted({c[0] for c in cases}), [c[1:3] for c in cases], [c[3][0][0] for c in cases]
    else:
        cases = [(d, r, c, [(op, [(i, f) for i, f in impls(fae, op) if wanted is None or i in wanted]) for op in ops])
                 for d in dtypes for r, c in shapes]

    torch.manual_seed(0)
    budget = common.Budget(args.max_seconds)
    timer = common.Timer(device, args.warmup, args.reps if args.reps is not None else (100 if cuda else 5),
                         args.max_point_seconds, flush=args.flush)
    env = common.environment(device, fae)
    ceilings = common.measure_ceilings(timer)
    copy_gbps = ceilings.get("copy_GBps")
    paths = common.result_paths("softmax", env["device_slug"], args.results_dir, args.extra_dir)
    payload = {"benchmark": "softmax", "env": env, "ceilings": ceilings,
               "config": {"shapes": shapes, "dtypes": dtypes, "ops": ops, "warmup": timer.warmup,
                          "reps": timer.reps, "flush": timer.flush_mode, "flush_bytes": timer.flush_bytes,
                          "quick": args.quick, "timing": timings, "points": args.points,
                          "impls": sorted(wanted) if wanted else "all",
                          "bandwidth": "(numel(x) + numel(out)) * element size / median time"},
               "complete": False, "results": []}
    print(f"# softmax benchmark on {env['device_name']} (torch {env['torch']}, commit {env['git_commit'][:12]}); "
          f"copy {common.fmt(copy_gbps, '.0f')} GB/s; flash_attn_ext from {env.get('fae_path')}; "
          f"writing {', '.join(paths)}", flush=True)

    broken = False
    fae_errors = 0
    for dname, rows, cols, case_ops in cases:
        dtype = common.DTYPES[dname]
        if broken:
            break
        x = xs = None
        for op, case_impls in case_ops:
            recs, fns, ref = [], [], None  # fns: fn(x) of every impl that ran, for the timers
            for impl, fn in case_impls:
                rec = {"op": op, "impl": impl, "dtype": dname, "shape": [rows, cols], "error": None}
                payload["results"].append(rec)
                if budget.expired():
                    rec["error"] = "skipped: time budget (--max-seconds) spent"
                    continue
                try:
                    if x is None:
                        x = torch.randn(rows, cols, device=device, dtype=torch.float32).mul_(3).to(dtype)
                    if impl != "copy":
                        ref = reference(op, x) if ref is None else ref
                        out = fn(x)
                        rec["max_abs_diff"], rec["rel_err"] = common.compare(out, ref)
                        rec["flag"] = not (rec["rel_err"] <= REL_TOL.get(dname, 1e-2))  # NaN flags too
                        del out
                        if args.kernels and cuda and impl.startswith("fae"):
                            print_kernels(fn, x, f"{op} {impl} {dname} {rows}x{cols}")
                    recs.append(rec)
                    fns.append(fn)
                except Exception as e:
                    rec["error"] = common.first_line(e)
                    broken = common.cuda_context_broken(device)
                    if broken:
                        rec["error"] += " (CUDA context broken: run stopped)"
                    if impl.startswith("fae"):
                        fae_errors += 1
                    print(_progress_line(rec), flush=True)
                    if broken:
                        break
            del ref
            # Every impl that ran is timed in one interleaved series per timing (common.Timer).
            out_numel = rows if op == "logsumexp" else rows * cols
            for timing in timings:
                if not fns or broken:
                    break
                try:
                    if timing == "cold":
                        stats = timer.time_interleaved([lambda fn=fn: fn(x) for fn in fns])
                        if args.kernel_times and cuda:
                            print_kernel_times(timer, fns, [r["impl"] for r in recs], x, f"{op} {dname} {rows}x{cols}")
                    else:
                        xs = timer.stream_inputs(x, rows * cols * x.element_size()) if xs is None else xs
                        stats = timer.time_stream(fns, xs)
                except Exception as e:
                    stats = [{"error": f"{timing} timing: {common.first_line(e)}"}] * len(recs)
                    broken = common.cuda_context_broken(device)
                for rec, st in zip(recs, stats):
                    r = rec
                    if timing != timings[0]:  # a record per timing: the identity and check of the first
                        r = {k: rec[k] for k in IDENTITY if k in rec}
                        payload["results"].append(r)
                    r.update(st, timing=timing)
                    r.setdefault("error", None)
                    if r.get("error") is None:
                        r["bytes"] = (rows * cols + out_numel) * x.element_size()
                        r["GBps"] = r["bytes"] / (r["median_ms"] * 1e-3) / 1e9
                        r["pct_copy"] = 100 * r["GBps"] / copy_gbps if copy_gbps else None
                    elif r["impl"].startswith("fae"):
                        fae_errors += 1
                    print(_progress_line(r), flush=True)
            if broken:
                break
        del x, xs
        if cuda and not broken:
            torch.cuda.empty_cache()
        common.write_json(payload, paths)

    return common.finish_run(payload, paths, budget, broken, fae_errors, args.max_seconds,
                             "softmax_points_tables" if args.points else "softmax_tables")


def _progress_line(rec):
    head = (f"{rec['op']:<11} {rec['impl']:<10} {rec['dtype']:<4} {rec['shape'][0]:>6}x{rec['shape'][1]:<8} "
            f"{rec.get('timing', ''):<6}")
    if rec["error"]:
        return f"{head} n/a  {rec['error']}"
    check = f"  maxdiff {rec['max_abs_diff']:.2e}{'  !' if rec['flag'] else ''}" if "max_abs_diff" in rec else ""
    return (f"{head} {rec['median_ms'] * 1e3:9.1f} us  {rec['GBps']:8.1f} GB/s  "
            f"{common.fmt(rec['pct_copy'], '5.1f')}% copy{check}")


if __name__ == "__main__":
    sys.exit(main())
