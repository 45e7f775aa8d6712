package main

import (
	"strings"
	"testing"
)

func TestBench(t *testing.T) {
	st, out, errOut := runGdn("bench", "-S", "16", "-hk", "1", "-hv", "2", "-T", "20", "-C", "5", "-count", "1", "-threads", "1", "-kda")
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{
		"shape: S 16, H_k 1, H_v 2, T 20, n_seqs 1, gate kda; C 5 (n_ck 4); best of 1",
		"CPU, threads 1", "  forward ", "  backward, C 5 ", "  backward, keep all ", "token-heads/s",
		"scratch 10.62 KiB per (head, seq)", // ((4 + 5 + 1) * 256 + 6*16 + 4*16) * 4 bytes
		"checkpointed / keep-all backward time: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchBackends(t *testing.T) {
	withMetal(t, fakeMetal{})
	st, out, errOut := runGdn("bench", "-backend", "all", "-S", "16", "-T", "4", "-count", "1")
	if st != 0 || !strings.Contains(out, "\nMetal(fake)\n") || !strings.Contains(out, "\nCPU, ") {
		t.Errorf("status %d\n%s%s", st, out, errOut)
	}
}

// TestBenchNothingMeasured: a shape that no backend asked for takes ends
// in exit status 1, with each backend's reason on stdout, and one that some
// backend takes still runs there.
func TestBenchNothingMeasured(t *testing.T) {
	st, out, errOut := runGdn("bench", "-backend", "metal:executor", "-S", "24", "-hk", "1", "-hv", "1", "-T", "4", "-count", "1")
	if st != 1 || !strings.Contains(out, "not supported: metal: q: ne[0] (S_k) = 24") || !strings.Contains(errOut, "no backend takes this shape") {
		t.Errorf("status %d (want 1)\n%s%s", st, out, errOut)
	}
	withMetal(t, fakeMetal{}) // refuses T = 2
	st, out, errOut = runGdn("bench", "-backend", "all", "-S", "16", "-hk", "1", "-hv", "1", "-T", "2", "-count", "1")
	if st != 0 || !strings.Contains(out, "Metal(fake): not supported") || !strings.Contains(out, "\nCPU, ") {
		t.Errorf("status %d (want 0: the CPU takes T 2)\n%s%s", st, out, errOut)
	}
}

// TestBenchMetalScratch: the Metal backend's lines give the Metal kernels'
// scratch (metal.ScratchBytes), not the CPU reference's, and the executor
// is flagged as a checker rather than a measure of a GPU.
func TestBenchMetalScratch(t *testing.T) {
	st, out, errOut := runGdn("bench", "-backend", "metal:executor", "-S", "16", "-hk", "1", "-hv", "1", "-T", "20", "-C", "5", "-count", "1")
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	// 4 * ((4 + 5)*16*16 + 5*16 + 5*1*(3*16 + 1)) bytes for C 5, and
	// 4 * ((1 + 20)*16*16 + 20*16 + 20*1*(3*16 + 1)) for C = T = 20.
	for _, want := range []string{
		"Metal(executor)\n",
		"backward, C 5 ", "scratch 10.27 KiB per (head, seq)",
		"scratch 26.08 KiB per (head, seq)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "not to be fast") {
		t.Errorf("no note that the executor is not a measure of a GPU: %q", errOut)
	}
}
