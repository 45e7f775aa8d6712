#!/usr/bin/env python3
"""Tests of sass_counts.py's reading of cuobjdump -sass text (the compiling
needs a GPU machine's toolkit; these do not)."""
import unittest

import sass_counts

# Two functions in cuobjdump -sass's layout: each instruction line with its
# offset and encoding, a second line of encoding only.
SASS = """
	code for sm_90
		Function : gdn_chunk_fwd_vb8
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
                                                                                /* 0x000ff00000000800 */
        /*0010*/                   SHFL.IDX PT, R4, R2, R3, 0x1f ;              /* 0x00001f0302047389 */
                                                                                /* 0x000e2800000e0000 */
        /*0020*/                   F2F.F64.F32 R6, R4 ;                          /* 0x0000000400067310 */
                                                                                /* 0x000e240000201800 */
        /*0030*/                   F2F.F64.F32 R8, R5 ;                          /* 0x0000000500087310 */
                                                                                /* 0x000e240000201800 */
        /*0040*/                   DMMA.884 R10, R6, R8, R10 ;                   /* 0x000000080a0a723f */
                                                                                /* 0x001e240000000000 */
        /*0048*/                   DMMA.16x8x8 R16, R6, R8, R16 ;                /* 0x000000080610723f */
                                                                                /* 0x001e240000000000 */
        /*0050*/              @!P0 LDS.64 R12, [R2+0x10] ;                      /* 0x000010000202c984 */
                                                                                /* 0x000fe80000000a00 */
        /*0060*/                   LD.E R14, desc[UR4][R2.64] ;                 /* 0x0000000402007980 */
                                                                                /* 0x000fe80000000a00 */
        /*0070*/                   LDG.E R15, desc[UR4][R2.64] ;                /* 0x0000000402007981 */
                                                                                /* 0x000fe80000000a00 */
        /*0080*/                   STL [R1+0x8], R15 ;                          /* 0x0000080f01007387 */
                                                                                /* 0x000fe80000100800 */
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                /* 0x0000000000007b1d */
                                                                                /* 0x000fec0000010000 */
        /*00a0*/                   NOP;                                         /* 0x0000000000007918 */
                                                                                /* 0x000fc00000000000 */
		..........

		Function : gdn_scan_nc1
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   SHFL.BFLY PT, R4, R2, 0x1, 0x1f ;            /* 0x0c201f0002047f89 */
                                                                                /* 0x000e2800000e0000 */
        /*0010*/                   EXIT ;                                       /* 0x000000000000794d */
                                                                                /* 0x000fea0003800000 */
"""


class Counts(unittest.TestCase):
    def test_kinds(self):
        funcs = sass_counts.parse_sass(SASS)
        self.assertEqual(list(funcs), ["gdn_chunk_fwd_vb8", "gdn_scan_nc1"])
        c = sass_counts.count(funcs["gdn_chunk_fwd_vb8"])
        want = {"DMMA": 2, "DMMA.16x8": 1, "SHFL": 1, "F2F.F64.F32": 2, "F2F.F32.F64": 0, "LDS": 1, "LD": 1,
                "LDG": 1, "STL": 1, "LDL": 0, "BAR": 1, "all": 11}
        for k, v in want.items():
            self.assertEqual(c[k], v, k)

    def test_loads_after_stores(self):
        # LDG, STG, LDG, LDG, STG, STL, LDG.E.64, STG: two loads directly
        # after a store among the global accesses (the STL is not one)
        ops = ["LDG.E", "STG.E", "LDG.E", "LDG.E", "STG.E", "STL", "FADD", "LDG.E.64", "STG.E"]
        c = sass_counts.count([(op, "") for op in ops])
        self.assertEqual(c["STG>LDG"], 2)
        self.assertEqual(c["LDG"], 4)
        self.assertEqual(sass_counts.count([(op, "") for op in ["LDG.E", "LDG.E", "STG.E"]])["STG>LDG"], 0)

    def test_table_compares_with_the_first(self):
        a = sass_counts.parse_sass(SASS)
        b = sass_counts.parse_sass(SASS.replace("R6, R4 ;", "R6, R7 ;"))
        rows = sass_counts.table(b, r"^gdn_", base=a)
        self.assertTrue(rows[1].startswith("gdn_chunk_fwd_vb8") and rows[1].endswith("differs"), rows[1])
        self.assertTrue(rows[2].endswith("same SASS"), rows[2])
        only = sass_counts.table(a, r"^gdn_chunk_")
        self.assertEqual(len(only), 2)  # the header and the one chunk kernel
        self.assertNotIn("vs first", only[0])

    def test_res_usage(self):
        res = sass_counts.parse_res_usage(RES)
        self.assertEqual(res, {"gdn_chunk_red": (64, 0), "gdn_chunk_dsolve": (80, 72)})
        rows = sass_counts.table(sass_counts.parse_sass(SASS), r"^gdn_", res=res)
        self.assertTrue(rows[0].endswith("REG       STACK"), rows[0])
        self.assertTrue(rows[1].endswith("?           ?"), rows[1])  # not in res


# cuobjdump -res-usage's layout.
RES = """
Resource usage:
 Common:
  GLOBAL:10
 Function gdn_chunk_red:
  REG:64 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:600 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function gdn_chunk_dsolve:
  REG:80 STACK:72 SHARED:1024 LOCAL:0 CONSTANT[0]:600 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

# Trampolines as metal's cudaProgram writes them.
CU = """#include <metal_stdlib>
extern "C" __global__ void gdn_scan_nc1(const GDNCU_GRID_CONSTANT gdncu::argblob<512> args, gdncu::bufs b) { gdncu::invoke<&gdn_msl::gdn_scan<1>>(args, b); }
extern "C" __global__ void __launch_bounds__(256, 3) gdn_chunk_fwd_vb8(const GDNCU_GRID_CONSTANT gdncu::argblob<512> args, gdncu::bufs b) { gdncu::invoke<&gdn_msl::gdn_chunk_fwd<8>>(args, b); }
extern "C" __global__ void gdn_chunk_red(const GDNCU_GRID_CONSTANT gdncu::argblob<512> args, gdncu::bufs b) { gdncu::invoke<&gdn_msl::gdn_chunk_red>(args, b); }"""


class Direct(unittest.TestCase):
    def test_chunk_kernels_called_directly(self):
        out = sass_counts.direct_trampolines(CU)
        self.assertNotIn("gdn_scan", out)
        self.assertNotIn("invoke", out)
        self.assertIn('extern "C" __global__ void __launch_bounds__(256, 3) gdn_chunk_fwd_vb8(', out)
        self.assertIn("gdn_msl::gdn_chunk_fwd<8>(*reinterpret_cast<const gdn_msl::gdn_chunk_args*>(args.d)", out)
        self.assertIn("gdn_chunk_fwd_vb8(const GDNCU_GRID_CONSTANT gdncu::argblob<512> args, gdncu::bufs b)", out)
        self.assertIn("gdn_msl::gdn_chunk_red(", out)
        self.assertTrue(out.startswith("#include <metal_stdlib>\n"))

    def test_args_by_pointer(self):
        out = sass_counts.direct_trampolines(CU.replace("const GDNCU_GRID_CONSTANT gdncu::argblob<512> args", "const void* args"))
        self.assertIn("gdn_chunk_fwd_vb8(const void* args, gdncu::bufs b)", out)
        self.assertIn("gdn_msl::gdn_chunk_fwd<8>(*static_cast<const gdn_msl::gdn_chunk_args*>(args)", out)

    def test_other_form_is_an_error(self):
        with self.assertRaises(ValueError):
            sass_counts.direct_trampolines('extern "C" __global__ void k(float* x) { x[0] = 1; }')


if __name__ == "__main__":
    unittest.main()
