#!/usr/bin/env python3
"""The order of a kernel's first global (--shared: shared-memory) loads and first waits on them, from SASS.

Why: how many loads a thread keeps in flight is ptxas's choice, not the source's. The dual kernel's register
role meant 8 loads in flight per thread and issued them 3, 1, 1, 1, 1, 4, 8 at a time, because ptxas put
each address dependency's wait right after the load it waited on (benchmarks/NOTES.md, log row "s27 SASS").
This prints that order without a GPU:

    nvcc <the build's flags> -gencode arch=compute_90a,code=sm_90a -cubin -o /tmp/dual.cubin \
        csrc/softmax/softmax_dual.cu
    cuobjdump --dump-sass /tmp/dual.cubin > /tmp/dual.sass
    python3 scripts/sass_load_order.py /tmp/dual.sass 'dual_rows_kernelI13__nv_bfloat16.*Lb1E'

Output: "L3" = the 4th load is issued, "W3" = the first instruction that reads its registers (the thread
stalls there until it has landed). A kernel whose loads go out together reads L0 L1 ... L15 W0 W1 ...
"""
import argparse
import re
import sys

GLOBAL_LOAD = re.compile(r"\bLDG\.E\.(128|64)\S*\s+(R\d+)")
SHARED_LOAD = re.compile(r"\bLDS\.(128|64)\S*\s+(R\d+)")
INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
# predicate, opcode, destination, sources (stores have no destination: all their operands are read)
OPERANDS = re.compile(r"(?:@!?U?P\w+\s+)?(\S+)\s+([^,\s]+)\s*,\s*(.*)")


def kernel_instructions(lines, pattern):
    """The instruction texts of the first function whose name matches pattern."""
    found, out = False, []
    for line in lines:
        if "Function :" in line:
            if found:
                break
            found = re.search(pattern, line) is not None
        elif found:
            m = INSTR.search(line)
            if m:
                out.append(m.group(2))
    if not found:
        sys.exit(f"no function matching {pattern!r}")
    return out


def load_order(instrs, count, load):
    """Tokens Ln / Wn in program order for the first `count` loads that match `load`."""
    loads = [i for i, s in enumerate(instrs) if load.search(s)][:count]
    if not loads:
        return []
    is_load = set(loads)
    held = {}  # load number -> its destination registers (4 for 16 bytes, 2 for 8)
    waited = set()
    tokens = []
    for i in range(loads[0], min(len(instrs), loads[-1] + 64)):
        s = instrs[i]
        if i in is_load:
            bits, dst = load.search(s).groups()
            held[len(held)] = {f"R{int(dst[1:]) + k}" for k in range(int(bits) // 32)}
            tokens.append(f"L{len(held) - 1}")
            continue
        m = OPERANDS.match(s)
        read = m.group(3) if m and not m.group(1).startswith("ST") else s
        sources = set(re.findall(r"\bR\d+\b", read))
        for n, regs in held.items():
            if n not in waited and sources & regs:
                waited.add(n)
                tokens.append(f"W{n}")
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass", help="output of cuobjdump --dump-sass")
    ap.add_argument("kernel", help="regular expression matched against the mangled function names")
    ap.add_argument("--loads", type=int, default=16, help="how many loads to follow (default 16)")
    ap.add_argument("--shared", action="store_true", help="follow 8- and 16-byte shared-memory loads instead")
    args = ap.parse_args()
    with open(args.sass) as f:
        instrs = kernel_instructions(f.read().split("\n"), args.kernel)
    order = load_order(instrs, args.loads, SHARED_LOAD if args.shared else GLOBAL_LOAD)
    print(" ".join(order) or f"no 8- or 16-byte {'shared' if args.shared else 'global'} loads")


if __name__ == "__main__":
    main()
