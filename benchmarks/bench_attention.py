"""Attention forward: flash_attn_ext vs PyTorch SDPA backends (flash, cuDNN, efficient), same inputs, same run.

Prefill grid: B * S = 16k tokens, Hq = 2048 / D, Hk = Hq / --group (1), Sq = Sk = S; TFLOP/s = 4 * B * Hq * Sq *
Sk * D / time, halved for causal. Decode grid: Sq = 1, GQA Hq:Hk = 32:8, D = 128; reported as time and K/V
bandwidth (bytes of K and V / time) against the measured copy bandwidth. A backend that refuses a config is "n/a".
Each point also records the max abs difference of every output against SDPA flash (cuDNN, efficient where flash
refuses), so a fast but wrong kernel shows.

    python3 benchmarks/bench_attention.py                       # full grid (about 2-4 minutes on an H100)
    python3 benchmarks/bench_attention.py --quick
    python3 benchmarks/bench_attention.py --only grid=prefill,D=128,causal=1 --impls fae,sdpa_cudnn
    python3 benchmarks/bench_attention.py --quick --device cpu
    python3 benchmarks/bench_attention.py --only grid=prefill --group 4   # GQA prefill: attention-group4_*.json
"""
import argparse
import contextlib
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import common  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # torch < 2.3
    SDPBackend = sdpa_kernel = None

# (impl name, SDPBackend member); the first that accepts a point is the correctness reference
PEERS = [("sdpa_flash", "FLASH_ATTENTION"), ("sdpa_cudnn", "CUDNN_ATTENTION"),
         ("sdpa_efficient", "EFFICIENT_ATTENTION")]
# fae_sm80: ours with FLASH_ATTN_EXT_ATTENTION_KERNEL=sm80, the mma.sync kernel every non-Hopper GPU runs
# (the same as fae where there is no second kernel)
IMPLS = ["fae", "fae_sm80"] + [name for name, _ in PEERS]
# rel error (||out - ref|| / ||ref||) vs the reference peer above which a point is flagged "!"
REL_TOL = {"fp32": 1e-3, "fp16": 1e-2, "bf16": 2e-2}


def grids(args, cuda):
    """Default grid per device; each overridable from the command line."""
    if cuda and not args.quick:
        d = dict(dtypes="bf16,fp16", head_dims="64,128,256", seqlens="512,1k,2k,4k,8k,16k", tokens=16384,
                 model_dim=2048, decode_seqlens="4k,32k,128k", decode_batch=8, decode_dtypes="bf16")
    elif cuda:
        d = dict(dtypes="bf16", head_dims="64,128", seqlens="1k,4k", tokens=16384, model_dim=2048,
                 decode_seqlens="4k,32k", decode_batch=8, decode_dtypes="bf16")
    else:
        d = dict(dtypes="bf16", head_dims="64", seqlens="128,256", tokens=512, model_dim=256,
                 decode_seqlens="1k,4k", decode_batch=2, decode_dtypes="bf16")
    for k, v in d.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    points = []
    for dt in common.parse_dtypes(args.dtypes, ""):
        for D in common.parse_ints(args.head_dims):
            H = max(1, args.model_dim // D)
            for S in common.parse_ints(args.seqlens):
                B = max(1, args.tokens // S)
                for causal in (False, True):
                    points.append(dict(grid="prefill", dtype=dt, B=B, Hq=H, Hk=max(1, H // args.group), Sq=S, Sk=S,
                                       D=D, causal=causal))
    for dt in common.parse_dtypes(args.decode_dtypes, ""):
        for Sk in common.parse_ints(args.decode_seqlens):
            points.append(dict(grid="decode", dtype=dt, B=args.decode_batch, Hq=32, Hk=8, Sq=1, Sk=Sk, D=128,
                               causal=False))
    only = ",".join(args.only)
    return [p for p in points if _selected(p, only)]


def _selected(point, only):
    """--only k=v,k=v,...: a key given several times matches any of its values; keys are ANDed."""
    if not only:
        return True
    wanted = {}
    for item in only.split(","):
        if not item.strip():
            continue
        k, _, v = item.partition("=")
        wanted.setdefault(k.strip(), []).append(v.strip().lower())
    for k, vals in wanted.items():
        key = {"S": "Sk", "s": "Sk", "d": "D", "h": "Hq", "H": "Hq", "b": "B"}.get(k, k)
        if key not in point:
            raise SystemExit(f"--only: unknown key {k!r}; keys: grid, dtype, D, S, Sq, Sk, B, Hq, Hk, causal")
        have = point[key]
        if isinstance(have, bool):
            ok = any(v in (("1", "true", "yes") if have else ("0", "false", "no")) for v in vals)
        elif isinstance(have, int):
            ok = have in [common.parse_ints(v)[0] for v in vals]
        else:
            ok = str(have).lower() in vals
        if not ok:
            return False
    return True


def _gqa_kwarg_supported():
    try:
        q = torch.zeros(1, 2, 1, 8)
        F.scaled_dot_product_attention(q, q[:, :1], q[:, :1], enable_gqa=True)
        return True
    except TypeError:
        return False
    except Exception:
        return True  # the keyword exists; this tiny call failed for another reason


def make_inputs(pt, device):
    dtype = common.DTYPES[pt["dtype"]]
    q = torch.randn(pt["B"], pt["Hq"], pt["Sq"], pt["D"], device=device, dtype=dtype)
    k = torch.randn(pt["B"], pt["Hk"], pt["Sk"], pt["D"], device=device, dtype=dtype)
    v = torch.randn(pt["B"], pt["Hk"], pt["Sk"], pt["D"], device=device, dtype=dtype)
    return q, k, v


class PeerCalls:
    """Builds the SDPA call for one backend; GQA natively (enable_gqa) or on K/V expanded outside the timing."""

    def __init__(self, q, k, v, causal, gqa_kwarg):
        self.q, self.k, self.v, self.causal, self.gqa_kwarg = q, k, v, causal, gqa_kwarg
        self.groups = q.shape[1] // k.shape[1]
        self._expanded = None

    def expanded(self):
        if self._expanded is None:
            self._expanded = (self.k.repeat_interleave(self.groups, dim=1).contiguous(),
                              self.v.repeat_interleave(self.groups, dim=1).contiguous())
        return self._expanded

    def candidates(self, backend):
        """(gqa mode, callable) in order of preference."""
        be = getattr(SDPBackend, backend)

        def call(k, v, **kw):
            def fn():
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(self.q, k, v, is_causal=self.causal, **kw)
            return fn

        if self.groups == 1:
            return [("none", call(self.k, self.v))]
        out = []
        if self.gqa_kwarg:
            out.append(("native", call(self.k, self.v, enable_gqa=True)))
        out.append(("expanded", lambda: call(*self.expanded())()))
        return out


@contextlib.contextmanager
def _kernel_env(impl):
    """Forces our fallback kernel for impl fae_sm80 (the op reads the variable at each call)."""
    name = "FLASH_ATTN_EXT_ATTENTION_KERNEL"
    old = os.environ.get(name)
    if impl == "fae_sm80":
        os.environ[name] = "sm80"
    try:
        yield
    finally:
        if impl == "fae_sm80":
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def _call_in_env(impl, fn):
    with _kernel_env(impl):
        return fn()


def run_point(pt, q, k, v, fae, timer, impls, gqa_kwarg, copy_gbps):
    """Times each impl on one point; returns the records (one per impl) and whether CUDA broke."""
    causal = pt["causal"]
    flops = 4 * pt["B"] * pt["Hq"] * pt["Sq"] * pt["Sk"] * pt["D"] / (2 if causal and pt["Sq"] > 1 else 1)
    kv_bytes = 2 * k.numel() * k.element_size()
    peers = PeerCalls(q, k, v, causal, gqa_kwarg)
    recs, outs = {}, {}
    broken = False
    for impl in IMPLS:  # every impl's first call runs, even when not timed: the reference needs one
        rec = dict(pt, impl=impl, flops=flops, kv_bytes=kv_bytes, error=None)
        recs[impl] = rec
        if broken:
            rec["error"] = "not run: CUDA context broken earlier"
            continue
        if impl.startswith("fae"):
            cands = [("native", lambda: fae.attention(q, k, v, causal=causal))]
        elif SDPBackend is None:
            rec["error"] = "torch.nn.attention.sdpa_kernel is missing in this torch"
            continue
        else:
            cands = peers.candidates(dict(PEERS)[impl])
        for mode, fn in cands:
            try:
                with warnings.catch_warnings(), _kernel_env(impl):
                    warnings.simplefilter("ignore")
                    outs[impl] = fn()
                    rec["gqa_mode"], rec["error"] = mode, None
                    rec["_fn"] = fn
                break
            except Exception as e:
                rec["error"] = common.first_line(e)
                if common.cuda_context_broken(q.device):
                    broken = True
                    rec["error"] += " (CUDA context broken: run stopped)"
                    break
    ref_impl = next((name for name, _ in PEERS if name in outs), None)
    timed = []  # (record, call) of every impl to time, in IMPLS order
    for impl, rec in recs.items():
        fn = rec.pop("_fn", None)
        if impl in outs and ref_impl is not None:
            rec["ref_impl"] = ref_impl
            rec["max_abs_diff"], rec["rel_err"] = common.compare(outs[impl], outs[ref_impl])
            rec["flag"] = not (rec["rel_err"] <= REL_TOL.get(pt["dtype"], 2e-2))
        if fn is not None and impl not in impls:
            rec["error"] = "not timed (--impls)"
        elif fn is not None and not broken:
            timed.append((rec, lambda fn=fn, impl=impl: _call_in_env(impl, fn)))
    # One interleaved series for all of them (common.Timer.time_interleaved): ratios free of timing order.
    if timed:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stats = timer.time_interleaved([call for _, call in timed])
        except Exception as e:
            stats = [{"error": common.first_line(e)}] * len(timed)
            broken = common.cuda_context_broken(q.device)
        for (rec, _), st in zip(timed, stats):
            rec.update(st)
            if rec["error"] is None:
                t = rec["median_ms"] * 1e-3
                rec["TFLOPs"] = flops / t / 1e12
                rec["kv_GBps"] = kv_bytes / t / 1e9
                rec["kv_pct_copy"] = 100 * rec["kv_GBps"] / copy_gbps if copy_gbps else None
    if peers._expanded is not None:
        for impl in IMPLS:
            if recs[impl].get("gqa_mode") == "expanded":
                recs[impl]["note"] = "K/V expanded to Hq heads outside the timed region; kv_GBps counts Hk heads"
    return [recs[i] for i in IMPLS], broken


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(p)
    p.add_argument("--head-dims", default=None, help="comma list (default 64,128,256)")
    p.add_argument("--seqlens", default=None, help="prefill S values (default 512,1k,2k,4k,8k,16k)")
    p.add_argument("--tokens", type=int, default=None, help="prefill B * S (default 16384)")
    p.add_argument("--model-dim", type=int, default=None, help="prefill Hq * D (default 2048)")
    p.add_argument("--group", type=int, default=1, help="prefill query heads per kv head (GQA; default 1)")
    p.add_argument("--decode-seqlens", default=None, help="decode Sk values (default 4k,32k,128k)")
    p.add_argument("--decode-batch", type=int, default=None, help="decode B (default 8)")
    p.add_argument("--decode-dtypes", default=None, help="decode dtypes (default bf16)")
    p.add_argument("--only", action="append", default=[],
                   help="filters k=v,... (repeatable): keys grid (prefill|decode), dtype, D, S, Sk, B, Hq, causal; "
                        "a key given twice matches either value, different keys must all match")
    p.add_argument("--impls", default=",".join(IMPLS), help=f"which to time, among {','.join(IMPLS)}")
    args = p.parse_args(argv)

    device = common.resolve_device(args.device)
    fae = common.import_fae()
    cuda = device.type == "cuda"
    points = grids(args, cuda)
    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    for i in impls:
        if i not in IMPLS:
            raise SystemExit(f"unknown impl {i!r}; choose among {', '.join(IMPLS)}")
    if not points:
        raise SystemExit("no point selected (check --only)")

    torch.manual_seed(0)
    budget = common.Budget(args.max_seconds)
    timer = common.Timer(device, args.warmup, args.reps if args.reps is not None else (15 if cuda else 3),
                         args.max_point_seconds if args.max_point_seconds is not None else (1.0 if cuda else 5.0),
                         flush=args.flush)
    env = common.environment(device, fae)
    ceilings = common.measure_ceilings(timer)
    copy_gbps = ceilings.get("copy_GBps")
    gqa_kwarg = _gqa_kwarg_supported()
    name = "attention" if args.group == 1 else f"attention-group{args.group}"  # a GQA run keeps its own file
    paths = common.result_paths(name, env["device_slug"], args.results_dir, args.extra_dir)
    payload = {"benchmark": "attention", "env": env, "ceilings": ceilings,
               "config": {"points": len(points), "impls_timed": impls, "warmup": timer.warmup, "reps": timer.reps,
                          "flush": timer.flush_mode, "flush_bytes": timer.flush_bytes, "quick": args.quick,
                          "sdpa_enable_gqa": gqa_kwarg,
                          "tokens": args.tokens, "model_dim": args.model_dim, "group": args.group,
                          "flops": "4*B*Hq*Sq*Sk*D, halved for causal", "kv_GBps": "bytes of K and V / time"},
               "complete": False, "results": []}
    print(f"# attention benchmark on {env['device_name']} (torch {env['torch']}, commit {env['git_commit'][:12]}); "
          f"{len(points)} points; copy {common.fmt(copy_gbps, '.0f')} GB/s, matmul "
          f"{common.num(ceilings.get('matmul_TFLOPs'))} TFLOP/s; SDPA enable_gqa: {gqa_kwarg}; "
          f"writing {', '.join(paths)}", flush=True)

    broken = False
    fae_errors = 0
    inputs_key, inputs = None, None
    for pt in points:
        if broken or budget.expired():
            why = "not run: CUDA context broken earlier" if broken else "skipped: time budget (--max-seconds) spent"
            payload["results"] += [dict(pt, impl=i, error=why) for i in IMPLS]
            continue
        key = (pt["dtype"], pt["B"], pt["Hq"], pt["Hk"], pt["Sq"], pt["Sk"], pt["D"])
        try:
            if key != inputs_key:
                inputs = None
                if cuda:
                    torch.cuda.empty_cache()
                inputs, inputs_key = make_inputs(pt, device), key
            recs, broken = run_point(pt, *inputs, fae, timer, impls, gqa_kwarg, copy_gbps)
        except Exception as e:  # input allocation (out of memory) or a bug here: record, go on
            recs = [dict(pt, impl=i, error=common.first_line(e)) for i in IMPLS]
            inputs_key, inputs = None, None
            broken = common.cuda_context_broken(device)
        payload["results"] += recs
        fae_errors += sum(1 for r in recs if r["impl"] == "fae" and r["error"])
        print(_progress_line(pt, recs), flush=True)
        common.write_json(payload, paths)

    return common.finish_run(payload, paths, budget, broken, fae_errors, args.max_seconds, "attention_tables")


def _progress_line(pt, recs):
    c = "causal" if pt["causal"] else "full"
    head = (f"{pt['grid']:<7} {pt['dtype']} D={pt['D']:<3} B={pt['B']:<3} Hq={pt['Hq']:<2} Hk={pt['Hk']:<2} "
            f"Sq={pt['Sq']:<5} Sk={pt['Sk']:<6} {c:<6}")
    cells = []
    for r in recs:
        name = r["impl"].replace("sdpa_", "")
        if r.get("median_ms") is None:
            cells.append(f"{name} n/a")
        elif pt["grid"] == "decode":
            cells.append(f"{name} {common.num(r['median_ms'] * 1e3)}us {common.num(r['kv_GBps'])}GB/s")
        else:
            cells.append(f"{name} {common.num(r['TFLOPs'])}")
    fae_rec = recs[0]
    diff = f" maxdiff {fae_rec['max_abs_diff']:.1e}" if "max_abs_diff" in fae_rec else ""
    flag = " !" if fae_rec.get("flag") else ""
    err = f"  [fae: {fae_rec['error']}]" if fae_rec["error"] else ""
    return f"{head} | " + " | ".join(cells) + diff + flag + err


if __name__ == "__main__":
    sys.exit(main())
