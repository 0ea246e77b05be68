"""Tables from the benchmark JSON: aligned text (for logs) or markdown (for the README).

    python3 benchmarks/tables.py                                  # every JSON in benchmarks/results, markdown
    python3 benchmarks/tables.py --text out/softmax_nvidia-h100-80gb-hbm3.json
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def _header(payload):
    env, ceil = payload.get("env", {}), payload.get("ceilings", {})
    parts = [f"{payload.get('benchmark')} on {env.get('device_name')}", f"torch {env.get('torch')}",
             f"CUDA {env.get('cuda')}", f"commit {str(env.get('git_commit'))[:12]}"
             + (" (dirty)" if env.get("git_dirty") else "") + f" (sources {env.get('source_sha256_16')})",
             f"copy {common.fmt(ceil.get('copy_GBps'), '.0f')} GB/s",
             f"matmul {common.num(ceil.get('matmul_TFLOPs'))} TFLOP/s ({ceil.get('matmul_dtype')})"]
    if not payload.get("complete", True):
        parts.append("INCOMPLETE run")
    return "; ".join(parts)


def _ok(r):
    return r is not None and not r.get("error") and r.get("median_ms") is not None


def _ratio(a, b):
    return a / b if a is not None and b else None


def _diff(*recs):
    """Largest max_abs_diff among the records, '!' when any of them is flagged (rel error over tolerance)."""
    recs = [r for r in recs if r is not None and r.get("max_abs_diff") is not None]
    if not recs:
        return "n/a"
    worst = max(recs, key=lambda r: (r["max_abs_diff"] != r["max_abs_diff"], r["max_abs_diff"]))  # NaN first
    return common.fmt(worst["max_abs_diff"], ".1e") + (" !" if any(r.get("flag") for r in recs) else "")


def _err(r):
    """Why a cell is empty: 'skip' (budget, --impls, broken run), 'err' (ours raised), 'n/a' (a peer refused)."""
    if r is None:
        return "-"
    e = r.get("error") or ""
    if e.startswith(("skipped", "not run", "not timed")):
        return "skip"
    return "err" if e and r.get("impl", "").startswith("fae") else "n/a"


# --- softmax ---------------------------------------------------------------------------------------------

TIMING_NOTE = {
    "cold": "cold: each call alone after an L2 flush, CUDA events around it",
    "stream": "stream: calls back to back over rotating inputs (one CUDA graph), time per call",
}


def softmax_tables(payload, markdown=False):
    """One set of tables per timing in the run (records without a timing are cold: runs before 47e9c44)."""
    res = payload.get("results", [])
    timings = list(dict.fromkeys(r.get("timing", "cold") for r in res)) or ["cold"]
    out = [_header(payload)]
    for timing in timings:
        out += ["", f"== {TIMING_NOTE.get(timing, timing)}",
                _softmax_tables_of([r for r in res if r.get("timing", "cold") == timing], markdown)]
    return "\n".join(out)


def softmax_points_tables(payload, markdown=False):
    """A --points run: a row per point, ours (at the point's algorithm) beside torch's op, us per timing."""
    res = payload.get("results", [])
    timings = list(dict.fromkeys(r.get("timing", "cold") for r in res)) or ["cold"]
    by = {(r["op"], r["impl"], r["dtype"], tuple(r["shape"]), r.get("timing", "cold")): r for r in res}

    def us(r):
        return common.fmt(r["median_ms"] * 1e3, ".1f") if _ok(r) else _err(r)

    rows = []
    for r in res:
        if r["impl"] == "torch" or r.get("timing", "cold") != timings[0]:
            continue
        point = (r["op"], r["dtype"], tuple(r["shape"]))
        row = [r["op"], r["impl"], r["dtype"], f"{point[2][0]}x{point[2][1]}"]
        for t in timings:
            ours = by.get((r["op"], r["impl"]) + point[1:] + (t,))
            theirs = by.get((r["op"], "torch") + point[1:] + (t,))
            ratio = _ratio(theirs["median_ms"], ours["median_ms"]) if _ok(ours) and _ok(theirs) else None
            row += [us(ours), us(theirs), common.fmt(ratio, ".2f")]
        rows.append(row + [_diff(r)])
    head = ["op", "impl", "dtype", "shape"]
    for t in timings:
        head += [f"{t} us", f"torch {t} us", "x torch"]
    return "\n".join([_header(payload), "", "points: us; x torch = torch time / ours; maxdiff vs fp64",
                      common.format_table(head + ["maxdiff"], rows, markdown, align=(0, 1, 2, 3))])


def _softmax_tables_of(res, markdown):
    by = {(r["op"], r["impl"], r["dtype"], tuple(r["shape"])): r for r in res}
    keys = []
    for r in res:
        k = (r["dtype"], tuple(r["shape"]))
        if k not in keys:
            keys.append(k)

    def pct(op, impl, k):
        r = by.get((op, impl) + k)
        return common.fmt(r.get("pct_copy"), ".0f") if _ok(r) else _err(r)

    def us(op, impl, k):
        r = by.get((op, impl) + k)
        return common.fmt(r["median_ms"] * 1e3, ".1f") if _ok(r) else _err(r)

    def speedup(op, ours, k):
        a, b = by.get((op, ours) + k), by.get((op, "torch") + k)
        return common.fmt(_ratio(b["median_ms"], a["median_ms"]), ".2f") if _ok(a) and _ok(b) else "n/a"

    out = []
    ops = {r["op"] for r in res}
    if "softmax" in ops:
        rows = []
        for k in keys:
            rows.append([k[0], f"{k[1][0]}x{k[1][1]}", us("softmax", "fae:auto", k), pct("softmax", "fae:auto", k),
                         pct("softmax", "fae:online", k), pct("softmax", "fae:safe", k), us("softmax", "torch", k),
                         pct("softmax", "torch", k), speedup("softmax", "fae:auto", k), pct("softmax", "copy", k),
                         _diff(*(by.get(("softmax", a) + k) for a in ("fae:auto", "fae:online", "fae:safe")))])
        out.append("softmax: us, % of copy bandwidth; x = torch time / ours (auto); copy % = x.clone() timed alike; "
                   "maxdiff: worst algorithm vs fp64")
        out.append(common.format_table(
            ["dtype", "shape", "auto us", "auto %", "online %", "safe %", "torch us", "torch %", "x torch",
             "copy %", "maxdiff"], rows, markdown, align=(0, 1)))
    if "log_softmax" in ops or "logsumexp" in ops:
        rows = []
        for k in keys:
            rows.append([k[0], f"{k[1][0]}x{k[1][1]}",
                         pct("log_softmax", "fae:auto", k), pct("log_softmax", "torch", k),
                         speedup("log_softmax", "fae:auto", k), _diff(by.get(("log_softmax", "fae:auto") + k)),
                         pct("logsumexp", "fae", k), pct("logsumexp", "torch", k), speedup("logsumexp", "fae", k),
                         _diff(by.get(("logsumexp", "fae") + k))])
        out += ["", "log_softmax (auto), logsumexp: % of copy bandwidth; x = torch time / ours"]
        out.append(common.format_table(
            ["dtype", "shape", "lsm %", "torch %", "x torch", "maxdiff", "lse %", "torch %", "x torch",
             "maxdiff"], rows, markdown, align=(0, 1)))
    return "\n".join(out)


# --- attention -------------------------------------------------------------------------------------------

PEER_SHORT = [("sdpa_flash", "flash"), ("sdpa_cudnn", "cudnn"), ("sdpa_efficient", "eff")]


def attention_tables(payload, markdown=False):
    res = payload.get("results", [])

    def key(r):
        return (r["grid"], r["dtype"], r["B"], r["Hq"], r["Hk"], r["Sq"], r["Sk"], r["D"], bool(r["causal"]))

    by, keys = {}, []
    for r in res:
        k = key(r)
        by[k + (r["impl"],)] = r
        if k not in keys:
            keys.append(k)
    out = [_header(payload)]

    prefill = [k for k in keys if k[0] == "prefill"]
    if prefill:
        rows = []
        for k in prefill:
            ours, fallback = by.get(k + ("fae",)), by.get(k + ("fae_sm80",))
            row = [k[1], k[7], k[5], "y" if k[8] else "n",
                   common.num(ours["TFLOPs"]) if _ok(ours) else _err(ours),
                   common.num(fallback["TFLOPs"]) if _ok(fallback) else _err(fallback)]
            peers = [by.get(k + (impl,)) for impl, _ in PEER_SHORT]
            row += [common.num(p["TFLOPs"]) if _ok(p) else _err(p) for p in peers]
            row += [common.fmt(_ratio(ours["TFLOPs"], p["TFLOPs"]), ".2f") if _ok(ours) and _ok(p) else "n/a"
                    for p in peers]
            row.append(_diff(ours))
            rows.append(row)
        out += ["", "prefill TFLOP/s (B*S = tokens, Hq*D fixed); sm80 = our mma.sync fallback kernel; "
                    "x = ours / peer; maxdiff = max|ours - SDPA flash|"]
        out.append(common.format_table(
            ["dtype", "D", "S", "causal", "ours", "sm80", "flash", "cudnn", "eff", "x flash", "x cudnn", "x eff", "maxdiff"],
            rows, markdown, align=(0, 3)))

    decode = [k for k in keys if k[0] == "decode"]
    if decode:
        rows = []
        for k in decode:
            ours = by.get(k + ("fae",))
            row = [k[1], k[2], f"{k[3]}:{k[4]}", k[6],
                   common.num(ours["median_ms"] * 1e3) if _ok(ours) else _err(ours),
                   common.num(ours.get("kv_GBps")) if _ok(ours) else "n/a",
                   common.fmt(ours.get("kv_pct_copy"), ".0f") if _ok(ours) else "n/a"]
            best = None
            for impl, _ in PEER_SHORT:
                p = by.get(k + (impl,))
                if _ok(p):
                    mark = "*" if p.get("gqa_mode") == "expanded" else ""
                    row.append(common.num(p["median_ms"] * 1e3) + mark)
                    best = p["median_ms"] if best is None else min(best, p["median_ms"])
                else:
                    row.append(_err(p))
            row.append(common.fmt(_ratio(best, ours["median_ms"]), ".2f") if _ok(ours) and best else "n/a")
            row.append(_diff(ours))
            rows.append(row)
        out += ["", "decode (Sq=1): us, K/V GB/s, % of copy; x = best peer time / ours; * = peer on expanded K/V"]
        out.append(common.format_table(
            ["dtype", "B", "Hq:Hk", "Sk", "ours us", "GB/s", "% copy", "flash us", "cudnn us", "eff us",
             "x best", "maxdiff"], rows, markdown, align=(0, 2)))
    return "\n".join(out)


def tables_for(path, markdown):
    payload = common.load_json(path)
    kind = payload.get("benchmark")
    if kind == "softmax":
        points = payload.get("config", {}).get("points")
        return (softmax_points_tables if points else softmax_tables)(payload, markdown)
    if kind == "attention":
        return attention_tables(payload, markdown)
    return f"{path}: unknown benchmark {kind!r}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", help="result JSON files (default: all in --results-dir)")
    p.add_argument("--results-dir", default=common.RESULTS_DIR)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", default=True, help="markdown tables (default)")
    fmt.add_argument("--text", action="store_true", help="aligned text tables")
    args = p.parse_args(argv)
    files = args.files or sorted(glob.glob(os.path.join(args.results_dir, "*.json")))
    if not files:
        print(f"no result JSON found in {args.results_dir}")
        return 1
    status = 0
    for i, path in enumerate(files):
        if i:
            print()
        try:
            print(tables_for(path, markdown=not args.text))
        except Exception as e:  # one bad file must not hide the others
            print(f"{path}: {common.first_line(e)}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
