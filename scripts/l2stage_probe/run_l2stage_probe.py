# Driver of l2stage_probe.cu: the probe's variants against fae.softmax, torch.softmax and a copy of the same bytes,
# cold and streamed, in one process, each variant first checked against a float64 softmax.
# argv: libraries "a.so[,b.so]", shapes "dtype:RxC,...", variants "[lib:]chunkKB/depth[/pmode],..." (depth 2, 3, 4
# or 6; pmode bits: 1 fold copies evict-normal, 2 re-reads evict-normal, 4 write-back stores; pmode >> 4 the
# ring: 0 = 12 pieces of 16 KB, 1 = 6 of 32 KB, 2 = 24 of 8 KB). Variants whose rows span more rounds than the
# depth allows are skipped: they could deadlock.
import ctypes, itertools, sys
sys.path.insert(0, "benchmarks")
import torch
import common
import flash_attn_ext as fae

libs = [ctypes.CDLL(p) for p in sys.argv[1].split(",")]
for lib in libs:
    lib.l2staged_softmax.restype = ctypes.c_int
    lib.l2staged_softmax.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                     ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                                     ctypes.c_void_p, ctypes.c_int]
G = torch.cuda.get_device_properties(0).multi_processor_count
partials = torch.zeros(2 * (1 << 20), dtype=torch.int64, device="cuda")
tag = itertools.count(1)

def staged(x, chunk_elems, depth, pmode=0):
    lib = libs[pmode >> 16]
    pmode &= 0xffff
    y = torch.empty_like(x)
    rc = lib.l2staged_softmax(x.data_ptr(), y.data_ptr(), x.numel(), x.shape[-1], int(x.dtype == torch.bfloat16),
                              chunk_elems, depth, partials.data_ptr(), next(tag) & 0xffffffff, G,
                              torch.cuda.current_stream().cuda_stream, pmode)
    assert rc == 0, rc
    return y

timer = common.Timer("cuda", 3, 30, 2.0)
dt = {"fp32": torch.float32, "bf16": torch.bfloat16}
for spec in sys.argv[2].split(","):
    dname, shape = spec.split(":")
    R, C = (int(v) for v in shape.split("x"))
    x = torch.randn(R, C, device="cuda", dtype=dt[dname]).mul_(3)
    esz = x.element_size()
    variants = []
    for v in sys.argv[3].split(","):
        li, v = v.split(":") if ":" in v else ("0", v)
        kb, depth, pmode = (int(u) for u in (v + "/0").split("/")[:3])
        pmode |= int(li) << 16
        ce = kb * 1024 // esz
        cpr = C // ce
        ahead = {2: 1, 3: 2, 4: 3, 6: 2}[depth]  # how many iterations early the statistics are polled
        if C % ce or (cpr - 1 + G - 1) // G > depth - ahead:
            continue
        variants.append((f"L{li}:s{kb}k/d{depth}/p{pmode & 0xffff}", ce, depth, pmode))
    ref = torch.softmax(x.double(), -1)
    for name, ce, depth, pm in variants:
        out = staged(x, ce, depth, pm)
        torch.cuda.synchronize()
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        print(f"check {dname} {shape} {name}: max err / max {err:.2e}", flush=True)
    ybuf = torch.empty_like(x)
    fns = [lambda x: fae.softmax(x, -1), lambda x: torch.softmax(x, -1), lambda x: ybuf.copy_(x)]
    names = ["fae", "torch", "copy"]
    for name, ce, depth, pm in variants:
        fns.append(lambda x, ce=ce, depth=depth, pm=pm: staged(x, ce, depth, pm))
        names.append(name)
    c = timer.time_interleaved([lambda fn=fn: fn(x) for fn in fns])
    xs = timer.stream_inputs(x, x.numel() * esz)
    s = timer.time_stream(fns, xs)
    floor = 2 * x.numel() * esz / 4.24e12 * 1e6
    print(f"{dname} {shape} (floor {floor:.1f} us at 4.24 TB/s): " + "  ".join(
        f"{n} {cc['median_ms'] * 1e3:.1f}/{ss['median_ms'] * 1e3:.1f}" for n, cc, ss in zip(names, c, s)),
        "  [cold/stream us]", flush=True)
    del xs, x, ref
