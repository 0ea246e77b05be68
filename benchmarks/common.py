"""Shared benchmark machinery: timing, ceilings, environment record, JSON results and text tables.

Timing on CUDA: before every timed call a buffer of at least 256 MiB (and at least 4x the L2 cache) is read
(``--flush read``, the default) or written (``--flush write``), so no call finds its inputs in L2; each call
is timed alone with a pair of CUDA events; the median over the reps is reported. Reading is the default
because a written buffer leaves L2 full of dirty lines, whose write-back then lands inside the next timed
call (up to 50 MB of extra DRAM writes on an H100, as much as a small softmax moves itself). On the CPU:
time.perf_counter around each call after a smaller flush; CPU numbers are only indicative.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO_ROOT, "benchmarks", "results")

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
MiB = 1 << 20


def import_fae():
    """Imports flash_attn_ext: installed (pip -e) first, else built in place in the repository root."""
    try:
        import flash_attn_ext as fae
        return fae
    except ImportError as installed_error:
        sys.path.insert(0, REPO_ROOT)
        try:
            import flash_attn_ext as fae
            return fae
        except ImportError as inplace_error:
            raise SystemExit(
                f"cannot import flash_attn_ext (installed: {installed_error}; in place: {inplace_error}). Build "
                f"it first: python3 -m pip install --no-build-isolation -e . (or python3 setup.py build_ext "
                f"--inplace)")


# --- arguments ------------------------------------------------------------------------------------------

def add_common_args(parser: argparse.ArgumentParser):
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    parser.add_argument("--quick", action="store_true", help="smaller grid and sizes (smoke test)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls before timing")
    parser.add_argument("--reps", type=int, default=None, help="timed calls per point (median reported)")
    parser.add_argument("--max-point-seconds", type=float, default=None,
                        help="fewer reps (at least 3) for a point whose reps would take longer than this")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="time budget of the whole run; points left when it runs out are recorded as skipped")
    parser.add_argument("--flush", choices=("read", "write", "none"), default="read",
                        help="how L2 is emptied before each timed call (see common.py)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where <name>_<device>.json is written")
    parser.add_argument("--extra-dir", action="append", default=[],
                        help="also write the JSON here (repeatable), e.g. $OUT")
    parser.add_argument("--dtypes", default=None, help="comma list among fp32,fp16,bf16 (default: per benchmark)")


def resolve_device(name):
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda asked for, but torch.cuda.is_available() is False")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise SystemExit(f"unsupported device {name!r}: use cuda or cpu")
    return device


def parse_dtypes(text, default):
    names = [s.strip() for s in (text or default).split(",") if s.strip()]
    for n in names:
        if n not in DTYPES:
            raise SystemExit(f"unknown dtype {n!r}; choose among {', '.join(DTYPES)}")
    return names


def parse_ints(text):
    """'512,1k,16k,4m' -> [512, 1024, 16384, 4194304] (k = 1024, m = 1024 * 1024)."""
    out = []
    for s in text.split(","):
        s = s.strip().lower()
        if s:
            mult = {"k": 1 << 10, "m": 1 << 20}.get(s[-1], 1)
            out.append(int(s[:-1] if mult > 1 else s) * mult)
    return out


# --- timing ---------------------------------------------------------------------------------------------

def summarize_ms(times_ms):
    ts = sorted(times_ms)
    n = len(ts)

    def q(p):
        return ts[min(n - 1, max(0, int(round(p * (n - 1)))))]

    return {"median_ms": statistics.median(ts), "min_ms": ts[0], "p20_ms": q(0.2), "p80_ms": q(0.8),
            "mean_ms": sum(ts) / n, "reps": n}


class Timer:
    """Times callables on one device with the cache flushed before each call."""

    def __init__(self, device, warmup=None, reps=None, max_point_seconds=None, flush_bytes=None, flush="read"):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.warmup = warmup if warmup is not None else (3 if self.cuda else 1)
        self.reps = reps if reps is not None else (20 if self.cuda else 5)
        self.max_point_seconds = max_point_seconds if max_point_seconds is not None else (2.0 if self.cuda else 5.0)
        if flush_bytes is None:
            if self.cuda:
                l2 = getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 50 * MiB)
                flush_bytes = max(256 * MiB, 4 * l2)
            else:
                flush_bytes = 64 * MiB
        if flush not in ("read", "write", "none"):
            raise ValueError(f"flush must be read, write or none, got {flush!r}")
        self.flush_mode = flush
        self.flush_bytes = flush_bytes if flush != "none" else 0
        # int64: sum() of an int32 tensor accumulates in int64 by first writing an int64 copy (2x the bytes),
        # so the "read" flush was a 256 MiB read, a 512 MiB write and a 512 MiB read (~475 us on the H100);
        # of int64 it is the one read it is meant to be (~90 us).
        self._flush_buf = torch.ones(max(1, self.flush_bytes // 8), dtype=torch.int64, device=self.device)

    def flush(self):
        if self.flush_mode == "read":
            self._flush_buf.sum()  # one streaming read: L2 ends up full of clean lines
        elif self.flush_mode == "write":
            self._flush_buf.zero_()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def time(self, fn, flush=True, warmup=None, reps=None):
        """Median and spread (ms) of ``fn()`` over the reps, each call timed alone after a cache flush."""
        return self.time_interleaved([fn], flush, warmup, reps)[0]

    def time_interleaved(self, fns, flush=True, warmup=None, reps=None, lead_ins=None):
        """``time`` for several callables at once, their reps taken in turn (rep i of every callable before rep
        i + 1 of any), so a drift of the device over the point (clocks, other tenants, the allocator) lands on
        all of them alike and their ratios do not depend on which was timed first. ``lead_ins``: one callable
        per fn, run untimed right before each of its timed calls (after the flush). Returns one summary per
        callable, in order."""
        warmup = self.warmup if warmup is None else warmup
        reps = self.reps if reps is None else reps

        def prepare(k):  # what precedes every call of fns[k], untimed
            if flush:
                self.flush()
            if lead_ins is not None:
                lead_ins[k]()

        self.sync()
        t0 = time.perf_counter()
        for _ in range(max(1, warmup)):
            for k, fn in enumerate(fns):
                prepare(k)
                fn()
        self.sync()
        per_round = (time.perf_counter() - t0) / max(1, warmup)
        if per_round * reps > self.max_point_seconds * len(fns):
            reps = max(3, int(self.max_point_seconds * len(fns) / max(per_round, 1e-9)))
        times = [[] for _ in fns]
        if self.cuda:
            events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(reps)] for _ in fns]
            for i in range(reps):
                for k, fn in enumerate(fns):
                    prepare(k)
                    events[k][i][0].record()
                    fn()
                    events[k][i][1].record()
            torch.cuda.synchronize(self.device)
            times = [[s.elapsed_time(e) for s, e in ev] for ev in events]
        else:
            for _ in range(reps):
                for k, fn in enumerate(fns):
                    prepare(k)
                    t = time.perf_counter()
                    fn()
                    times[k].append((time.perf_counter() - t) * 1e3)
        return [summarize_ms(t) for t in times]

    def stream_inputs(self, x, out_bytes):
        """Copies of ``x`` for ``time_stream``: enough that a pass over them (each call reading one and writing
        ``out_bytes``) moves 4x the L2 size, so no call finds its input in L2 though nothing flushes. At least 2,
        at most 512."""
        per_call = x.numel() * x.element_size() + out_bytes
        l2 = getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 50 * MiB) if self.cuda else 0
        count = max(2, min(512, -(-4 * max(l2, MiB) // max(per_call, 1)) + 1))
        return [x] + [x.clone() for _ in range(count - 1)]

    def time_stream(self, fns, xs, reps=None):
        """Sustained time per call of each ``fn(x)``: the calls over every input of ``xs`` back to back (one CUDA
        graph per callable, so neither host launch overhead nor a flush sits between them; their outputs stay
        alive, so each call writes fresh memory), the time of one pass divided by len(xs); the passes of the
        callables taken in turn as in ``time_interleaved``, each timed pass right after an untimed pass of the
        same callable. What a model sees when the op runs between other kernels: no per-call start-up cost, and
        the write-back a timed pass inherits (the output still in L2 when the pass before it ended) is its own
        kind's, so the time is the callable's steady state; without the lead-in a pass paid for whatever the
        other callable's pass left in L2 (NOTES, "s31 run 7"). The bytes over this time compare like for like
        with the copy bandwidth (itself one long copy). On the CPU: a plain loop over xs. Returns one summary
        (ms per call) per callable."""
        reps = max(3, self.reps // 4 if reps is None else reps)
        passes = []
        for fn in fns:
            if not self.cuda:
                passes.append(lambda fn=fn: [fn(x) for x in xs])
                continue
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up off the capture: module loads, allocator blocks
                for x in xs[:2]:
                    fn(x)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs = [fn(x) for x in xs]  # alive to the end of the capture: one output block per call
            passes.append(lambda graph=graph, outs=outs: graph.replay())
        stats = self.time_interleaved(passes, flush=False, warmup=1, reps=reps, lead_ins=passes)
        for s in stats:
            for k in ("median_ms", "min_ms", "p20_ms", "p80_ms", "mean_ms"):
                s[k] /= len(xs)
        return stats


# --- ceilings -------------------------------------------------------------------------------------------

def copy_bandwidth(timer, nbytes=None):
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    if nbytes is None:
        if timer.cuda:
            free, _ = torch.cuda.mem_get_info(timer.device)
            nbytes = int(min(1 << 30, free // 8)) // 16 * 16
        else:
            nbytes = 256 * MiB
    src = torch.randint(-2 ** 31, 2 ** 31 - 1, (nbytes // 4,), dtype=torch.int32, device=timer.device)
    dst = torch.empty_like(src)
    stats = timer.time(lambda: dst.copy_(src), flush=False, warmup=3, reps=10 if timer.cuda else 5)
    gbps = 2 * nbytes / (stats["median_ms"] * 1e-3) / 1e9
    del src, dst
    return {"copy_GBps": gbps, "copy_bytes": nbytes, "copy_median_ms": stats["median_ms"]}


def matmul_rate(timer):
    """Dense matmul rate (TFLOP/s): bf16 8192^3 on CUDA, fp32 1024^3 on the CPU."""
    n, dtype = (8192, torch.bfloat16) if timer.cuda else (1024, torch.float32)
    a = torch.randn(n, n, device=timer.device, dtype=dtype)
    b = torch.randn(n, n, device=timer.device, dtype=dtype)
    stats = timer.time(lambda: a @ b, flush=False, warmup=3, reps=10 if timer.cuda else 3)
    return {"matmul_TFLOPs": 2 * n ** 3 / (stats["median_ms"] * 1e-3) / 1e12, "matmul_n": n,
            "matmul_dtype": DTYPE_NAMES[dtype]}


def measure_ceilings(timer):
    out = {}
    for f in (copy_bandwidth, matmul_rate):
        try:
            out.update(f(timer))
        except Exception as e:  # a ceiling that cannot be measured is reported, not fatal
            out[f.__name__ + "_error"] = first_line(e)
    if timer.cuda:
        torch.cuda.empty_cache()
    return out


# --- environment record ---------------------------------------------------------------------------------

def slugify(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_name(device):
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return name


def device_slug(device):
    return slugify(device_name(device)) if torch.device(device).type == "cuda" else "cpu"


def _git(*args):
    try:
        r = subprocess.run(["git", "-C", REPO_ROOT, *args], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def source_hash():
    """sha256 over the sources that make the kernels: identifies the code even where .git is absent."""
    h = hashlib.sha256()
    paths = []
    for top in ("csrc", "flash_attn_ext"):
        for root, dirs, files in os.walk(os.path.join(REPO_ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.join(root, f) for f in files if f.endswith((".cpp", ".cu", ".h", ".cuh", ".py"))]
    paths.append(os.path.join(REPO_ROOT, "setup.py"))
    for p in sorted(paths):
        if os.path.isfile(p):
            h.update(os.path.relpath(p, REPO_ROOT).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def environment(device, fae=None):
    device = torch.device(device)
    env = {
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_type": device.type,
        "device_name": device_name(device),
        "device_slug": device_slug(device),
        # The GPU machine's copy of the tree may carry a stale .git: the commit the caller names wins.
        "git_commit": os.environ.get("FAE_GIT_COMMIT") or _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": None,
        "source_sha256_16": source_hash(),
        "argv": sys.argv,
    }
    status = None if os.environ.get("FAE_GIT_COMMIT") else _git("status", "--porcelain", "--untracked-files=no")
    if status is not None:
        env["git_dirty"] = bool(status)
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update({"capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                    "total_memory_bytes": p.total_memory, "l2_bytes": getattr(p, "L2_cache_size", None),
                    "cudnn": torch.backends.cudnn.version(), "driver": _nvidia_smi_driver()})
    else:
        env["threads"] = torch.get_num_threads()
    if fae is not None:
        env["fae_version"] = getattr(fae, "__version__", None)
        env["fae_path"] = os.path.dirname(os.path.abspath(fae.__file__))  # which build ran (A/B runs)
        try:
            env["fae_cuda_kernels"] = fae.cuda_available()
        except Exception as e:
            env["fae_cuda_kernels"] = first_line(e)
    return env


def _nvidia_smi_driver():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


# --- results --------------------------------------------------------------------------------------------

def result_paths(name, slug, results_dir=RESULTS_DIR, extra_dirs=()):
    return [os.path.join(d, f"{name}_{slug}.json") for d in [results_dir, *extra_dirs] if d]


def write_json(payload, paths):
    """Writes atomically (temp file + rename), so a run killed mid-write leaves the previous version."""
    text = json.dumps(payload, indent=1, default=_json_default) + "\n"
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)


def _json_default(o):
    if isinstance(o, torch.dtype):
        return DTYPE_NAMES.get(o, str(o))
    if isinstance(o, torch.device):
        return str(o)
    return str(o)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def first_line(e, limit=160):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return (text[0] if text else type(e).__name__)[:limit]


def cuda_context_broken(device):
    """After an exception: True when the CUDA context has a sticky error (nothing more can run here)."""
    if torch.device(device).type != "cuda":
        return False
    try:
        torch.cuda.synchronize(device)
        torch.empty(1, device=device).add_(1).item()
        return False
    except Exception:
        return True


def compare(out, ref):
    """max |out - ref| and ||out - ref|| / ||ref|| in float64; NaN when either has a NaN where the other doesn't."""
    a, b = out.detach().double(), ref.detach().double()
    finite = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), finite):
        return float("nan"), float("nan")
    if not bool(finite.all()) and not torch.equal(a[~finite], b[~finite]):
        return float("nan"), float("nan")
    d = (a - b)[finite]
    if d.numel() == 0:
        return 0.0, 0.0
    ref_norm = float(b[finite].norm())
    return float(d.abs().max()), float(d.norm()) / ref_norm if ref_norm > 0 else float(d.norm())


class Budget:
    """Wall-clock budget of a run: ``expired()`` once ``max_seconds`` have passed since construction."""

    def __init__(self, max_seconds):
        self.max_seconds = max_seconds
        self.start = time.monotonic()

    def elapsed(self):
        return time.monotonic() - self.start

    def expired(self):
        return self.max_seconds is not None and self.elapsed() > self.max_seconds


# --- text tables ----------------------------------------------------------------------------------------

def fmt(x, spec=".3g", na="n/a"):
    if x is None:
        return na
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    return format(x, spec)


def num(x, na="n/a"):
    """Three significant digits, no exponent in the usual ranges: 512, 51.2, 5.12, 0.0512; 1.2e-04 below."""
    if x is None:
        return na
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    ax = abs(x)
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if ax >= 0.01 or ax == 0 else f"{x:.1e}"


def format_table(headers, rows, markdown=False, align=None):
    """Aligned text table (right-aligned except the first columns given by ``align``) or a markdown table."""
    rows = [[str(c) for c in r] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    left = set(align or ())

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def finish_run(payload, paths, budget, broken, fae_errors, max_seconds, table_name):
    """Writes the final JSON, prints the tables (``tables.<table_name>``) and what is missing; returns the exit
    code: 3 when the CUDA context broke, 2 when one of our points raised, else 0."""
    payload["complete"] = not broken and not budget.expired()
    payload["elapsed_s"] = budget.elapsed()
    write_json(payload, paths)
    import tables  # after the run: a table bug must not cost the measurements

    print()
    print(getattr(tables, table_name)(payload))
    if broken:
        print("CUDA context broke during the run: results after that point are missing.")
    skipped = sum(1 for r in payload["results"] if (r.get("error") or "").startswith("skipped"))
    if skipped:
        print(f"time budget (--max-seconds {max_seconds}) spent: {skipped} measurement(s) skipped.")
    if fae_errors:
        print(f"{fae_errors} flash_attn_ext point(s) raised an error (see 'error' in the JSON).")
    return 3 if broken else (2 if fae_errors else 0)
