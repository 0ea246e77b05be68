#!/usr/bin/env bash
# One GPU call timing forced softmax plans against "auto" on named points, with one build (the tree as it is): the
# plan "auto" takes at each point (FAE_SOFTMAX_LOG_PLAN), then over ROUNDS rounds (default 2) one process per
# configuration (FAE_SOFTMAX_CONFIG is read once per process) running `bench_softmax.py --points`, and a table of
# ours' us cold / streamed per point and configuration, rounds side by side. Logs under $OUT/log.
#
#   bash scripts/ab_configs.sh 'op[/algorithm]:dtype:RxC,...' CONFIG [CONFIG ...]
#
# CONFIG: "auto" or a FAE_SOFTMAX_CONFIG string (csrc/softmax/softmax_plan.h), e.g. kind=warp,lanes=32,vpt=8,threads=128.
# A forced plan applies to every point of the call, so give each configuration the points it fits. SKIP_BUILD=1 when
# the tree is built already. The logged plans read threads=0 where the launch takes its default block (warp plans:
# warp_rows_threads, csrc/softmax/softmax_launch.h).
set -uo pipefail
POINTS=$1; shift
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
L=${OUT:-/tmp/ab_configs}/log; R=$(mktemp -d); mkdir -p "$L"
if [[ -z ${SKIP_BUILD:-} ]]; then
  CXX=/usr/bin/g++ CC=/usr/bin/gcc MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build_ext --inplace > "$L/build.log" 2>&1 \
    || { echo "build failed"; tail -20 "$L/build.log"; exit 1; }
fi
FAE_SOFTMAX_LOG_PLAN=1 python3 benchmarks/bench_softmax.py --points "$POINTS" --timing cold --reps 3 --results-dir "$R" \
  2>&1 | grep "plan:" | sort | uniq -c | tee -a "$L/main.log"
for round in $(seq "${ROUNDS:-2}"); do
  for cfg in "$@"; do
    env_cfg=(); [[ $cfg != auto ]] && env_cfg=("FAE_SOFTMAX_CONFIG=$cfg")
    echo "--- $cfg round $round" >> "$L/main.log"
    log="$L/run_${round}_$(echo "$cfg" | tr -c 'a-z0-9\n' '_').log"
    env "${env_cfg[@]}" python3 benchmarks/bench_softmax.py --points "$POINTS" --results-dir "$R" > "$log" 2>&1
    grep -E "^(softmax|log_softmax|logsumexp) +fae" "$log" >> "$L/main.log"
  done
done
rm -rf "$R"
python3 - "$L/main.log" <<'PY' | tee "$L/table.txt"
import collections, re, sys
cfg, times = None, collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"--- (.*) round \d+$", line)
    if m:
        cfg = m.group(1)
        continue
    f = line.split()
    if cfg and len(f) >= 6 and f[1].startswith("fae") and f[4] in ("cold", "stream"):  # a progress line
        times[(f[0], f[2], f[3], cfg, f[4])].append(f[5])
points = list(dict.fromkeys(k[:3] for k in times))
cfgs = list(dict.fromkeys(k[3] for k in times))
for p in points:
    print(" ".join(p))
    for c in cfgs:
        print(f"  {c:48} cold {'/'.join(times[p + (c, 'cold')]):16} stream {'/'.join(times[p + (c, 'stream')])}")
PY
