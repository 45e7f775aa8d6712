#!/usr/bin/env python3
"""The README table of the chunk kernels beside the token-serial kernels and fla.

Reads what scripts/h200/chunk_sweep.sh writes into OUT (ours.jsonl from
`gdn bench -json`, fla.jsonl from fla_bench.py --json, grad.log from
TestCUDARealShape) and prints two markdown tables:

  1. rows T x gate; columns: ours recurrent forward and forward + backward;
     ours chunk forward, forward + backward and peak; fla chunk_kda float32
     and bf16 forward, forward + backward and peak extra memory; the chunk kernels'
     speed-up over the recurrent ones (forward + backward). Where ours.jsonl
     has them (gdn bench -kept), a column after chunk fwd+bwd: the forward
     that keeps A, P and X plus the backward that reads them.
  2. the gradient error at the 27B shape against a float64 reference: the
     worst relative RMS over the outputs and gradients, ours per algorithm
     and gate, fla's chunk_kda per dtype.
  3. the issue's targets at the largest T with our chunk passes, per gate:
     ours (the kept pair where ours.jsonl has it, else Forward + Backward)
     against the recurrent kernels (at least 10x faster), fla's float32
     run (no slower) and bf16 run (within 2x), our peak less our inputs
     (q, k, v, g, beta, the initial state and dy, as gdn bench's backward
     holds them) against fla bf16's peak extra (no more), and fla float32's
     gradient error against ours (at least 100x ours), each with "yes" or
     "no"; "-" where an input is missing.

Ours: forward + backward = the forward's GPU time + the backward's (a
training step runs both; each is the median of CUDA events); peak = the
device memory our backend held in those passes (inputs, outputs, scratch).
fla: forward + backward is one timed autograd call; peak = memory allocated
above the inputs. fla's columns are chunk_kda (per-channel gate) in the
scalar-gate rows too: fla's scalar-gate chunk backward refuses Hopper.

Earlier logs parse too: `gdn bench` text output (docs/h200/bench.log,
chunk-h200.log) through --ours, fla_bench.py's JSON lines through --fla,
and proof-tests.log through --grad:

  python3 scripts/h200/chunk_table.py OUT
  python3 scripts/h200/chunk_table.py --ours docs/h200/bench.log docs/h200/chunk-h200.log \\
      --fla docs/h200/fla-f32.jsonl docs/h200/fla-bf16.jsonl --grad docs/h200/proof-tests.log

When several inputs measure the same pass, the later file wins.

Under the tables it names the GPUs the inputs were measured on (ours from
gdn bench's backend, Metal(cuda: NAME); fla's from fla_bench.py's device),
and says so where ours and fla's differ: such a table is not of one run.
"""
import argparse
import json
import os
import re
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

# One pass row of gdn bench -backend metal:cuda's text: name, GPU, launch,
# call (ms), peak.
CUDA_ROW = re.compile(r"^\s+(forward|backward, C \d+|backward, keep all|forward, chunk L \d+|backward, chunk L \d+)"
                      r"\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) (B|KiB|MiB|GiB|TiB)\s")
SHAPE = re.compile(r"^shape: S (\d+), H_k (\d+), H_v (\d+), T (\d+), n_seqs (\d+), gate (\w+);")
# A per-case line of TestCUDARealShape: the gate, the algorithm (absent
# before -cuda.algo: recurrent), the relative RMS list.
GRAD_CASE = re.compile(r"27b:\S*gate=(scalar|kda)\S*?(?:, algo (\w+))?: relative RMS ([^;]+);")


def key(algo, gate, T, pass_):
    return (algo, gate, T, pass_)


def read_ours(paths):
    """Our passes at the 27B heads: {(algo, gate, T, pass): {"ms", "peak",
    "shared"}}; pass is forward, backward, backward_keep_all, or from
    -json, forward_keep and backward_kept; shared:
    the process ran the other algorithm's passes first (-algo all), so the
    peak includes their buffers."""
    out = {}
    for path in paths:
        with open(path) as f:
            if path.endswith(".jsonl"):
                for line in f:
                    r = json.loads(line)
                    if not r.get("backend", "").startswith("Metal(cuda") or (r["S"], r["hk"], r["hv"]) != (128, 16, 48):
                        continue
                    if "ms" not in r:
                        continue
                    out[key(r["algo"], r["gate"], r["T"], r["pass"])] = {
                        "ms": r["ms"], "peak": r.get("peak_bytes"), "shared": False}
                continue
            shape, algos_seen = None, set()
            for line in f:
                m = SHAPE.match(line)
                if m:
                    S, hk, hv, T, seqs, gate = m.groups()
                    shape = (int(T), gate) if (int(S), int(hk), int(hv), int(seqs)) == (128, 16, 48, 1) else None
                    algos_seen = set()
                    continue
                m = CUDA_ROW.match(line)
                if not m or shape is None:
                    continue
                name, gpu, _, _, peak, unit = m.groups()
                algo = "chunk" if "chunk" in name else "recurrent"
                pass_ = ("forward" if name.startswith("forward") else
                         "backward_keep_all" if "keep all" in name else "backward")
                algos_seen.add(algo)
                out[key(algo, shape[1], shape[0], pass_)] = {
                    "ms": float(gpu), "peak": float(peak) * UNITS[unit], "shared": len(algos_seen) > 1}
    return out


def read_fla(paths):
    """fla's chunk_kda: {(dtype, T, pass): row} for the timed passes, and
    {dtype: row} for the gradient error (grad_error rows, or else the
    forward's error at T 1024)."""
    timed, grad = {}, {}
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("op") != "chunk_kda" or (r.get("H"), r.get("HV"), r.get("K")) != (16, 48, 128):
                    continue
                if r.get("pass") == "grad_error" and "rel_rms_of" in r:
                    grad[r["dtype"]] = r
                elif "ms" in r:
                    timed[(r["dtype"], r["T"], r["pass"])] = r
                    if "rel_rms" in r and r["dtype"] not in grad:
                        grad.setdefault("forward " + r["dtype"], r)
    return timed, grad


def read_grad(paths):
    """Our worst relative RMS per (algo, gate) over TestCUDARealShape's
    cases, and per output: {(algo, gate): {name: err}}, with the test's T."""
    out, T = {}, None
    for path in paths:
        with open(path) as f:
            for line in f:
                m = GRAD_CASE.search(line)
                if not m:
                    continue
                t = re.search(r",T=(\d+),", line)
                T = int(t.group(1)) if t else T
                gate, algo, errs = m.group(1), m.group(2) or "recurrent", m.group(3)
                d = out.setdefault((algo, gate), {})
                for part in errs.split(","):
                    name, val = part.split()
                    d[name] = max(d.get(name, 0.0), float(val))
    return out, T


def fmt_ms(ms):
    if ms is None:
        return "-"
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"


def fmt_bytes(b):
    if b is None:
        return "-"
    for unit in ("GiB", "MiB", "KiB"):
        if b >= UNITS[unit]:
            return f"{b / UNITS[unit]:.3g} {unit}"
    return f"{b:.0f} B"


def table(ours, fla_timed, Ts=(1024, 2048, 4096, 8192), gates=("scalar", "kda")):
    """The markdown lines of table 1, and whether a peak was marked shared."""
    kept = any(k[3] == "backward_kept" for k in ours)
    head = ("| T | gate | recurrent fwd | recurrent fwd+bwd | chunk fwd | chunk fwd+bwd "
            + ("| chunk kept fwd+bwd " if kept else "") + "| chunk peak "
            "| fla f32 fwd | fla f32 fwd+bwd | fla f32 peak extra | fla bf16 fwd | fla bf16 fwd+bwd "
            "| fla bf16 peak extra | chunk speed-up |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    marked = False
    for gate in gates:
        for T in Ts:
            def get(algo, p):
                return ours.get(key(algo, gate, T, p))
            rf, rb = get("recurrent", "forward"), get("recurrent", "backward")
            cf, cb = get("chunk", "forward"), get("chunk", "backward")
            if not any((rf, rb, cf, cb)):
                continue
            rfb = rf["ms"] + rb["ms"] if rf and rb else None
            cfb = cf["ms"] + cb["ms"] if cf and cb else None
            peaks = [x["peak"] for x in (cf, cb) if x and x.get("peak") is not None]
            cpeak = fmt_bytes(max(peaks)) if peaks else "-"
            if any(x and x["shared"] for x in (cf, cb)) and peaks:
                cpeak += " *"
                marked = True
            row = [str(T), "KDA" if gate == "kda" else "scalar", fmt_ms(rf and rf["ms"]), fmt_ms(rfb),
                   fmt_ms(cf and cf["ms"]), fmt_ms(cfb)]
            if kept:
                kf, kb = get("chunk", "forward_keep"), get("chunk", "backward_kept")
                row.append(fmt_ms(kf["ms"] + kb["ms"]) if kf and kb else "-")
            row.append(cpeak)
            for dtype in ("float32", "bfloat16"):
                f = fla_timed.get((dtype, T, "forward"))
                r = fla_timed.get((dtype, T, "forward+backward"))
                row.append(fmt_ms(f and f["ms"]))
                row += [fmt_ms(r["ms"]), fmt_bytes(r["peak_bytes"])] if r else ["-", "-"]
            row.append(f"{rfb / cfb:.2f}x" if rfb and cfb else "-")
            lines.append("| " + " | ".join(row) + " |")
    return lines, marked


def input_bytes(T, gate, S=128, hk=16, hv=48):
    """The bytes of our backward's inputs at the 27B heads, one sequence:
    q and k [T][hk][S], v and dy [T][hv][S], g [T][hv][S] (KDA) or
    [T][hv], beta [T][hv] and the initial state [hv][S][S], float32."""
    gw = S if gate == "kda" else 1
    return 4 * (2 * T * hk * S + 2 * T * hv * S + T * hv * gw + T * hv + hv * S * S)


def targets(ours, fla_timed, ours_grad, fla_grad, gates=("scalar", "kda")):
    """The markdown lines of table 3 (the issue's targets), or [] where
    ours has no chunk passes."""
    Ts = [k[2] for k in ours if k[0] == "chunk" and k[3] == "backward"]
    if not Ts:
        return []
    T = max(Ts)

    def ratio(x, y, ok):
        if x is None or y is None:
            return "-"
        r = x / y
        return f"{r:.2f}x: {'yes' if ok(r) else 'no'}"

    lines = [f"| target at T {T} | ours | recurrent / ours (>= 10x) | ours / fla f32 (<= 1x) "
             "| ours / fla bf16 (<= 2x) | peak less inputs (<= fla bf16's) | fla bf16 peak extra "
             "| error: fla f32 / ours (>= 100x) |", "|---|---|---|---|---|---|---|---|"]
    for gate in gates:
        def get(algo, p):
            return ours.get(key(algo, gate, T, p))
        kf, kb = get("chunk", "forward_keep"), get("chunk", "backward_kept")
        cf, cb = get("chunk", "forward"), get("chunk", "backward")
        rf, rb = get("recurrent", "forward"), get("recurrent", "backward")
        if not (cf and cb):
            continue
        name, ms = ("kept", kf["ms"] + kb["ms"]) if kf and kb else ("chunk", cf["ms"] + cb["ms"])
        rec = rf["ms"] + rb["ms"] if rf and rb else None
        f32 = fla_timed.get(("float32", T, "forward+backward"))
        bf16 = fla_timed.get(("bfloat16", T, "forward+backward"))
        peaks = [x["peak"] for x in (cf, cb, kf, kb) if x and x.get("peak") is not None]
        peak = max(peaks) - input_bytes(T, gate) if peaks else None
        extra = bf16 and bf16["peak_bytes"]
        if peak is None:
            pcell = "-"
        else:
            pcell = f"{peak / 2**30:.2f} GiB" + ("" if extra is None else f": {'yes' if peak <= extra else 'no'}")
        err = ours_grad.get(("chunk", gate))
        ferr = fla_grad.get("float32")
        ecell = "-"
        if err and ferr:
            e, fe = max(err.values()), max(ferr["rel_rms_of"].values())
            ecell = f"{fe / e:,.0f}x: {'yes' if fe >= 100 * e else 'no'}"
        lines.append(f"| {'KDA' if gate == 'kda' else 'scalar'} | {name} {fmt_ms(ms)} "
                     f"| {ratio(rec, ms, lambda r: r >= 10)} "
                     f"| {ratio(ms, f32 and f32['ms'], lambda r: r <= 1)} "
                     f"| {ratio(ms, bf16 and bf16['ms'], lambda r: r <= 2)} "
                     f"| {pcell} | {'-' if extra is None else f'{extra / 2**30:.2f} GiB'} | {ecell} |")
    return lines


OURS_GPU = re.compile(r"Metal\(cuda: ([^)]+)\)")


def read_gpus(ours_paths, fla_rows):
    """The GPUs named in ours' files (gdn bench's backend, JSON or text)
    and in fla's rows as read_fla keeps them (their device), each a sorted
    list."""
    ours = set()
    for path in ours_paths:
        with open(path) as f:
            ours.update(OURS_GPU.findall(f.read()))
    fla = {r["device"] for r in fla_rows if r.get("device")}
    return sorted(ours), sorted(fla)


def gpu_line(ours, fla):
    """The line under the tables that names the GPUs, or None."""
    if not ours and not fla:
        return None
    line = f"GPUs: ours {', '.join(ours) or '-'}; fla {', '.join(fla) or '-'}"
    if ours and fla and ours != fla:
        line += " (ours and fla on different GPUs: not one run)"
    return line


def grad_table(ours_grad, T, fla_grad):
    lines = ["| kernels | gate | inputs | worst relative RMS | per output |", "|---|---|---|---|---|"]
    for (algo, gate), d in sorted(ours_grad.items()):
        worst = max(d.values())
        lines.append(f"| ours, {algo} (T {T}) | {'KDA' if gate == 'kda' else 'scalar'} | float32 | {worst:.2g} | "
                     + ", ".join(f"{n} {e:.2g}" for n, e in d.items()) + " |")
    for dtype, r in sorted(fla_grad.items()):
        if dtype.startswith("forward "):
            if dtype[len("forward "):] in fla_grad:
                continue
            lines.append(f"| fla chunk_kda, forward only (T {r['T']}) | KDA | {dtype[len('forward '):]} "
                         f"| {r['rel_rms']:.2g} | o {r['rel_rms']:.2g} |")
            continue
        d = r["rel_rms_of"]
        lines.append(f"| fla chunk_kda (T {r['T']}) | KDA | {dtype} | {max(d.values()):.2g} | "
                     + ", ".join(f"{n} {e:.2g}" for n, e in d.items()) + " |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="chunk_sweep.sh's OUT: ours.jsonl, fla.jsonl, grad.log")
    ap.add_argument("--ours", nargs="*", default=[], help="gdn bench -json files (.jsonl) or text logs")
    ap.add_argument("--fla", nargs="*", default=[], help="fla_bench.py --json files")
    ap.add_argument("--grad", nargs="*", default=[], help="TestCUDARealShape -test.v logs")
    a = ap.parse_args(argv)
    if a.dir:
        for attr, name in (("ours", "ours.jsonl"), ("fla", "fla.jsonl"), ("grad", "grad.log")):
            p = os.path.join(a.dir, name)
            if os.path.exists(p):
                getattr(a, attr).append(p)
    if not (a.ours or a.fla or a.grad):
        ap.error("nothing to read: give OUT or --ours/--fla/--grad")
    ours = read_ours(a.ours)
    fla_timed, fla_grad = read_fla(a.fla)
    ours_grad, T = read_grad(a.grad)
    lines, marked = table(ours, fla_timed)
    print("\n".join(lines))
    if marked:
        print("\n\\* peak held by a process that ran the recurrent passes first (`-algo all`): an upper bound of the "
              "chunk kernels' own.")
    if ours_grad or fla_grad:
        print()
        print("\n".join(grad_table(ours_grad, T, fla_grad)))
    t = targets(ours, fla_timed, ours_grad, fla_grad)
    if t:
        print()
        print("\n".join(t))
    g = gpu_line(*read_gpus(a.ours, list(fla_timed.values()) + list(fla_grad.values())))
    if g:
        print()
        print(g)
    return 0


if __name__ == "__main__":
    sys.exit(main())
