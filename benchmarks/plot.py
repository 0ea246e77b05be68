"""PNG plots from the benchmark JSON: attention_<device>.png and softmax_<device>.png.

    python3 benchmarks/plot.py                                   # every JSON in benchmarks/results
    python3 benchmarks/plot.py out/*.json --out-dir out
    python3 benchmarks/plot.py --tables                          # also print the markdown tables

attention: TFLOP/s vs S, one panel per (dtype, causal) row and head dim column, ours vs the SDPA backends;
a last row for the decode grid (K/V bandwidth as % of copy bandwidth). softmax: effective bandwidth as % of
the measured copy bandwidth per shape, one panel per dtype, the three algorithms and torch.
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import tables  # noqa: E402

STYLE = {  # impl -> (label, color, line width)
    "fae": ("flash_attn_ext", "#d62728", 2.5),
    "fae_sm80": ("fae mma.sync fallback", "#ff7f0e", 1.2),
    "fae:auto": ("fae auto", "#d62728", 2.5),
    "fae:online": ("fae online", "#ff9896", 1.5),
    "fae:safe": ("fae safe", "#8c564b", 1.5),
    "torch": ("torch", "#1f77b4", 1.5),
    "copy": ("same-size copy", "#7f7f7f", 1.5),
    "sdpa_flash": ("SDPA flash", "#1f77b4", 1.5),
    "sdpa_cudnn": ("SDPA cuDNN", "#2ca02c", 1.5),
    "sdpa_efficient": ("SDPA efficient", "#9467bd", 1.5),
}


def _ok(r):
    return not r.get("error") and r.get("median_ms") is not None


def _title(payload):
    env, ceil = payload["env"], payload.get("ceilings", {})
    return (f"{payload['benchmark']} on {env.get('device_name')} - torch {env.get('torch')}, commit "
            f"{str(env.get('git_commit'))[:10]}; copy {common.fmt(ceil.get('copy_GBps'), '.0f')} GB/s, "
            f"matmul {common.num(ceil.get('matmul_TFLOPs'))} TFLOP/s"
            + ("" if payload.get("complete", True) else " (INCOMPLETE)"))


def plot_attention(plt, payload, path):
    res = payload["results"]
    pre = [r for r in res if r["grid"] == "prefill"]
    dec = [r for r in res if r["grid"] == "decode"]
    dims = sorted({r["D"] for r in pre})
    rows = [(dt, c) for dt in dict.fromkeys(r["dtype"] for r in pre) for c in (False, True)
            if any(r["dtype"] == dt and bool(r["causal"]) == c for r in pre)]
    nrows, ncols = len(rows) + (1 if dec else 0), max(1, len(dims))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.8 * ncols, 3.4 * nrows), squeeze=False)
    impls = list(dict.fromkeys(r["impl"] for r in res))
    matmul = payload.get("ceilings", {}).get("matmul_TFLOPs")
    for i, (dt, causal) in enumerate(rows):
        for j, D in enumerate(dims):
            ax = axes[i][j]
            for impl in impls:
                pts = sorted((r["Sk"], r["TFLOPs"]) for r in pre if r["impl"] == impl and r["dtype"] == dt
                             and r["D"] == D and bool(r["causal"]) == causal and _ok(r))
                if pts:
                    label, color, lw = STYLE.get(impl, (impl, None, 1.5))
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=lw, color=color,
                            label=label)
            if matmul and dt == "bf16":
                ax.axhline(matmul, ls=":", color="gray", lw=1)
            ax.set_xscale("log", base=2)
            svals = sorted({r["Sk"] for r in pre})
            ax.set_xticks(svals)
            ax.set_xticklabels([f"{v // 1024}k" if v % 1024 == 0 else str(v) for v in svals])
            ax.minorticks_off()
            ax.set_title(f"{dt}, D={D}, {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_xlabel("S (B*S fixed)", fontsize=8)
            ax.set_ylabel("TFLOP/s", fontsize=8)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
    if dec:
        ax = axes[-1][0]
        keys = list(dict.fromkeys((r["dtype"], r["B"], r["Sk"]) for r in dec))
        dimpls = [i for i in impls if any(r["impl"] == i and _ok(r) for r in dec)]
        width = 0.8 / max(1, len(dimpls))
        for n, impl in enumerate(dimpls):
            vals = []
            for k in keys:
                r = next((r for r in dec if r["impl"] == impl and (r["dtype"], r["B"], r["Sk"]) == k), None)
                vals.append(r.get("kv_pct_copy") or 0 if r is not None and _ok(r) else 0)
            label, color, _ = STYLE.get(impl, (impl, None, 1.5))
            ax.bar([x + n * width for x in range(len(keys))], vals, width, label=label, color=color)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))])
        ax.set_xticklabels([f"{dt} B={b}\nSk={sk // 1024}k" for dt, b, sk in keys], fontsize=7)
        ax.axhline(100, ls=":", color="gray", lw=1)
        ax.set_ylabel("K/V read, % of copy BW", fontsize=8)
        ax.set_title("decode: Sq=1, Hq:Hk=32:8, D=128", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.tick_params(labelsize=7)
        for j in range(1, ncols):
            axes[-1][j].axis("off")
    handles = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    height = fig.get_figheight()  # title and legend take a fixed 0.7 inch on top, whatever the rows
    fig.legend(list(handles.values()), list(handles.keys()), loc="upper center", ncol=len(handles), fontsize=8,
               bbox_to_anchor=(0.5, 1 - 0.3 / height))
    fig.suptitle(_title(payload), fontsize=9, y=1 - 0.05 / height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / height))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_softmax(plt, payload, path):
    res = [r for r in payload["results"] if r["op"] == "softmax"]
    panels = list(dict.fromkeys((r.get("timing", "cold"), r["dtype"]) for r in res))
    shapes = list(dict.fromkeys(tuple(r["shape"]) for r in res))
    impls = list(dict.fromkeys(r["impl"] for r in res))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 1.3 * len(shapes)), 3.4 * len(panels)), squeeze=False)
    width = 0.8 / max(1, len(impls))
    for i, (timing, dt) in enumerate(panels):
        ax = axes[i][0]
        for n, impl in enumerate(impls):
            vals = []
            for s in shapes:
                r = next((r for r in res if r["impl"] == impl and r["dtype"] == dt and tuple(r["shape"]) == s
                          and r.get("timing", "cold") == timing), None)
                vals.append((r.get("pct_copy") or 0) if r is not None and _ok(r) else 0)
            label, color, _ = STYLE.get(impl, (impl, None, 1.5))
            ax.bar([x + n * width for x in range(len(shapes))], vals, width, label=label, color=color)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))])
        ax.set_xticklabels([f"{r}x{c}" for r, c in shapes], fontsize=7)
        ax.axhline(100, ls=":", color="gray", lw=1)
        ax.set_ylabel("% of copy bandwidth", fontsize=8)
        ax.set_title(f"softmax, {dt}, {tables.TIMING_NOTE.get(timing, timing)} (bytes read once + written once "
                     f"/ time)", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7, ncol=len(impls))
    fig.suptitle(_title(payload), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", help="result JSON files (default: all in --results-dir)")
    p.add_argument("--results-dir", default=common.RESULTS_DIR)
    p.add_argument("--out-dir", default=None, help="where the PNGs go (default: --results-dir)")
    p.add_argument("--tables", action="store_true", help="also print markdown tables (see tables.py)")
    args = p.parse_args(argv)
    files = args.files or sorted(glob.glob(os.path.join(args.results_dir, "*.json")))
    if not files:
        print(f"no result JSON found in {args.results_dir}")
        return 1
    if args.tables:
        for path in files:
            print(tables.tables_for(path, markdown=True) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG written (pip install matplotlib, or plot the fetched JSON on "
              "another machine with python3 benchmarks/plot.py FILES)")
        return 0 if args.tables else 1
    out_dir = args.out_dir or args.results_dir
    os.makedirs(out_dir, exist_ok=True)
    status = 0
    for path in files:
        try:
            payload = common.load_json(path)
            kind, slug = payload.get("benchmark"), payload.get("env", {}).get("device_slug", "unknown")
            png = os.path.join(out_dir, f"{kind}_{slug}.png")
            if kind == "attention":
                plot_attention(plt, payload, png)
            elif kind == "softmax":
                plot_softmax(plt, payload, png)
            else:
                print(f"{path}: unknown benchmark {kind!r}, skipped")
                continue
            print(f"wrote {png}")
        except Exception as e:  # one bad file must not stop the others
            print(f"{path}: could not plot: {common.first_line(e)}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
