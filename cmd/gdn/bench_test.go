package main

import (
	"os"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/metal"
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
	// The kernel list is the CUDA compiler's; the executor has none.
	if strings.Contains(out, "kernels as compiled") {
		t.Errorf("the executor's output lists compiled kernels:\n%s", out)
	}
}

// TestKernelLines: the CUDA backend's kernel list, one line a kernel with
// its registers, the mark on the kernels with local memory only, and "?"
// for a size the driver did not give.
func TestKernelLines(t *testing.T) {
	out := kernelLines([]metal.KernelResources{
		{Name: "gdn_chunk_prep", Registers: 64, LocalBytes: 0, SharedStatic: 0, MaxThreads: 1024},
		{Name: "gdn_chunk_dpairs", Registers: 80, LocalBytes: 96, SharedStatic: 2048, MaxThreads: 768},
		{Name: "gdn_chunk_red", Registers: 32, LocalBytes: -1, SharedStatic: -1, MaxThreads: 1024},
	})
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a header and 3 kernels:\n%s", len(lines), out)
	}
	// Sizes the driver did not give read "?", unmarked.
	if l := lines[3]; !strings.Contains(l, "? local") || !strings.Contains(l, "? shared") || strings.Contains(l, "<-") {
		t.Errorf("line %q: want unknown sizes as ?, unmarked", l)
	}
	for i, want := range []struct {
		name, regs, local string
		marked            bool
	}{
		{"gdn_chunk_prep", "64 regs", "0 B local", false},
		{"gdn_chunk_dpairs", "80 regs", "96 B local", true},
	} {
		l := lines[i+1]
		if !strings.Contains(l, want.name) || !strings.Contains(l, want.regs) || !strings.Contains(l, want.local) {
			t.Errorf("line %q lacks %q, %q or %q", l, want.name, want.regs, want.local)
		}
		if got := strings.Contains(l, "<- local memory"); got != want.marked {
			t.Errorf("line %q: marked %v, want %v", l, got, want.marked)
		}
	}
	if !strings.Contains(lines[2], "KiB shared") || !strings.Contains(lines[2], "768 threads") {
		t.Errorf("line %q lacks the shared memory or the threads", lines[2])
	}
}

// TestBenchKept: -kept adds the chunk kernels' ForwardKeep and BackwardKept
// rows (text and -json), and their time against the pair that forms A, P
// and X twice; the CPU reference, which keeps nothing, has no such rows.
func TestBenchKept(t *testing.T) {
	js := t.TempDir() + "/b.jsonl"
	st, out, errOut := runGdn("bench", "-backend", "metal:executor", "-algo", "chunk", "-kept", "-L", "4", "-S", "16", "-hk", "1", "-hv", "2", "-T", "10", "-count", "1", "-json", js)
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{"  fwd keep, chunk L 4 ", "  bwd kept, chunk L 4 ", "chunk forward + backward, kept / not: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"pass":"forward_keep"`, `"pass":"backward_kept"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("-json lacks %s:\n%s", want, data)
		}
	}
	st, out, errOut = runGdn("bench", "-algo", "chunk", "-kept", "-S", "16", "-hk", "1", "-hv", "1", "-T", "8", "-count", "1")
	if st != 0 || strings.Contains(out, "kept") {
		t.Errorf("the CPU reference with -kept: status %d, want 0 and no kept rows\n%s%s", st, out, errOut)
	}
}
