package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestMetalWired runs the real Metal backend: off Apple GPUs its CPU
// executor, which must pass the fast cases, alone and beside the CPU in
// -backend all; plan shows the Metal kernels' scratch; the GPU kind is
// refused with a reason where there is no Metal device, and an unknown kind
// is named in the error.
func TestMetalWired(t *testing.T) {
	st, out, errOut := runGdn("verify", "-backend", "metal:executor", "-run", fastCases)
	if st != 0 || !strings.Contains(out, "Backend Metal(executor): OK") {
		t.Errorf("verify -backend metal:executor: status %d\n%s%s", st, out, errOut)
	}
	st, out, errOut = runGdn("verify", "-backend", "all", "-run", fastCases)
	if st != 0 || !strings.Contains(out, "Backend CPU: OK") || !strings.Contains(out, "Backend Metal(") {
		t.Errorf("verify -backend all: status %d\n%s%s", st, out, errOut)
	}
	st, out, errOut = runGdn("plan")
	if st != 0 || !strings.Contains(out, "shared: Metal kernels (metal.ScratchBytes)") {
		t.Errorf("plan: status %d\n%s%s", st, out, errOut)
	}
	if runtime.GOOS != "darwin" {
		st, _, errOut = runGdn("verify", "-backend", "metal:gpu", "-run", fastCases)
		if st != 1 || !strings.Contains(errOut, "no Metal device") {
			t.Errorf("verify -backend metal:gpu on %s: status %d, stderr %q", runtime.GOOS, st, errOut)
		}
	}
	// An unknown kind is a usage error (2) in every command.
	for _, args := range [][]string{
		{"verify", "-backend", "metal:tpu", "-run", fastCases},
		{"bench", "-backend", "metal:tpu"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-backend", "metal:tpu"},
	} {
		st, _, errOut = runGdn(args...)
		if st != 2 || !strings.Contains(errOut, `"metal:tpu"`) && !strings.Contains(errOut, `kind "tpu"`) {
			t.Errorf("gdn %s: status %d, %q", strings.Join(args, " "), st, errOut)
		}
	}
}
