#!/usr/bin/env python3
"""scripts/h200/sass_counts.py DIR...: the chunk kernels' SASS, instruction
by kind, per tree, without timing anything.

Each DIR holds the program NVRTC compiles for one tree, written where Go is
by

    go test ./metal -run TestCUDAProgramFiles -cuda.program DIR

(gdn_cuda.cu, its headers metal_stdlib and kernel.metal, and NVRTC's
options, one a line). On a machine with the CUDA toolkit (NVRTC through
ctypes: $GDN_LIBNVRTC, else libnvrtc.so on the loader's path or under
/usr/local/cuda*; cuobjdump on PATH or under /usr/local/cuda*/bin) it
compiles each DIR as gdn does, writes DIR/kernels.sass, and prints per
kernel (those matching --kernels, the chunk kernels by default) the static
counts of the kinds below. With several DIRs it says, per kernel, whether
its SASS is the first DIR's instruction for instruction (registers
included): a change that leaves a kernel's SASS as it was cannot have
moved that kernel's time.

Counts are static (each instruction once, however often it runs), so they
compare trees' code, not their work: in the CUDA prelude a simdgroup
product is two DMMA and four F2F.F64.F32 for its operands, and two SHFL
where its b operand is an accumulator (a loaded tile holds its b layout),
so SHFL / DMMA and F2F.F64.F32 / DMMA say whether a change made products
share an operand's shuffles or conversions.
STG>LDG counts the global loads that follow a global store with no global
access between them, in the order of the code: where the compiler cannot
tell a load's address from an earlier store's (pointers into one scratch),
it keeps the load behind the store, and a loop that loads and stores one
element a step waits on memory at every step. Loads batched before their
stores (as prep's gather does, GDN_GB at a time) lower it; it counts places
in the code, not how often they run.
DMMA counts the float64 tensor instructions of every shape, DMMA.16x8 those
of sm_90's 16 x 8 shapes among them (two 8x8 products that share their b
tile as one instruction: docs/h200/next/mma-rows.patch), where a product
on its own is two DMMA.884. HMMA counts the products of a prelude that runs them on TF32 tensor cores
(docs/h200/tf32-helper-ab.log); the kept prelude has none. REG and STACK
are each kernel's registers a thread and its stack frame in bytes (what gdn
bench prints as local memory: spills and arrays outside the registers), from
cuobjdump -res-usage.

--direct compiles the chunk kernels alone, each trampoline a direct call of
its kernel (all of them take the same parameters) in place of
gdncu::invoke's template: NVRTC 11.8 (Debian's nvidia-cuda-toolkit, from
its non-free section) crashes compiling the program as gdn writes it, and
with --direct compiles it on a machine without a GPU. The registers are
the H200's NVRTC 13.0's (the bounds set them); the stack frames are not
quite, at 0bf9a9c's kernels (bytes a thread, 11.8 then 13.0): the forward
walks 24 and 24, 56 and 56; the backward walks 88 and 56, 184 and 144;
prep 56 and 40; dsolve 80 and 72; the scalar pair terms 144 and 88, KDA's
96 and 136. It screens a change (did a frame grow, did a kernel's SASS
stay the same) before a GPU times it; it does not replace the timing.
"""
import argparse
import collections
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

KINDS = collections.OrderedDict([
    ("DMMA", r"DMMA\b"),
    ("DMMA.16x8", r"DMMA\.16"),
    ("HMMA", r"HMMA\b"),
    ("SHFL", r"SHFL\b"),
    ("F2F.F64.F32", r"F2F\.F64\.F32\b"),
    ("F2F.F32.F64", r"F2F\.F32\.F64\b"),
    ("LDS", r"LDS\b"),
    ("STS", r"STS\b"),
    ("LDG", r"LDG\b"),
    ("STG", r"STG\b"),
    ("LD", r"LD\b"),
    ("ST", r"ST\b"),
    ("LDL", r"LDL\b"),
    ("STL", r"STL\b"),
    ("BAR", r"BAR\b"),
])

_FUNC = re.compile(r"^\s*Function : (\S+)")
# An instruction line: /*offset*/, an optional predicate, the opcode (with
# its modifiers), its operands, then ';'.
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")


def parse_sass(text):
    """The instructions of each function in cuobjdump -sass text, in order:
    {name: [(opcode with modifiers, operands), ...]}."""
    funcs = collections.OrderedDict()
    cur = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = _INSN.match(line)
        if m and cur is not None:
            cur.append((m.group(2), " ".join(m.group(3).split())))
    return funcs


def count(insns):
    """The counts of KINDS (by opcode, modifiers after the kind allowed) and
    of all instructions, NOP excluded; and STG>LDG, the global loads whose
    global access before them in the code is a store (see below)."""
    c = collections.Counter()
    last = None
    for op, _ in insns:
        if op == "NOP":
            continue
        c["all"] += 1
        for k, pat in KINDS.items():
            if re.match(pat, op):
                c[k] += 1
        g = "LDG" if re.match(KINDS["LDG"], op) else "STG" if re.match(KINDS["STG"], op) else None
        if g == "LDG" and last == "STG":
            c["STG>LDG"] += 1
        last = g or last
    return c


def table(funcs, pattern, base=None, res=None):
    """Text rows of the counts of the functions matching pattern; with res
    (a parse_res_usage result), their registers and stack frames; with base
    (another parse_sass result), a last column saying whether each one's
    instructions are base's."""
    cols = list(KINDS) + ["STG>LDG", "all"]
    rcols = ["REG", "STACK"] if res is not None else []
    rows = ["%-22s" % "kernel" + "".join("%12s" % c for c in cols + rcols) + ("  vs first" if base is not None else "")]
    for name, insns in funcs.items():
        if not re.search(pattern, name):
            continue
        c = count(insns)
        row = "%-22s" % name[:22] + "".join("%12d" % c[k] for k in cols)
        if res is not None:
            row += "".join("%12s" % v for v in res.get(name, ("?", "?")))
        if base is not None:
            row += "  " + ("same SASS" if base.get(name) == insns else "differs" if name in base else "new")
        rows.append(row)
    return rows


_RES = re.compile(r"^\s*Function ([A-Za-z_0-9]+):\s*$")
_REG = re.compile(r"\bREG:(\d+)\s+STACK:(\d+)")


def parse_res_usage(text):
    """Each function's registers and stack frame in cuobjdump -res-usage
    text: {name: (REG, STACK)}."""
    res = {}
    cur = None
    for line in text.splitlines():
        m = _RES.match(line)
        if m:
            cur = m.group(1)
            continue
        m = _REG.search(line)
        if m and cur is not None:
            res[cur] = (int(m.group(1)), int(m.group(2)))
            cur = None
    return res


# A generated trampoline: extern "C" __global__ void [bounds] NAME(const
# GDNCU_GRID_CONSTANT gdncu::argblob<N> args, gdncu::bufs b) {
# gdncu::invoke<&gdn_msl::FN>(args, b); } (the args by value), or, in trees
# before that, NAME(const void* args, gdncu::bufs b) (by device pointer).
_TRAMP = re.compile(r'^extern "C" __global__ void (__launch_bounds__\([^)]*\) )?(\w+)\((const GDNCU_GRID_CONSTANT gdncu::argblob<\d+> args|const void\* args), '
                    r'gdncu::bufs b\) \{ gdncu::invoke<&gdn_msl::(\w+(?:<[^<>]*>)?)>\(args, b\); \}$')


def direct_trampolines(cu):
    """gdn_cuda.cu's text with the chunk kernels' trampolines as direct
    calls and every other kernel's trampoline dropped (see --direct). The
    chunk kernels take (args, src, dst, scr, threadgroup memory, tgpig,
    tpitg, ntg, tiisg, sgitg), which the call spells out as gdncu::invoke
    forms them. A line that looks like a trampoline and does not match is
    an error, not a silent drop."""
    out = []
    for line in cu.split("\n"):
        if not line.startswith('extern "C"'):
            out.append(line)
            continue
        m = _TRAMP.match(line)
        if not m:
            raise ValueError("sass_counts.py: a trampoline of another form: %s" % line)
        bounds, name, param, fn = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        a = "*static_cast<const gdn_msl::gdn_chunk_args*>(args)"
        if param != "const void* args":
            a = "*reinterpret_cast<const gdn_msl::gdn_chunk_args*>(args.d)"
        if not name.startswith("gdn_chunk_"):
            continue
        out.append(
            'extern "C" __global__ void %s%s(%s, gdncu::bufs b) {\n'
            '    using namespace gdncu;\n'
            '    const unsigned t = tid_x() + ntid_x() * (tid_y() + ntid_y() * tid_z());\n'
            '    gdn_msl::%s(%s, (const float*)b.p[0], (float*)b.p[1],\n'
            '        (float*)b.p[2], (float*)shmem, from3<gdn_msl_uint3>(ctaid_x(), ctaid_y(), ctaid_z()),\n'
            '        from3<gdn_msl_ushort3>(tid_x(), tid_y(), tid_z()), from3<gdn_msl_ushort3>(ntid_x(), ntid_y(), ntid_z()),\n'
            '        (unsigned short)(t %% 32), (unsigned short)(t / 32));\n'
            '}' % (bounds, name, param, fn, a))
    return "\n".join(out)


def _find(pattern_list):
    for p in pattern_list:
        for f in sorted(glob.glob(p)):
            return f
    return None


def load_nvrtc():
    names = [os.environ.get("GDN_LIBNVRTC", "")] + ["libnvrtc.so"]
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    f = _find(["/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/lib/x86_64-linux-gnu/libnvrtc.so*"])
    if f:
        return ctypes.CDLL(f)
    sys.exit("sass_counts.py: no libnvrtc.so (set $GDN_LIBNVRTC to its path)")


def compile_dir(nv, d, direct=False):
    """NVRTC's cubin of DIR's program, compiled with DIR's options (with
    direct, its trampolines as direct_trampolines writes them)."""
    def rd(n):
        with open(os.path.join(d, n), "rb") as f:
            b = f.read()
        return direct_trampolines(b.decode()).encode() if direct and n == "gdn_cuda.cu" else b
    with open(os.path.join(d, "options")) as f:
        opts = [o.encode() for o in f.read().split()]
    prog = ctypes.c_void_p()
    names = [b"metal_stdlib", b"kernel.metal"]
    hdrs = (ctypes.c_char_p * 2)(*[rd(n.decode()) for n in names])
    hnames = (ctypes.c_char_p * 2)(*names)
    if nv.nvrtcCreateProgram(ctypes.byref(prog), rd("gdn_cuda.cu"), b"gdn_cuda.cu", 2, hdrs, hnames) != 0:
        sys.exit("sass_counts.py: %s: nvrtcCreateProgram failed" % d)
    r = nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    if r != 0:
        n = ctypes.c_size_t()
        nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nv.nvrtcGetProgramLog(prog, log)
        sys.exit("sass_counts.py: %s: NVRTC failed (%d):\n%s" % (d, r, log.value.decode(errors="replace")[-4000:]))
    n = ctypes.c_size_t()
    nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetCUBIN(prog, cubin)
    nv.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="DIR")
    ap.add_argument("--kernels", default=r"^gdn_chunk_", help="a regular expression on the kernels' names")
    ap.add_argument("--direct", action="store_true",
                    help="the chunk kernels alone, their trampolines direct calls (NVRTC 11.8; see above)")
    args = ap.parse_args(argv)
    cuobjdump = shutil.which("cuobjdump") or _find(["/usr/local/cuda*/bin/cuobjdump"])
    if not cuobjdump:
        sys.exit("sass_counts.py: no cuobjdump")
    nv = load_nvrtc()
    base = None
    for d in args.dirs:
        cubin = os.path.join(d, "kernels.cubin")
        with open(cubin, "wb") as f:
            f.write(compile_dir(nv, d, args.direct))
        text = subprocess.run([cuobjdump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
        with open(os.path.join(d, "kernels.sass"), "w") as f:
            f.write(text)
        ru = subprocess.run([cuobjdump, "-res-usage", cubin], check=True, capture_output=True, text=True).stdout
        funcs = parse_sass(text)
        print("==", d)
        print("\n".join(table(funcs, args.kernels, base, parse_res_usage(ru))))
        if base is None:
            base = funcs


if __name__ == "__main__":
    main()
