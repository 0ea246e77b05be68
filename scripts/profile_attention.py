"""One fae.attention call to profile under ncu: python3 scripts/profile_attention.py D S causal [dtype]."""
import sys

import torch

import flash_attn_ext as fae

d, s, causal = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[sys.argv[4] if len(sys.argv) > 4 else "bf16"]
h = 2048 // d
b = max(1, 16384 // s)
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
for _ in range(2):
    fae.attention(q, k, v, causal=causal)
torch.cuda.synchronize()
