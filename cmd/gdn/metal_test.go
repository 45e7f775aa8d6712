package main

import (
	"strings"
	"testing"
)

// TestMetalWired: -backend metal:executor runs the Metal kernels through
// the CPU executor, and plan shows the Metal backend's scratch.
func TestMetalWired(t *testing.T) {
	st, out, errOut := runGdn("verify", "-backend", "metal:executor", "-run", fastCases)
	if st != 0 || !strings.Contains(out, "Backend Metal(executor): OK") {
		t.Errorf("verify -backend metal:executor: status %d\n%s%s", st, out, errOut)
	}
	st, out, errOut = runGdn("plan")
	if st != 0 || !strings.Contains(out, "shared: Metal backend") {
		t.Errorf("plan: status %d\n%s%s", st, out, errOut)
	}
	st, _, errOut = runGdn("verify", "-backend", "metal:tpu", "-run", fastCases)
	if st == 0 || !strings.Contains(errOut, `kind "tpu"`) {
		t.Errorf("an unknown Metal kind: status %d, %q", st, errOut)
	}
}
