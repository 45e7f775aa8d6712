#!/usr/bin/env python3
"""Tests of ncu_lines.py on the source pages in docs/h200/ncu-source and on
small pages written here (python3 -m unittest discover -s scripts/h200)."""
import io
import os
import re
import tempfile
import unittest

import ncu_lines

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "h200")

HEADER = ('"Line No","Source","Address","Source","# Samples","Instructions Executed",'
          '"stall_barrier","stall_long_sb"\n')


def page(*blocks):
    """A source page: blocks of (file, function, [(line, [(addr, samples, instr, barrier)])])."""
    out = io.StringIO()
    for file, func, lines in blocks:
        out.write(f'"File Path","/x/{file}"\n"Function Name","{func}"\n' + HEADER)
        for line, ins in lines:
            out.write(f'"{line}","-","-","-","0","0","0","0"\n')
            for addr, s, n, b in ins:
                out.write(f'"","","{addr}","NOP","{s}","{n}","{b}","0"\n')
    return out.getvalue()


class Pages(unittest.TestCase):
    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_inlined_counted_once(self):
        # 0x10 stands under kernel.metal:5 and metal_stdlib:40 (inlined):
        # counted once; 0x20 under the prelude alone.
        p = self.write(page(
            ("kernel.metal", "k", [(5, [("0x10", 30, 100, 10)])]),
            ("metal_stdlib", "k", [(40, [("0x10", 30, 100, 10), ("0x20", 10, 300, 0)])]),
        ))
        ins = ncu_lines.read(p)["k"]
        self.assertEqual(sum(i["instr"] for i in ins.values()), 400)
        self.assertEqual(sum(i["samples"] for i in ins.values()), 40)
        out = io.StringIO()
        ncu_lines.report({"k": ins}, [("five", 5, 5)], out=out)
        text = out.getvalue()
        self.assertIn("40 samples (barrier 25%", text)
        self.assertRegex(text, r"prelude only \(metal_stdlib\)\s+samples  25.0%  instructions  75.0%")
        self.assertRegex(text, r"five \(lines 5-5\)\s+samples  75.0%  instructions  25.0%  at a barrier  25.0%")

    def test_bad_input(self):
        with self.assertRaises(ValueError):
            ncu_lines.read(self.write('"File Path","/x/kernel.metal"\n"Line No","Source"\n"1","// x"\n'))
        with self.assertRaises(ValueError):
            ncu_lines.read(self.write('"","","0x10","NOP"\n'))
        for bad in ("x", "x=1-", "=1-2", "x=a-b"):
            with self.assertRaises(Exception):
                ncu_lines.region(bad)
        self.assertEqual(ncu_lines.region("pair sums=908-943"), ("pair sums", 908, 943))


class Committed(unittest.TestCase):
    def test_totals_match_sections(self):
        # The pages' instructions, counted once by address, against the
        # executed-instruction counts of Nsight Compute's sections, a
        # separate profile of the same kernels (ncu-sections.log: the
        # scalar forward's prep and walk, then KDA's prep, walk, backward
        # walk and pair terms).
        with open(os.path.join(DOCS, "ncu-sections.log")) as f:
            log = f.read()
        counts = []
        for m in re.finditer(r"^  (gdn_\w+) \(.*?^    Executed Instructions\s+inst ([\d,]+)", log, re.M | re.S):
            counts.append((m.group(1), int(m.group(2).replace(",", ""))))
        self.assertEqual([c[0] for c in counts], ["gdn_chunk_prep", "gdn_chunk_fwd_vb16"] * 2 + ["gdn_chunk_bwd_vb8", "gdn_chunk_dpairs"])
        pages = {"scalar-prepfwd": counts[0:2], "kda-prepfwd": counts[2:4], "kda-bwddpairs": counts[4:6]}
        for name, want in pages.items():
            funcs = ncu_lines.read(os.path.join(DOCS, "ncu-source", f"src-{name}.csv.xz"))
            for func, n in want:
                got = sum(i["instr"] for i in funcs[func].values())
                self.assertLess(abs(got - n) / n, 1e-4, f"{name} {func}: {got:.0f} instructions, sections {n}")


if __name__ == "__main__":
    unittest.main()
