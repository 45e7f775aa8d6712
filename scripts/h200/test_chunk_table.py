#!/usr/bin/env python3
"""Tests of chunk_table.py on the logs in docs/h200 and on the files
chunk_sweep.sh writes (python3 -m unittest discover -s scripts/h200)."""
import contextlib
import io
import json
import os
import tempfile
import unittest

import chunk_table

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "h200")


def doc(name):
    return os.path.join(DOCS, name)


class OldLogs(unittest.TestCase):
    def test_text_logs(self):
        ours = chunk_table.read_ours([doc("bench.log"), doc("chunk-h200.log")])
        # bench.log: T 2048 KDA backward, C 46: 20.585 ms, peak 600.8 MiB.
        r = ours[("recurrent", "kda", 2048, "backward")]
        self.assertEqual(r["ms"], 20.585)
        self.assertAlmostEqual(r["peak"], 600.8 * 2**20)
        # chunk-h200.log (later) replaces bench.log's T 1024 scalar forward
        # (1.750 ms there, 1.650 ms here), and its chunk rows come from
        # -algo all runs: peaks marked shared.
        self.assertEqual(ours[("recurrent", "scalar", 1024, "forward")]["ms"], 1.650)
        c = ours[("chunk", "scalar", 1024, "backward")]
        self.assertEqual(c["ms"], 53.265)
        self.assertTrue(c["shared"])
        self.assertFalse(ours[("recurrent", "scalar", 1024, "forward")]["shared"])
        self.assertNotIn(("recurrent", "scalar", 4096, "backward_keep_all"), ours)  # "not run"
        # T 1 rows are another shape's table rows: read, not printed.
        self.assertIn(("recurrent", "scalar", 1, "forward"), ours)

    def test_table(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            chunk_table.main(["--ours", doc("bench.log"), doc("chunk-h200.log"),
                              "--fla", doc("fla-f32.jsonl"), doc("fla-bf16.jsonl"),
                              "--grad", doc("proof-tests.log")])
        text = out.getvalue()
        # T 1024 scalar: recurrent 1.650 + 7.346 ms; chunk 15.258 + 53.265
        # ms; fla float32 forward 1.291 ms, forward + backward 3.415 ms,
        # 492.1 MiB; bf16 0.705 and 3.518 ms.
        self.assertIn("| 1024 | scalar | 1.65 ms | 9 ms | 15.3 ms | 68.5 ms | 3.42 GiB * | 1.29 ms | 3.41 ms "
                      "| 492 MiB | 0.705 ms | 3.52 ms | 346 MiB | 0.13x |", text)
        self.assertIn("| 2048 | KDA | 6.27 ms | 26.9 ms | - | - | - | 1.04 ms | 4.71 ms |", text)
        self.assertIn("\\* peak held by a process that ran the recurrent passes first", text)
        self.assertIn("| ours, recurrent (T 8192) | scalar | float32 | 4.2e-07 |", text)
        self.assertIn("| fla chunk_kda, forward only (T 1024) | KDA | float32 | 0.0012 | o 0.0012 |", text)


class SweepFiles(unittest.TestCase):
    """The files of chunk_sweep.sh: gdn bench -json lines (the keys
    TestBenchJSON checks on the Go side), fla_bench.py's grad_error rows,
    TestCUDARealShape's lines with the algorithm."""

    def test_sweep_dir(self):
        d = tempfile.mkdtemp()
        base = {"backend": "Metal(cuda: NVIDIA H200)", "S": 128, "hk": 16, "hv": 48, "T": 8192, "seqs": 1,
                "gate": "kda", "stat": "median", "runs": 5}
        recs = [dict(base, algo="recurrent", C=91, **{"pass": "forward", "ms": 20.0, "peak_bytes": 2**30}),
                dict(base, algo="recurrent", C=91, **{"pass": "backward", "ms": 80.0, "peak_bytes": 2 * 2**30}),
                dict(base, algo="recurrent", C=8192, **{"pass": "backward_keep_all", "note": "not run: too big"}),
                dict(base, algo="chunk", L=64, **{"pass": "forward", "ms": 2.0, "peak_bytes": 2**29}),
                dict(base, algo="chunk", L=64, **{"pass": "backward", "ms": 6.0, "peak_bytes": 3 * 2**29}),
                dict(base, backend="CPU, threads 16", algo="chunk", **{"pass": "forward", "ms": 1e4})]
        with open(os.path.join(d, "ours.jsonl"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))
        fla = {"op": "chunk_kda", "dtype": "float32", "T": 8192, "B": 1, "H": 16, "HV": 48, "K": 128, "V": 128}
        with open(os.path.join(d, "fla.jsonl"), "w") as f:
            f.write(json.dumps(dict(fla, **{"pass": "forward+backward", "ms": 13.62, "peak_bytes": 4.1 * 2**30})) + "\n")
            f.write(json.dumps(dict(fla, **{"pass": "grad_error", "rel_rms": 1.1e-3,
                                            "rel_rms_of": {"o": 1e-3, "dq": 1.1e-3}})) + "\n")
        with open(os.path.join(d, "grad.log"), "w") as f:
            f.write("    cuda_gpu_test.go:170: 27b:sk=128,sv=128,hk=16,hv=48,T=8192,seqs=1/1,gate=kda,heads=tile,"
                    "qk=fused,state=random,snap=1,C=91,range=gentle, algo chunk: relative RMS y 2e-07, dq 3e-07, "
                    "dg 5e-07; GPU forward 2.00 ms\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            chunk_table.main([d])
        text = out.getvalue()
        self.assertIn("| 8192 | KDA | 20 ms | 100 ms | 2 ms | 8 ms | 1.5 GiB | - | 13.6 ms | 4.1 GiB | - | - | - "
                      "| 12.50x |", text)
        self.assertNotIn("*", text.split("\n\n")[0])  # separate processes: no shared peak
        self.assertIn("| ours, chunk (T 8192) | KDA | float32 | 5e-07 | y 2e-07, dq 3e-07, dg 5e-07 |", text)
        self.assertIn("| fla chunk_kda (T 8192) | KDA | float32 | 0.0011 | o 0.001, dq 0.0011 |", text)
        # ours' backend names its GPU (the CPU row does not); these fla
        # lines name none.
        self.assertTrue(text.endswith("\nGPUs: ours NVIDIA H200; fla -\n"), text[-80:])

        # gdn bench -kept's passes: a column of their sum after chunk
        # fwd+bwd, only where some are there.
        self.assertNotIn("kept", text)
        with open(os.path.join(d, "ours.jsonl"), "a") as f:
            for p, ms in (("forward_keep", 2.25), ("backward_kept", 5.0)):
                f.write(json.dumps(dict(base, algo="chunk", L=64, **{"pass": p, "ms": ms, "peak_bytes": 2**29})) + "\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            chunk_table.main([d])
        text = out.getvalue()
        self.assertIn("| chunk fwd | chunk fwd+bwd | chunk kept fwd+bwd | chunk peak |", text)
        self.assertIn("| 8192 | KDA | 20 ms | 100 ms | 2 ms | 8 ms | 7.25 ms | 1.5 GiB | - | 13.6 ms |", text)

    def test_targets(self):
        # Forward + Backward 2 + 6 ms against the recurrent 20 + 80 (12.50x)
        # and fla's float32 13.62 (8 / 13.62 = 0.59x), no bf16 run; the
        # peak 1.5 GiB less the KDA inputs at T 8192 (q, k 64 MiB each; v,
        # g, dy 192 MiB each; beta 1.5 MiB; the state 3 MiB: 708.5 MiB) is
        # 0.81 GiB; errors 1.1e-3 against 5e-7 (2,200x). With the kept pair
        # (2.25 + 5 ms), 100 / 7.25 = 13.79x and 7.25 / 13.62 = 0.53x.
        self.assertEqual(chunk_table.input_bytes(8192, "kda"), int(708.5 * 2**20))
        self.assertEqual(chunk_table.input_bytes(8192, "scalar"), 518 * 2**20)
        recs = [("recurrent", "forward", 20.0, 2**30), ("recurrent", "backward", 80.0, 2 * 2**30),
                ("chunk", "forward", 2.0, 2**29), ("chunk", "backward", 6.0, 3 * 2**29)]
        ours = {chunk_table.key(a, "kda", 8192, p): {"ms": ms, "peak": pk, "shared": False} for a, p, ms, pk in recs}
        fla = {("float32", 8192, "forward+backward"): {"ms": 13.62, "peak_bytes": 4.1 * 2**30}}
        grad = {("chunk", "kda"): {"y": 2e-7, "dg": 5e-7}}
        fgrad = {"float32": {"rel_rms_of": {"o": 1e-3, "dq": 1.1e-3}}}
        lines = chunk_table.targets(ours, fla, grad, fgrad)
        self.assertEqual(lines[-1], "| KDA | chunk 8 ms | 12.50x: yes | 0.59x: yes | - | 0.81 GiB | - | 2,200x: yes |")
        self.assertEqual(len(lines), 3)  # no scalar rows: no line for that gate
        ours[chunk_table.key("chunk", "kda", 8192, "forward_keep")] = {"ms": 2.25, "peak": 2**29, "shared": False}
        ours[chunk_table.key("chunk", "kda", 8192, "backward_kept")] = {"ms": 5.0, "peak": 2**29, "shared": False}
        fla[("bfloat16", 8192, "forward+backward")] = {"ms": 3.0, "peak_bytes": 0.5 * 2**30}
        self.assertEqual(chunk_table.targets(ours, fla, grad, fgrad)[-1],
                         "| KDA | kept 7.25 ms | 13.79x: yes | 0.53x: yes | 2.42x: no | 0.81 GiB: no | 0.50 GiB "
                         "| 2,200x: yes |")
        self.assertEqual(chunk_table.targets({k: v for k, v in ours.items() if k[0] == "recurrent"}, fla, grad, fgrad), [])


class Targets(unittest.TestCase):
    """Table 3 on README's sweep."""

    def test_targets_one_h100(self):
        # README's sweep: at T 8192 the kept pair 3.902 + 10.888 ms
        # (scalar) and 5.237 + 14.288 (KDA), the recurrent kernels 10.856 +
        # 76.616 and 19.195 + 83.269, fla's chunk_kda 15.144 (float32) and
        # 9.240 ms (bf16, 2,837,970,944 bytes above its inputs).
        d = doc("chunk-sweep/dsolve-cols-h100")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            chunk_table.main(["--ours", os.path.join(d, "ours.jsonl"), "--fla", os.path.join(d, "fla-float32.jsonl"),
                              os.path.join(d, "fla-bfloat16.jsonl"), "--grad", os.path.join(d, "grad.log")])
        text = out.getvalue()
        self.assertIn("| scalar | kept 14.8 ms | 5.91x: no | 0.98x: yes | 1.60x: yes | 2.91 GiB: no | 2.64 GiB |", text)
        self.assertIn("| KDA | kept 19.5 ms | 5.25x: no | 1.29x: no | 2.11x: no | 2.90 GiB: no | 2.64 GiB |", text)


class GPUs(unittest.TestCase):
    """The line that names the GPUs, on the sweeps in docs/h200."""

    def gpus(self, *argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            chunk_table.main(list(argv))
        return out.getvalue().rstrip("\n").split("\n")[-1]

    def test_one_machine(self):
        self.assertEqual(self.gpus(doc("chunk-sweep/gather-qkg-h100")),
                         "GPUs: ours NVIDIA H100 80GB HBM3; fla NVIDIA H100 80GB HBM3")

    def test_two_machines(self):
        # ours on an H100, fla's lines of an H200's day: said, not hidden.
        self.assertEqual(self.gpus("--ours", doc("chunk-sweep/gather-qkg-h100/ours.jsonl"),
                                   "--fla", doc("chunk-sweep/fla.jsonl")),
                         "GPUs: ours NVIDIA H100 80GB HBM3; fla NVIDIA H200 "
                         "(ours and fla on different GPUs: not one run)")

    def test_text_log(self):
        self.assertEqual(chunk_table.read_gpus([doc("chunk-h200.log")], []), (["NVIDIA H200"], []))


if __name__ == "__main__":
    unittest.main()
