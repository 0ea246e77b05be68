"""Three calls of one op, for ncu --launch-skip 2 --launch-count 1 (scripts/ab_softmax.sh's NCU):

    python3 scripts/ab_one_call.py BUILD_ROOT fae|torch op dtype RxC
"""
import os
import sys

root, who, op, dt, shape = sys.argv[1:6]
sys.path.insert(0, os.path.abspath(root))
import torch  # noqa: E402

import flash_attn_ext as fae  # noqa: E402

rows, cols = (int(v) for v in shape.split("x"))
x = torch.randn(rows, cols, device="cuda", dtype=torch.float64).mul_(3).to(
    {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}[dt])
fn = getattr(fae if who == "fae" else torch, op)
for _ in range(3):
    fn(x, -1)
torch.cuda.synchronize()
