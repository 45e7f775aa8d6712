#!/usr/bin/env python3
"""Where a kernel's instructions and stalls are, by line of gdn.metal.

Reads Nsight Compute's source page as CSV, as

  ncu -k regex:'gdn_chunk_(prep|fwd)' -c 2 --section SourceCounters \\
      --section InstructionStats --import-source yes -o REP gdn bench ...
  ncu -i REP.ncu-rep --page source --csv --print-source cuda,sass > FILE.csv

writes it (plain or .xz). NVRTC compiles the kernels with -lineinfo and
names the two headers as the program includes them, kernel.metal (gdn.metal)
and metal_stdlib (the CUDA prelude); put copies of both under those names in
the directory ncu runs in, so that --import-source finds them.

The page lists each function's SASS instructions under the source lines of
each file; an inlined instruction can stand under a line of kernel.metal and
one of metal_stdlib at once, so the instructions are counted once each, by
address. Per function it prints the warp-stall samples (and the shares spent
at a barrier and on the long scoreboard), the warp instructions executed,
the share of both under the prelude alone (no line of kernel.metal), each
--region's share (lines LO to HI of kernel.metal), and the top lines by
samples with their text (from --metal and --stdlib, when given):

  python3 scripts/h200/ncu_lines.py FILE.csv.xz --metal metal/gdn.metal \\
      --stdlib metal/cuda/include/metal_stdlib --region 'pair sums=908-943'
"""
import argparse
import collections
import csv
import io
import lzma
import sys


def num(x):
    try:
        return float(x)
    except ValueError:
        return 0.0


def read(path):
    """{function: {address: {"samples", "instr", "barrier", "long_sb",
    "lines": {(file, line)}}}} from one source-page CSV."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    out = collections.defaultdict(dict)
    func = file = hdr = None
    line = None
    for r in rows:
        if not r:
            continue
        if r[0] == "File Path":
            file = r[1].rsplit("/", 1)[-1]
            continue
        if r[0] == "Function Name":
            func = r[1]
            continue
        if r[0] == "Line No":
            hdr = r
            continue
        if hdr is None or func is None:
            raise ValueError(f"{path}: a row before the page's header: {r[:3]}")
        if r[0] != "":
            line = int(r[0])
            continue
        d = dict(zip(hdr, r))
        addr = r[2]
        ins = out[func].setdefault(addr, {
            "samples": num(d.get("# Samples", "")),
            "instr": num(d.get("Instructions Executed", "")),
            "barrier": num(d.get("stall_barrier", "")),
            "long_sb": num(d.get("stall_long_sb", "")),
            "lines": set(),
        })
        ins["lines"].add((file, line))
    if not out:
        raise ValueError(f"{path}: no function with SASS rows (was it --print-source cuda,sass?)")
    return out


def region(spec):
    name, _, span = spec.rpartition("=")
    lo, dash, hi = span.partition("-")
    if not dash:
        hi = lo
    if not name or not lo.isdigit() or not hi.isdigit():
        raise argparse.ArgumentTypeError(f"region {spec!r}: want NAME=LO-HI or NAME=LINE")
    return name, int(lo), int(hi)


def report(funcs, regions=(), top=10, metal=None, stdlib=None, out=sys.stdout):
    text = {"kernel.metal": metal or [], "metal_stdlib": stdlib or []}
    for func, ins in funcs.items():
        S = sum(i["samples"] for i in ins.values())
        I = sum(i["instr"] for i in ins.values())
        B = sum(i["barrier"] for i in ins.values())
        L = sum(i["long_sb"] for i in ins.values())
        pct = lambda x, t: 100 * x / t if t else 0.0
        print(f"{func}: {S:.0f} samples (barrier {pct(B, S):.0f}%, long scoreboard {pct(L, S):.0f}%), "
              f"{I / 1e9:.3f} G warp instructions", file=out)
        rows = []
        pre = [i for i in ins.values() if all(f != "kernel.metal" for f, _ in i["lines"])]
        rows.append(("prelude only (metal_stdlib)", pre))
        for name, lo, hi in regions:
            rows.append((f"{name} (lines {lo}-{hi})",
                         [i for i in ins.values() if any(f == "kernel.metal" and lo <= l <= hi for f, l in i["lines"])]))
        for name, sel in rows:
            s = sum(i["samples"] for i in sel)
            n = sum(i["instr"] for i in sel)
            b = sum(i["barrier"] for i in sel)
            print(f"  {name:48s} samples {pct(s, S):5.1f}%  instructions {pct(n, I):5.1f}%  "
                  f"at a barrier {pct(b, S):5.1f}%", file=out)
        by_line = collections.defaultdict(lambda: [0.0, 0.0])
        for i in ins.values():
            for fl in i["lines"]:
                by_line[fl][0] += i["samples"]
                by_line[fl][1] += i["instr"]
        print(f"  top {top} lines by samples (an inlined instruction counts under each of its lines):", file=out)
        for (f, l), (s, n) in sorted(by_line.items(), key=lambda kv: -kv[1][0])[:top]:
            src = text.get(f, [])
            t = src[l - 1].strip() if 0 < l <= len(src) else ""
            print(f"    {pct(s, S):5.1f}% {pct(n, I):5.1f}%  {f}:{l:<5d} {t[:90]}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="ncu --page source --csv --print-source cuda,sass output (.csv or .csv.xz)")
    ap.add_argument("--metal", help="gdn.metal as profiled, for the lines' text")
    ap.add_argument("--stdlib", help="the CUDA prelude (metal_stdlib) as profiled")
    ap.add_argument("--region", action="append", type=region, default=[], help="NAME=LO-HI, lines of kernel.metal")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args(argv)
    lines = lambda p: io.open(p, encoding="utf-8").read().split("\n") if p else None
    metal, stdlib = lines(a.metal), lines(a.stdlib)
    for path in a.csv:
        print(f"== {path}")
        report(read(path), a.region, a.top, metal, stdlib)


if __name__ == "__main__":
    main()
