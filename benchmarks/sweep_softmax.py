"""Softmax kernel-configuration sweep: the default heuristic and forced configurations (FAE_SOFTMAX_CONFIG,
csrc/softmax/softmax_plan.h) against torch.softmax, timed as bench_softmax.py times (common.Timer: L2 flush
before each call, CUDA events per call, median).

FAE_SOFTMAX_CONFIG is read once per process, so each configuration runs in its own worker process. Workers
start (import torch, CUDA context, allocations) ahead of their turn, a few at a time, and time only when the
driver tells them to, so only one process uses the GPU at a time. Every result is checked against torch on
float32 upcast input before timing (the output buffer is poisoned with NaN first); a result over the
tolerance, or an error, marks the configuration invalid for that shape. Every worker also times torch.softmax,
interleaved with its configuration, so each configuration has a ratio to torch taken in one process. "copy"
is a same-size device copy (x.clone(), a fresh output like the ops') timed the same way: the ceiling at that
size under this timing method. --timing stream times as bench_softmax's stream columns do.

    python3 benchmarks/sweep_softmax.py                          # all target shapes, fp32 and bf16 (~1-2 min)
    python3 benchmarks/sweep_softmax.py --shapes 1024x32768 --dtypes bf16 --extra-dir $OUT
    python3 benchmarks/sweep_softmax.py --configs "kind=block,vpt=large;kind=split,vpt=large,smem=8"
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

SHAPES = [(65536, 128), (16384, 1024), (4096, 4096), (1024, 32768), (128, 262144), (8, 4194304), (32768, 2000)]
REL_TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 2e-2}
ELT = {"fp32": 4, "fp16": 2, "bf16": 2}
KVEC = {"fp32": 4, "fp16": 8, "bf16": 8}
LARGE = {"fp32": 8, "fp16": 4, "bf16": 4}  # RowsTraits<T>::kMaxVpt (small = large / 4)


def nvec(shape, dname):
    return -(-shape[1] // KVEC[dname])


# Candidates: (config, predicate(shape, dtype) -> try it). "default" = the heuristic (no FAE_SOFTMAX_CONFIG);
# vpt=small/large name the dtype's compiled sizes; absent fields are derived from the shape (softmax_plan.h).
# Predicates only skip what cannot fit or is clearly hopeless; the C++ validation rejects the rest quickly.
def _warp(s, d):
    return nvec(s, d) <= 32 * LARGE[d]


def _block_regs(s, d):  # the row fits one block's registers
    return 32 * LARGE[d] < nvec(s, d) <= 1024 * LARGE[d]


def _long(s, d):  # rows beyond 512 threads of registers
    return nvec(s, d) > 512 * LARGE[d]


def _many_long(s, d):
    return _long(s, d) and s[0] >= 264


def _few_long(s, d):
    return _long(s, d) and s[0] < 264


CANDIDATES = [
    ("default", lambda s, d: True),
    # warp-per-row: vectors per lane (lanes derived: the fewest that hold the row)
    ("kind=warp,vpt=1", _warp),
    ("kind=warp,vpt=2", _warp),
    ("kind=warp,vpt=4", _warp),
    ("kind=warp,vpt=8", lambda s, d: _warp(s, d) and d == "fp32"),
    ("kind=warp,vpt=4,bpsm=4", _warp),
    ("kind=warp,vpt=4,lanes=32", lambda s, d: _warp(s, d) and nvec(s, d) > 64),
    # block-per-row from registers (threads derived), with shared memory, persistent
    ("kind=block,vpt=small", lambda s, d: _block_regs(s, d) or (_warp(s, d) and nvec(s, d) > 64)),
    ("kind=block,vpt=large", lambda s, d: _block_regs(s, d) or (_warp(s, d) and nvec(s, d) > 64)),
    ("kind=block,vpt=large,bpsm=16", lambda s, d: _block_regs(s, d) and s[0] >= 16 * 132),
    ("kind=block,vpt=large,threads=32", lambda s, d: 32 * LARGE[d] < nvec(s, d) <= 128 * LARGE[d]),
    ("kind=block,vpt=large,threads=64", lambda s, d: 32 * LARGE[d] < nvec(s, d) <= 512 * LARGE[d]),
    ("kind=block,vpt=small,threads=128", lambda s, d: 32 * LARGE[d] < nvec(s, d) <= 512 * LARGE[d]),
    ("kind=block,vpt=large,threads=128", lambda s, d: 64 * LARGE[d] < nvec(s, d) <= 2048 * LARGE[d]),
    ("kind=block,vpt=large,threads=256", lambda s, d: 128 * LARGE[d] < nvec(s, d) <= 4096 * LARGE[d]),
    ("kind=block,vpt=large,threads=512", lambda s, d: 256 * LARGE[d] < nvec(s, d) <= 4096 * LARGE[d]),
    ("kind=block,vpt=large,threads=1024,smem=0", lambda s, d: 512 * LARGE[d] < nvec(s, d) <= 1024 * LARGE[d]),
    # split-row: block size, shared-memory vectors (chunk size), resident blocks
    ("kind=split,vpt=large", _long),
    ("kind=split,vpt=large,threads=256", _long),
    ("kind=split,vpt=large,smem=4", _few_long),
    ("kind=split,vpt=large,smem=8", _few_long),
    ("kind=split,vpt=large,smem=16", _few_long),
    ("kind=split,vpt=large,smem=24", _few_long),
    ("kind=split,vpt=large,threads=256,smem=8", _few_long),
    ("kind=split,vpt=large,threads=256,smem=24", _few_long),
    ("kind=split,vpt=large,smem=8,bpsm=1", _few_long),
    ("kind=split,vpt=small", lambda s, d: _long(s, d) and s[0] < 32),
    # pipelined (sm_90): block size, chunks per row (default: the heuristic's)
    ("kind=pipe", lambda s, d: nvec(s, d) >= 256),
    ("kind=pipe,threads=128", lambda s, d: nvec(s, d) >= 256),
    ("kind=pipe,threads=512", lambda s, d: nvec(s, d) >= 256),
    ("kind=pipe,chunks=2", lambda s, d: nvec(s, d) >= 4096),
    ("kind=pipe,chunks=4", lambda s, d: nvec(s, d) >= 4096),
    ("kind=pipe,chunks=132", lambda s, d: s[0] <= 8),
    ("kind=pipe,bpsm=2", lambda s, d: nvec(s, d) >= 256),
    ("kind=pipe,bpsm=2,threads=128", lambda s, d: nvec(s, d) >= 256),
    ("kind=pipe,bpsm=2,threads=256", lambda s, d: nvec(s, d) >= 256),
    # dual-role and resident (sm_90): chunk count derived as "auto" derives it
    ("kind=dual", _long),
    ("kind=resident", lambda s, d: _long(s, d) and d != "fp32"),
    # streaming (multi-pass baseline)
    ("kind=stream", _few_long),
    ("kind=stream,steps=16", _few_long),
]


def parse_shapes(text):
    out = []
    for s in text.split(","):
        r, c = s.lower().split("x")
        out.append((common.parse_ints(r)[0], common.parse_ints(c)[0]))
    return out


# --- worker -----------------------------------------------------------------------------------------------

def worker(args):
    import torch
    fae = common.import_fae()
    device = common.resolve_device(args.device)
    tasks = json.loads(args.tasks)
    timer = common.Timer(device, args.warmup, args.reps, args.max_point_seconds)
    ops = {"softmax": (lambda x: fae.softmax(x, -1), lambda x: torch.softmax(x, -1), lambda xf: torch.softmax(xf, -1)),
           "logsumexp": (lambda x: fae.logsumexp(x, -1), lambda x: torch.logsumexp(x, -1),
                         lambda xf: torch.logsumexp(xf, -1))}
    extra = common.environment(device, fae) if args.config == "default" else {}
    print("READY", flush=True)
    sys.stdin.readline()  # the driver's go: this worker alone uses the GPU from now on
    if extra:
        extra["ceilings"] = common.copy_bandwidth(timer)
        print("ENV " + json.dumps(extra, default=str), flush=True)
    for op, dname, rows, cols in tasks:
        dtype = common.DTYPES[dname]
        torch.manual_seed(0)
        x = torch.randn(rows, cols, device=device, dtype=torch.float32).mul_(3).to(dtype)
        ref = ops[op][2](x.float())
        # torch runs in every worker, interleaved with the config (common.Timer.time_interleaved): the ratio to
        # it is free of the drift between processes that separates configs timed in turn.
        impls = [("fae", ops[op][0]), ("torch", ops[op][1])]
        if args.config == "default":
            impls.append(("copy", lambda x: x.clone()))
        recs, fns = [], []  # fn(x) of every impl that passed its check, for the timers
        for impl, fn in impls:
            rec = {"config": args.config, "impl": impl, "op": op, "dtype": dname, "shape": [rows, cols],
                   "error": None}
            try:
                if impl != "copy":
                    poison = torch.full(ref.shape, float("nan"), device=device, dtype=dtype)
                    del poison  # the op's output most likely reuses this block: unwritten elements stay NaN
                    out = fn(x)
                    rec["max_abs_diff"], rec["rel_err"] = common.compare(out, ref)
                    del out
                    if not rec["rel_err"] <= REL_TOL[dname]:
                        rec["error"] = f"wrong result: rel err {rec['rel_err']:.3g}, max abs diff {rec['max_abs_diff']:.3g}"
                if rec["error"] is None:
                    out_numel = rows if op == "logsumexp" and impl != "copy" else rows * cols
                    rec["bytes"] = (rows * cols + out_numel) * ELT[dname]
                    recs.append(rec)
                    fns.append(fn)
                    continue
            except Exception as e:
                rec["error"] = common.first_line(e, 300)
                if common.cuda_context_broken(device):
                    rec["error"] += " (CUDA context broken)"
                    print("RESULT " + json.dumps(rec), flush=True)
                    return 3
            print("RESULT " + json.dumps(rec), flush=True)
        if fns:
            if args.timing == "stream":
                xs = timer.stream_inputs(x, rows * cols * ELT[dname])
                stats_all = timer.time_stream(fns, xs)
                del xs
            else:
                stats_all = timer.time_interleaved([lambda fn=fn: fn(x) for fn in fns])
            for rec, stats in zip(recs, stats_all):
                rec.update(stats, timing=args.timing)
                print("RESULT " + json.dumps(rec), flush=True)
        del x, ref
    return 0


# --- driver -----------------------------------------------------------------------------------------------

def start_worker(config, tasks, args):
    env = dict(os.environ)
    env.pop("FAE_SOFTMAX_CONFIG", None)
    if config != "default":
        env["FAE_SOFTMAX_CONFIG"] = config
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--config", config, "--tasks", json.dumps(tasks),
           "--reps", str(args.reps), "--warmup", str(args.warmup), "--max-point-seconds", str(args.max_point_seconds),
           "--timing", args.timing]
    if args.device:
        cmd += ["--device", args.device]
    return subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)


def read_until_ready(proc):
    lines = []
    for line in proc.stdout:
        if line.startswith("READY"):
            return True, lines
        lines.append(line.rstrip())
    return False, lines


def pct(rec, copy_gbps):
    if rec.get("error") or not copy_gbps:
        return None
    return 100 * rec["bytes"] / (rec["median_ms"] * 1e-3) / 1e9 / copy_gbps


def summarize(payload):
    copy_gbps = payload.get("ceilings", {}).get("copy_GBps")
    res = payload["results"]
    lines = []
    keys = []
    for r in res:
        k = (r["op"], r["dtype"], tuple(r["shape"]))
        if k not in keys:
            keys.append(k)
    # per-point details of the fae configs (compact, before the summary)
    for op, dname, shape in keys:
        here = [r for r in res if (r["op"], r["dtype"], tuple(r["shape"])) == (op, dname, shape)]
        pts = [r for r in here if r["impl"] == "fae"]
        ok = sorted((r for r in pts if not r["error"]), key=lambda r: r["median_ms"])
        bad = [r for r in pts if r["error"]]
        torch_of = {r["config"]: r for r in here if r["impl"] == "torch" and not r["error"]}

        def vs_torch(r):
            t = torch_of.get(r["config"])
            return f" ({t['median_ms'] / r['median_ms']:.3f}x)" if t else ""

        lines.append(f"-- {op} {dname} {shape[0]}x{shape[1]} (x = its own worker's torch / it): " + "; ".join(
            f"{r['config'].replace('kind=', '')} {r['median_ms'] * 1e3:.1f}{vs_torch(r)}" for r in ok[:8]) +
            (f" | invalid: {len(bad)} ({'; '.join(r['config'] + ': ' + r['error'][-70:] for r in bad[:2])})"
             if bad else ""))
    headers = ["op", "dtype", "shape", "copy us", "copy%", "torch us", "default us", "def %", "best us", "best %",
               "torch/best", "best config"]
    rows = []
    for op, dname, shape in keys:
        sel = [r for r in res if (r["op"], r["dtype"], tuple(r["shape"])) == (op, dname, shape)]
        get = lambda impl, cfg=None: next((r for r in sel if r["impl"] == impl and not r["error"] and
                                           (cfg is None or r["config"] == cfg)), None)
        cp, tq, df = get("copy"), get("torch", "default"), get("fae", "default")
        ok = sorted((r for r in sel if r["impl"] == "fae" and not r["error"]), key=lambda r: r["median_ms"])
        best = ok[0] if ok else None
        us = lambda r: common.num(r["median_ms"] * 1e3) if r else "n/a"
        pc = lambda r: common.fmt(pct(r, copy_gbps), ".1f") if r else "n/a"
        rows.append([op, dname, f"{shape[0]}x{shape[1]}", us(cp), pc(cp), us(tq), us(df), pc(df), us(best), pc(best),
                     common.fmt(tq["median_ms"] / best["median_ms"], ".2f") if tq and best else "n/a",
                     best["config"] if best else "n/a"])
    lines.append("")
    lines.append(common.format_table(headers, rows, align=(0, 1, 2, 11)))
    lines.append(f"% = (bytes read + bytes written) / median time / copy bandwidth "
                 f"({common.fmt(copy_gbps, '.0f')} GB/s, 1 GiB copy); copy us = same-size x.clone(), same method")
    return "\n".join(lines)


def driver(args):
    shapes = parse_shapes(args.shapes) if args.shapes else SHAPES
    dtypes = common.parse_dtypes(args.dtypes, "fp32,bf16")
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    candidates = CANDIDATES
    if args.configs:
        candidates = [("default", lambda s, d: True)] + [(c.strip(), lambda s, d: True)
                                                          for c in args.configs.split(";") if c.strip()]
    plan = []
    for config, pred in candidates:
        tasks = [(op, d, r, c) for op in ops for d in dtypes for (r, c) in shapes
                 if config == "default" or (op == "softmax" or args.all_ops) and pred((r, c), d)]
        if tasks:
            plan.append((config, tasks))
    budget = common.Budget(args.max_seconds)
    payload = {"benchmark": "sweep_softmax", "config": {"shapes": shapes, "dtypes": dtypes, "ops": ops,
                                                        "reps": args.reps, "warmup": args.warmup,
                                                        "timing": args.timing},
               "results": [], "complete": False}
    slug = "unknown"
    print(f"# sweep: {len(plan)} configurations, {sum(len(t) for _, t in plan)} points", flush=True)
    pending = []  # started workers, in order
    next_i = 0
    broken = False
    for i in range(len(plan)):
        while next_i < len(plan) and next_i < i + args.prestart:
            pending.append((plan[next_i][0], start_worker(plan[next_i][0], plan[next_i][1], args)))
            next_i += 1
        config, proc = pending.pop(0)
        if budget.expired() or broken:
            proc.kill()
            proc.wait()
            payload["results"].append({"config": config, "impl": "fae", "error": "skipped (budget or broken context)",
                                       "op": "-", "dtype": "-", "shape": [0, 0]})
            continue
        ready, pre = read_until_ready(proc)
        if not ready:
            proc.wait()
            print(f"[{config}] worker failed before READY: {' | '.join(pre[-3:])}", flush=True)
            continue
        t0 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith("ENV "):
                env = json.loads(line[4:])
                payload["ceilings"] = env.pop("ceilings")
                payload["env"] = env
                slug = env.get("device_slug", slug)
            elif line.startswith("RESULT "):
                rec = json.loads(line[7:])
                payload["results"].append(rec)
                if "CUDA context broken" in (rec["error"] or ""):
                    broken = True
            else:
                print(f"[{config}] {line.rstrip()}", flush=True)
        rc = proc.wait()
        n_ok = sum(1 for r in payload["results"] if r["config"] == config and not r["error"])
        print(f"[{i + 1}/{len(plan)}] {config}: {n_ok} ok, rc {rc}, {time.monotonic() - t0:.1f}s "
              f"(total {budget.elapsed():.0f}s)", flush=True)
    for _, proc in pending:
        proc.kill()
    payload["complete"] = not broken and not budget.expired()
    payload["elapsed_s"] = budget.elapsed()
    paths = common.result_paths("sweep_softmax", slug, args.results_dir, args.extra_dir)
    common.write_json(payload, paths)
    print(f"# wrote {', '.join(paths)}")
    print(summarize(payload))
    return 0 if payload["complete"] else 3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None)
    p.add_argument("--shapes", default=None, help="comma list of RxC (k = 1024, m = 1024^2); default: target shapes")
    p.add_argument("--dtypes", default=None, help="comma list among fp32,fp16,bf16 (default fp32,bf16)")
    p.add_argument("--ops", default="softmax", help="softmax and/or logsumexp (non-default configs: softmax only "
                                                    "unless --all-ops)")
    p.add_argument("--all-ops", action="store_true", help="run every op for every configuration")
    p.add_argument("--configs", default=None, help="';'-separated FAE_SOFTMAX_CONFIG values instead of the built-in "
                                                   "candidates (the default heuristic always runs)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-point-seconds", type=float, default=1.0)
    p.add_argument("--timing", choices=("cold", "stream"), default="cold",
                   help="cold: each call alone after an L2 flush; stream: calls back to back over rotating inputs "
                        "(common.Timer.time_stream)")
    p.add_argument("--max-seconds", type=float, default=140.0, help="budget; configurations left are skipped")
    p.add_argument("--prestart", type=int, default=4, help="workers started ahead (startup overlaps timing)")
    p.add_argument("--results-dir", default=common.RESULTS_DIR)
    p.add_argument("--extra-dir", action="append", default=[])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", default="default", help=argparse.SUPPRESS)
    p.add_argument("--tasks", default="[]", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
