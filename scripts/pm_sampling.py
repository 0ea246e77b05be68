"""DRAM traffic over the time of one softmax-family call, from ncu's PM sampling (a sample every ~1.5 us).

Shows what a kernel's total time hides: when reads and writes run, dips where every block changes phase at
once, and the tail where SMs finish one by one. Two steps (on the GPU machine; ncu is on its PATH):

    ncu --section PmSampling --nvtx --nvtx-include "probe/" -c 1 --clock-control none -f -o $OUT/pm \\
        python3 scripts/pm_sampling.py run softmax bf16 1024x32768
    ncu -i $OUT/pm.ncu-rep --page raw --print-metric-instances values --csv > $OUT/raw.csv
    python3 scripts/pm_sampling.py show $OUT/raw.csv     # anywhere: prints one line per sample

`run` calls the op (auto) a few times, then once inside the NVTX range "probe", which the ncu filter selects.
With an in-place build (`setup.py build_ext --inplace`) set PYTHONPATH to the repository root: Python puts this
script's folder, not the root, first on the import path.
"""
import csv
import sys

# (column label, metric name in the raw page) of the PM-sampling series `show` prints.
SERIES = [
    ("read %", "dramc__read_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("write %", "dramc__write_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("dram %", "dramc__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L2 %", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("XU %", "sm__inst_executed_pipe_xu_realtime.avg.pct_of_peak_sustained_elapsed"),
    ("SM active cycles", "sm__cycles_active.avg"),
]


def run(op, dtype, shape):
    import torch

    import flash_attn_ext as fae

    rows, cols = (int(n) for n in shape.split("x"))
    x = torch.randn(rows, cols, device="cuda").to({"bf16": torch.bfloat16, "fp16": torch.float16,
                                                   "fp32": torch.float32}[dtype])
    fn = getattr(fae, op)
    for _ in range(3):
        fn(x, -1)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("probe")
    fn(x, -1)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def series(cell):
    """'1,234.5 (0; 0.4; 42.5; ...)' or '(0.00; ...)' -> the values in the parentheses."""
    values = cell[cell.index("(") + 1:cell.rindex(")")]
    return [float(v.strip().replace(",", "") or 0) for v in values.split(";")]


def show(path):
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    header, kernels = table[0], table[2:]
    for kernel in kernels:
        columns = {}
        for label, metric in SERIES:
            found = [i for i, name in enumerate(header) if name.endswith("." + metric) and "(" in kernel[i]]
            if found:
                columns[label] = series(kernel[found[0]])
        if "dram %" not in columns:
            sys.exit(f"{path}: no PM-sampling series (was the report made with --section PmSampling?)")
        busy = [i for i, v in enumerate(columns["dram %"]) if v > 1]
        first, last = max(busy[0] - 1, 0), min(busy[-1] + 2, len(columns["dram %"]))
        print("sample  " + "  ".join(f"{label:>8}" for label in columns))
        for i in range(first, last):
            print(f"{i:6d}  " + "  ".join(f"{columns[label][i]:8.1f}" for label in columns))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "run":
        run(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "show":
        show(sys.argv[2])
    else:
        sys.exit(__doc__)
