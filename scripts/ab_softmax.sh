#!/usr/bin/env bash
# One GPU call for a softmax kernel change: builds, an A/B, ncu, the benchmark and the CUDA suite, all under $OUT
# (one file, ab.tgz: the device returns at most 8).
#
#   bash scripts/ab_softmax.sh COMMIT 'op[/algorithm]:dtype:RxC,...' [BENCH=1] [SUITE=1]
#
# The tree as it is ("head") and, in /tmp/base, the tree with ab/main_csrc as its csrc ("base"; and in /tmp/alt with
# ab/alt_csrc, "alt", when that exists) are built side by side; ab/ is git-ignored: fill it before the call
# (`git archive main csrc | tar -x -C ab && mv ab/csrc ab/main_csrc`) and name it in the call's carry. Then base /
# head (/ alt) over two rounds, each build in its own process with PYTHONPATH at its root (one process cannot import
# two builds): `bench_softmax.py --points`, ours at each point beside torch's op, cold and streamed, the head's first
# round with --kernels (which instantiation each point takes); ncu of the points in NCU
# ('fae|torch:ROOT:op:dtype:RxC ...'); `bench_softmax.py --max-seconds 40` with its tables and plot;
# and the CUDA softmax suite as three pytest processes side by side on round-robin node-id shards (~100-155 s on the
# H200 against 273-415 s in one process). COMMIT is recorded in the benchmark's JSON.
set -uo pipefail
SHA=$1; POINTS=$2; BENCH=${3:-1}; SUITE=${4:-1}
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a CXX=/usr/bin/g++ CC=/usr/bin/gcc
L=$OUT/log; mkdir -p "$L"; T0=$(date +%s)
t() { echo "=== [$(($(date +%s) - T0))s] $*" | tee -a "$L/main.log"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$L/main.log"
builds=(.); labels=(head)  # base and alt only where ab/ holds their csrc; POINTS '-': no A/B
[[ -d ab/main_csrc ]] && builds+=(/tmp/base) && labels+=(base)
[[ -d ab/alt_csrc ]] && builds+=(/tmp/alt) && labels+=(alt)
jobs=$((16 / ${#builds[@]}))
for b in /tmp/base /tmp/alt; do
  src=ab/main_csrc; [[ $b == /tmp/alt ]] && src=ab/alt_csrc
  [[ -d $src ]] || continue
  rm -rf "$b" && mkdir "$b" && cp -r setup.py pyproject.toml flash_attn_ext benchmarks tests "$b"/ && cp -r "$src" "$b/csrc"
done
t build
for i in "${!builds[@]}"; do
  (cd "${builds[$i]}" && MAX_JOBS=$jobs python3 setup.py build_ext --inplace > "$L/build_${labels[$i]}.log" 2>&1
   echo "${labels[$i]} build rc=$?" >> "$L/main.log") &
done
wait; t built
if [[ $POINTS != - ]]; then
  for round in 1 2; do
    for i in 1 0 2; do
      [[ -n ${builds[$i]:-} ]] || continue
      kernels=""; [[ $round == 1 && $i == 0 ]] && kernels=--kernels  # which instantiation each point takes (head)
      # shellcheck disable=SC2086
      PYTHONPATH=${builds[$i]} python3 benchmarks/bench_softmax.py --points "$POINTS" $kernels \
        --results-dir "$OUT/r/ab_${labels[$i]}_$round" 2>&1 | sed "s/^/${labels[$i]} /" | tee -a "$L/main.log"
    done
  done
  t ab-done
fi
if [[ -n "${NCU:-}" ]] && command -v ncu > /dev/null; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats"
  S="$S --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats"
  for spec in $NCU; do
    IFS=: read -r who root op dt shape <<< "$spec"
    k="[Ss]oft[Mm]ax"; [[ $who == fae ]] && k=softmax_
    # shellcheck disable=SC2086
    timeout 60 ncu $S -k "regex:$k" --launch-skip 2 --launch-count 1 python3 scripts/ab_one_call.py "$root" "$who" \
      "$op" "$dt" "$shape" > "$L/ncu_${who}_$(basename "$(realpath "$root")")_${op}_${dt}_${shape}.txt" 2>&1
  done
  t ncu-done
fi
if [[ $BENCH == 1 ]]; then
  FAE_GIT_COMMIT=$SHA python3 benchmarks/bench_softmax.py --max-seconds 40 --results-dir "$OUT/r" > "$L/bench.log" 2>&1
  python3 benchmarks/tables.py --text "$OUT"/r/*.json >> "$L/bench.log" 2>&1
  python3 benchmarks/plot.py --results-dir "$OUT/r" --out-dir "$OUT/r" >> "$L/bench.log" 2>&1
  t bench-done
fi
if [[ $SUITE == 1 ]]; then
  python3 -m pytest -q --co -m cuda tests --ignore=tests/test_attention.py -p no:cacheprovider 2>/dev/null \
    | grep '::' > /tmp/ids
  echo "$(wc -l < /tmp/ids) CUDA softmax tests" | tee -a "$L/main.log"
  for k in 0 1 2; do
    awk -v k=$k 'NR % 3 == k' /tmp/ids > /tmp/ids$k
    (mapfile -t ids < /tmp/ids$k
     timeout 400 python3 -m pytest -q -x -p no:cacheprovider "${ids[@]}" > "$L/suite$k.log" 2>&1
     echo "shard $k rc=$?" >> "$L/main.log") &
  done
  wait
  for k in 0 1 2; do tail -1 "$L/suite$k.log" | tee -a "$L/main.log"; done
  t suite-done
fi
parts=(log); [[ -d "$OUT/r" ]] && parts+=(r)
cd "$OUT" && tar czf ab.tgz "${parts[@]}" && rm -rf log r
