#!/usr/bin/env bash
# Downloads matplotlib and the dependencies it lacks on the GPU machine (all but numpy, which is there) as
# cp312 manylinux wheels into .whl/ (ignored by git). The GPU machine reaches no package index: carry the
# folder with the call (carry: [".whl"]); scripts/gpu_check.sh installs them into /tmp when matplotlib is
# missing there. Older versions of the same packages in .whl/ are removed (two versions stop the install).
# Usage: bash scripts/fetch_wheels.sh [python-version, default 3.12]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYV=${1:-3.12}
PKGS=(matplotlib contourpy cycler fonttools kiwisolver packaging pillow pyparsing python-dateutil six)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download --dest "$TMP" --no-deps --only-binary=:all: --python-version "$PYV" \
  --implementation cp "${platforms[@]}" "${PKGS[@]}"
mkdir -p .whl
for pkg in "${PKGS[@]}"; do
  rm -f .whl/"${pkg//-/_}"-[0-9]*.whl .whl/"$pkg"-[0-9]*.whl
done
mv "$TMP"/*.whl .whl/
du -sh .whl
ls .whl
