package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAlgoFlags: verify, grad and bench take -algo and -L, and refuse bad
// values as usage errors naming the flag.
func TestAlgoFlags(t *testing.T) {
	st, out, errOut := runGdn("verify", "-run", fastCases, "-algo", "all", "-L", "2")
	if st != 0 {
		t.Fatalf("verify -algo all: status %d\n%s%s", st, out, errOut)
	}
	if strings.Count(out, "): OK\n") != 4 || strings.Count(out, ",algo=chunk,L=2): OK") != 2 {
		t.Errorf("verify -algo all -L 2 at T = 1: want two recurrent and two chunk cases:\n%s", out)
	}

	st, out, errOut = runGdn("bench", "-S", "16", "-hk", "1", "-hv", "2", "-T", "20", "-count", "1", "-threads", "1", "-algo", "all", "-L", "8")
	if st != 0 {
		t.Fatalf("bench -algo all: status %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{"  forward ", "  backward, C 5 ", "  forward, chunk L 8 ", "  backward, chunk L 8 ",
		"flop/token", "chunk backward / forward: ", "chunk / recurrent (checkpointed) backward time: "} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}

	in := filepath.Join("testdata/torch", "long_f64.npz")
	outFile := filepath.Join(t.TempDir(), "r.npz")
	if got := gdnGrad(t, "-in", in, "-out", outFile, "-algo", "chunk", "-L", "16"); !strings.Contains(got, " C=7 algo=chunk L=16 backend=CPU") {
		t.Errorf("grad -algo chunk: header does not name the algorithm:\n%s", got)
	}

	for _, args := range [][]string{
		{"verify", "-algo", "wy"},
		{"verify", "-L", "-1", "-algo", "chunk"},
		{"grad", "-in", in, "-out", outFile, "-algo", "all"},
		{"bench", "-algo", "fast"},
		{"bench", "-L", "-3"},
		{"plan", "-L", "-1"},
	} {
		st, _, errOut := runGdn(args...)
		if st != 2 {
			t.Errorf("gdn %s: status %d, want 2 (usage)", strings.Join(args, " "), st)
		}
		if !strings.Contains(errOut, "-algo") && !strings.Contains(errOut, "-L") {
			t.Errorf("gdn %s: the error does not name the flag: %q", strings.Join(args, " "), errOut)
		}
	}
}
