package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
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

// TestAlgoLZero: -L 0 means each case's segment length to verify (the
// matrix runs several chunks a case) and gdn's default chunk length to
// grad and bench; each command's help says which.
func TestAlgoLZero(t *testing.T) {
	for _, tc := range []struct{ cmd, want string }{
		{"verify", "(0: each case's segment length C)"},
		{"grad", fmt.Sprintf("(0: %d)", gdn.DefaultChunkLen)},
		{"bench", fmt.Sprintf("(0: %d)", gdn.DefaultChunkLen)},
	} {
		_, out, errOut := runGdn(tc.cmd, "-h")
		if !strings.Contains(out+errOut, "-algo chunk "+tc.want) {
			t.Errorf("gdn %s -h: -L's help lacks %q:\n%s%s", tc.cmd, tc.want, out, errOut)
		}
	}
	// verify at -L 0 runs a case at its segment length: C 4 on T 9 is
	// chunks of 4 (L=4 in the case's name).
	st, out, errOut := runGdn("verify", "-algo", "chunk", "-run", "snapshots:sk=16,sv=16,hk=1,hv=1,T=9,seqs=1/1,gate=scalar,heads=tile,qk=dense,state=zero,snap=1,C=4")
	if st != 0 || !strings.Contains(out, "algo=chunk,L=4)") {
		t.Errorf("gdn verify -algo chunk at -L 0: status %d, want a case at L=4:\n%s%s", st, out, errOut)
	}
}
