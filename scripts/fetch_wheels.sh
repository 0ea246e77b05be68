#!/usr/bin/env bash
# Downloads matplotlib and its pure/binary dependencies (not numpy: the GPU machine has it) as cp312
# manylinux wheels into .whl/ (ignored by git), for the GPU machine, which reaches no package index.
# Pass the folder with the GPU call (carry: [".whl"]); scripts/gpu_check.sh installs them into /tmp when
# matplotlib is missing there. Usage: bash scripts/fetch_wheels.sh [python-version, default 3.12]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYV=${1:-3.12}
mkdir -p .whl
python3 -m pip download --dest .whl --no-deps --only-binary=:all: --python-version "$PYV" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 \
  matplotlib contourpy cycler fonttools kiwisolver packaging pillow pyparsing python-dateutil six
du -sh .whl
ls .whl
