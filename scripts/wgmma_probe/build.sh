#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o wgmma_probe wgmma_probe.cu
