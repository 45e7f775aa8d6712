package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// gdn runs the command in-process and returns its status and output.
func runGdn(args ...string) (status int, stdout, stderr string) {
	var o, e bytes.Buffer
	st := run(args, &o, &e)
	return st, o.String(), e.String()
}

func TestHelp(t *testing.T) {
	st, out, _ := runGdn("help")
	if st != 0 {
		t.Fatalf("gdn help: status %d", st)
	}
	for _, c := range order {
		if !strings.Contains(out, "  "+c+" ") {
			t.Errorf("gdn help does not list %s:\n%s", c, out)
		}
	}
	for _, c := range order {
		// gdn help CMD and gdn CMD -h both explain the command with an example.
		st, out, _ := runGdn("help", c)
		if st != 0 || !strings.Contains(out, "usage: gdn "+c) || !strings.Contains(out, "Example:") || !strings.Contains(out, "Flags:") {
			t.Errorf("gdn help %s: status %d\n%s", c, st, out)
		}
		st, _, errOut := runGdn(c, "-h")
		if st != 0 || !strings.Contains(errOut, "usage: gdn "+c) || !strings.Contains(errOut, "Example:") {
			t.Errorf("gdn %s -h: status %d\n%s", c, st, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"help", "frobnicate"},
		{"verify", "-nosuchflag"},
		{"verify", "extra"},
		{"verify", "-backend", "cuda"},
		{"verify", "-run", "("},
		{"verify", "-run", "no case has this name"},
		{"grad"},
		{"grad", "-in", "x.npz"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-heads", "round-robin"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-precision", "f16"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-C", "-1"},
		{"plan", "-hv", "5", "-hk", "2"},
		{"plan", "-T", "0"},
		{"plan", "-C", "-3"},
		{"bench", "-S", "0"},
		{"bench", "-hv", "3", "-hk", "2"},
		{"bench", "-backend", "tpu"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-backend", "tpu"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-backend", "all"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-backend", "metal:foo"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-mem", "lots"},
		{"grad", "-in", "x.npz", "-out", "y.npz", "-mem", "-1GiB"},
		{"verify", "-backend", "metal:foo"},
		{"plan", "-T", "9223372036854775807"},
		{"plan", "-hv", "9223372036854775807", "-hk", "1"},
		{"plan", "-seqs", "4611686018427387904"},
	} {
		if st, _, _ := runGdn(args...); st != 2 {
			t.Errorf("gdn %s: status %d, want 2", strings.Join(args, " "), st)
		}
	}
	// grad names only the backends it takes.
	for _, b := range []string{"all", "tpu", "metal:foo"} {
		_, _, errOut := runGdn("grad", "-in", "x.npz", "-out", "y.npz", "-backend", b)
		if want := fmt.Sprintf("gdn grad: -backend %q: want one of cpu, metal or metal:KIND\n", b); errOut != want {
			t.Errorf("grad -backend %s: %q, want %q", b, errOut, want)
		}
	}
}
