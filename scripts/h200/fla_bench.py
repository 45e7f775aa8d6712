#!/usr/bin/env python3
"""fla beside gdnback on one NVIDIA GPU, at the 27B shape.

Times, with CUDA events (median after warm-up calls), and reports the peak
extra device memory of:
  - fla's chunk_kda: forward, and forward + backward;
  - fla's chunk_gated_delta_rule: forward (its backward refuses Hopper with
    Triton 3.4 to 3.7.0, fla issue 640);
  - fla's fused_recurrent_gated_delta_rule: forward (token-serial, as
    gdnback's kernels are);
  - PyTorch autograd through a plain token loop (float32), forward + backward;
each with bfloat16 and float32 inputs, at B 1, H 16, HV 48, K = V 128.

With the op grad_error (--ops grad_error, lengths --grad-T), it measures
chunk_kda's error instead: forward and backward with the given dtype against
the same token loop in float64 (autograd, recomputed segment by segment,
--grad-seg tokens each, so that T 8192 fits), as the relative RMS
RMS(got - ref) / RMS(ref) over each whole tensor: o, ht, dq, dk, dv, dg,
dbeta, dh0 (gdnback's metric, verify.RMSRatio), with do and dht standard
normal. The forward's rel_rms at T 1024 in the timing rows is the same
metric on o alone.

fla is imported from PYTHONPATH (a checkout of flash-linear-attention at
commit bc3b101d, the folder that holds its fla/ package); without it, or without a GPU, the script says so and
exits 0. Its first calls compile and autotune Triton kernels for minutes;
set TRITON_CACHE_DIR (and TRITON_CACHE_AUTOTUNING=1, which keeps the
autotuner's choices there too) to keep them between runs, and run --warm
once first: it calls chunk_kda's forward and forward + backward once per
dtype and length, untimed. Results go to stdout as a table and, with
--json FILE, one JSON object per line.

  PYTHONPATH=/path/to/flash-linear-attention python3 scripts/h200/fla_bench.py --json fla.jsonl
"""
import argparse
import json
import math
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", default="1,1024,2048,4096,8192", help="sequence lengths")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--ops", default="fused_recurrent,chunk_kda,chunk_gdn,torch_loop")
    ap.add_argument("--loop-T", default="256,1024", help="sequence lengths of the PyTorch token loop")
    ap.add_argument("--recurrent-T", default="1,1024", help="sequence lengths of fused_recurrent "
                    "(it failed with an illegal memory access at T 8192 on an H200, which ends the process)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs (median), at least 5")
    ap.add_argument("--budget", type=float, default=0, help="seconds after which no new measurement starts (0: none)")
    ap.add_argument("--json", help="append one JSON object per measurement to this file")
    ap.add_argument("--grad-T", default="1024", help="sequence lengths of the op grad_error")
    ap.add_argument("--grad-seg", type=int, default=64,
                    help="tokens per recomputed segment of grad_error's float64 reference")
    ap.add_argument("--warm", action="store_true",
                    help="only call chunk_kda (forward, forward + backward) once per dtype and T, "
                         "untimed, to fill the Triton caches")
    a = ap.parse_args()

    try:
        import torch
    except ImportError as e:
        print(f"fla_bench: PyTorch is not installed ({e}); skipping")
        return 0
    if not torch.cuda.is_available():
        print("fla_bench: no CUDA device; skipping")
        return 0
    t0 = time.time()
    try:
        import fla  # noqa: F401
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        from fla.ops.kda import chunk_kda
    except ImportError as e:
        print(f"fla_bench: fla is not on PYTHONPATH ({e}); skipping "
              "(put a checkout of flash-linear-attention on PYTHONPATH)")
        return 0
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"fla imported in {time.time() - t0:.1f} s", flush=True)
    start = time.time()
    runs = max(a.runs, 5)
    B, H, HV, K, V = 1, 16, 48, 128, 128
    dev = "cuda"
    out = open(a.json, "a") if a.json else None

    def inputs(T, dtype, kda, grad):
        g = torch.Generator(device=dev).manual_seed(T)
        def u(shape, lo, hi):
            return torch.rand(shape, generator=g, device=dev, dtype=torch.float32) * (hi - lo) + lo
        q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g, device=dev), dim=-1)
        k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g, device=dev), dim=-1)
        v = u((B, T, HV, V), -1, 1)
        gate = u((B, T, HV, K) if kda else (B, T, HV), -0.5, -0.01)
        beta = u((B, T, HV), 0, 1)
        h0 = u((B, HV, K, V), -0.1, 0.1)
        xs = [x.to(dtype) for x in (q, k, v, gate, beta)] + [h0]
        for x in xs:
            x.requires_grad_(grad)
        return xs

    def timed(fn):
        """Median ms of fn by CUDA events after 3 warm-up calls, and the
        peak device memory above what was allocated before."""
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        ts = []
        for _ in range(runs):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1))
        ts.sort()
        med = ts[len(ts) // 2] if len(ts) % 2 else (ts[len(ts) // 2 - 1] + ts[len(ts) // 2]) / 2
        return med, torch.cuda.max_memory_allocated() - base

    def loop(q, k, v, gate, beta, h0, kda):
        """The recurrence token by token (scale 1/sqrt(K), heads
        interleaved: value head h reads q/k head h // (HV // H)), in
        float64 when h0 is float64, else in float32."""
        acc = torch.float64 if h0.dtype == torch.float64 else torch.float32
        rep = HV // H
        qh = q.repeat_interleave(rep, dim=2).to(acc)
        kh = k.repeat_interleave(rep, dim=2).to(acc)
        S = h0.to(acc)  # [B, HV, K, V]
        ys = []
        for t in range(q.shape[1]):
            a = gate[:, t].to(acc).exp()
            a = a[..., :, None] if kda else a[..., None, None]
            S = S * a
            kt, qt = kh[:, t], qh[:, t]
            u_ = torch.einsum("bhk,bhkv->bhv", kt, S)
            d = beta[:, t].to(acc)[..., None] * (v[:, t].to(acc) - u_)
            S = S + kt[..., :, None] * d[..., None, :]
            ys.append(torch.einsum("bhk,bhkv->bhv", qt, S) / math.sqrt(K))
        return torch.stack(ys, dim=1), S

    def loop_segments(q, k, v, gate, beta, h0, kda, seg):
        """loop over segments of seg tokens, each recomputed in the
        backward (torch.utils.checkpoint): memory for one segment's
        graph and the states between segments, not T tokens' graph."""
        from torch.utils.checkpoint import checkpoint
        S, ys = h0, []
        for t0 in range(0, q.shape[1], seg):
            sl = slice(t0, t0 + seg)
            y, S = checkpoint(loop, q[:, sl], k[:, sl], v[:, sl], gate[:, sl], beta[:, sl], S, kda,
                              use_reentrant=False)
            ys.append(y)
        return torch.cat(ys, dim=1), S

    def rel_rms(got, ref):
        got, ref = got.double(), ref.double()
        return ((got - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()

    def grad_error(T, dtype):
        """chunk_kda's outputs and gradients with dtype inputs against the
        float64 token loop: the relative RMS of each."""
        q, k, v, gate, beta, h0 = inputs(T, dtype, True, True)
        g = torch.Generator(device=dev).manual_seed(T + 1)
        do = torch.randn(v.shape, generator=g, device=dev)
        dht = torch.randn(h0.shape, generator=g, device=dev)
        o, ht = chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
        do, dht = do.to(o.dtype), dht.to(ht.dtype)  # the reference gets the same (rounded) values
        torch.autograd.backward([o, ht], [do, dht])
        got = {"o": o.detach(), "ht": ht.detach()}
        leaves = {"q": q, "k": k, "v": v, "g": gate, "beta": beta, "h0": h0}
        got.update({"d" + n: x.grad for n, x in leaves.items()})
        del o, ht
        x64 = {n: x.detach().double().requires_grad_(True) for n, x in leaves.items()}
        o64, ht64 = loop_segments(*x64.values(), True, a.grad_seg)
        torch.autograd.backward([o64, ht64], [do.double(), dht.double()])
        ref = {"o": o64.detach(), "ht": ht64.detach()}
        ref.update({"d" + n: x.grad for n, x in x64.items()})
        return {n: rel_rms(got[n], ref[n]) for n in got}

    def record(row):
        line = (f"{row['op']:<16} {row['pass']:<18} {row['dtype']:<9} T {row['T']:>5}  "
                + (f"{row['ms']:9.3f} ms  peak +{row['peak_bytes'] / 2**20:9.1f} MiB" if "ms" in row else "")
                + (f"  rel RMS {row['rel_rms']:.2g}" if "rel_rms" in row else "")
                + ("  (" + ", ".join(f"{n} {e:.2g}" for n, e in row["rel_rms_of"].items()) + ")"
                   if "rel_rms_of" in row else "")
                + (f"  {row['note']}" if "note" in row else ""))
        print(line, flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()

    def over():
        return a.budget and time.time() - start > a.budget

    Ts = [int(x) for x in a.T.split(",")]
    if a.warm:
        for dname in a.dtypes.split(","):
            for T in Ts:
                c0 = time.time()
                q, k, v, gate, beta, h0 = inputs(T, getattr(torch, dname), True, True)
                with torch.no_grad():
                    chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
                torch.cuda.synchronize()
                c1 = time.time()
                o, ht = chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
                torch.autograd.backward([o, ht], [torch.randn_like(o), torch.ones_like(ht)])
                torch.cuda.synchronize()
                print(f"warm: chunk_kda {dname} T {T}: forward {c1 - c0:.1f} s, "
                      f"forward + backward {time.time() - c1:.1f} s (first calls)", flush=True)
                del q, k, v, gate, beta, h0, o, ht
        return 0
    for dname in a.dtypes.split(","):
        dtype = getattr(torch, dname)
        for op in a.ops.split(","):
            if op == "torch_loop" and dname != "float32":
                continue
            ts = {"fused_recurrent": [int(x) for x in a.recurrent_T.split(",")],
                  "torch_loop": [int(x) for x in a.loop_T.split(",")],
                  "grad_error": [int(x) for x in a.grad_T.split(",")]}.get(op, Ts)
            for T in ts:
                if over():
                    record({"op": op, "pass": "-", "dtype": dname, "T": T, "note": "skipped: --budget spent"})
                    continue
                row = {"op": op, "dtype": dname, "T": T, "B": B, "H": H, "HV": HV, "K": K, "V": V,
                       "device": torch.cuda.get_device_name()}
                c0 = time.time()
                try:
                    if op == "grad_error":
                        errs = grad_error(T, dtype)
                        record(dict(row, **{"op": "chunk_kda", "pass": "grad_error", "rel_rms": max(errs.values()),
                                            "rel_rms_of": errs, "reference": "float64 token loop, autograd",
                                            "seconds": round(time.time() - c0, 1)}))
                        torch.cuda.empty_cache()
                        continue
                    if op == "chunk_kda":
                        q, k, v, gate, beta, h0 = inputs(T, dtype, True, True)
                        do = torch.randn_like(v)

                        def fwd():
                            with torch.no_grad():
                                return chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)

                        def fwdbwd():
                            o, ht = chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
                            torch.autograd.backward([o, ht], [do, torch.ones_like(ht)])
                        passes = [("forward", fwd), ("forward+backward", fwdbwd)]
                        kda = True
                    elif op == "chunk_gdn":
                        q, k, v, gate, beta, h0 = inputs(T, dtype, False, False)

                        def fwd():
                            return chunk_gated_delta_rule(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
                        passes = [("forward", fwd)]
                        kda = False
                    elif op == "fused_recurrent":
                        q, k, v, gate, beta, h0 = inputs(T, dtype, False, False)

                        def fwd():
                            return fused_recurrent_gated_delta_rule(q, k, v, g=gate, beta=beta, initial_state=h0,
                                                                    output_final_state=True)
                        passes = [("forward", fwd)]
                        kda = False
                    elif op == "torch_loop":
                        q, k, v, gate, beta, h0 = inputs(T, dtype, False, True)
                        do = torch.randn_like(v)

                        def fwdbwd():
                            o, S = loop(q, k, v, gate, beta, h0, False)
                            torch.autograd.backward([o, S], [do, torch.ones_like(S)])
                        passes = [("forward+backward", fwdbwd)]
                        kda = False
                    else:
                        raise ValueError(f"unknown op {op}")
                    for pname, fn in passes:
                        r = dict(row, **{"pass": pname})
                        ms, peak = timed(fn)
                        r.update(ms=ms, peak_bytes=peak, first_calls_s=round(time.time() - c0, 1))
                        if pname == "forward" and T == 1024 and op != "torch_loop":
                            # Accuracy of the output against the loop in float64.
                            with torch.no_grad():
                                o = fn()[0].double()
                                ref, _ = loop(*[x.detach().double() for x in (q, k, v, gate, beta, h0)], kda)
                                r["rel_rms"] = ((o - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
                        record(r)
                except Exception as e:  # a refusal or failure is a result too
                    record(dict(row, **{"pass": "-", "note": f"failed: {type(e).__name__}: {str(e)[:300]}"}))
                    if "illegal memory access" in str(e):
                        print("fla_bench: the CUDA context is lost; stopping", flush=True)
                        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
