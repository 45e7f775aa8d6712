package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/verify"
)

const fastCases = `seq_len:.*T=1,`

func TestVerify(t *testing.T) {
	st, out, errOut := runGdn("verify", "-run", fastCases)
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{"GATED_DELTA_NET_BACK(seq_len:sk=16,sv=16,hk=1,hv=1,T=1,", "): OK\n", "2/2 tests passed\n", "Backend CPU: OK\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("piped run wrote to stderr (a progress bar?): %q", errOut)
	}
}

func TestVerifyProgressBar(t *testing.T) {
	defer func(f func(io.Writer) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(io.Writer) bool { return true }
	st, out, errOut := runGdn("verify", "-run", fastCases)
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	if !strings.Contains(errOut, "verify  50% |") || !strings.Contains(errOut, "(1/2)") {
		t.Errorf("no progress bar on the terminal's stderr: %q", errOut)
	}
	if strings.Count(out, "): OK\n") != 2 {
		t.Errorf("result lines:\n%s", out)
	}
}

// fakeMetal stands in for package metal: the CPU under another name, or a
// broken one.
type fakeMetal struct {
	verify.CPU
	broken bool
}

func (f fakeMetal) Name() string { return "Metal(fake)" }

func (f fakeMetal) Supports(c verify.Case) error {
	if c.Sk == 16 && c.T == 1 && c.Range == verify.BackendOps {
		return errors.New("head size 16")
	}
	return nil
}

func (f fakeMetal) Backward(p *verify.Problem[float32]) ([]float32, error) {
	packed, err := f.CPU.Backward(p)
	if f.broken && err == nil {
		packed[0] += 1
	}
	return packed, err
}

func withMetal(t *testing.T, b verify.Backend) {
	t.Helper()
	old := openMetal
	t.Cleanup(func() { openMetal = old })
	openMetal = func(kind string) (verify.Backend, error) {
		if kind != "" && kind != "executor" {
			return nil, errors.New("no such kind " + kind)
		}
		return b, nil
	}
}

func TestVerifyAllBackends(t *testing.T) {
	withMetal(t, fakeMetal{})
	st, out, errOut := runGdn("verify", "-backend", "all", "-run", fastCases)
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{"Backend CPU: OK", "1/1 tests passed\n1 tests not supported by Metal(fake)\nBackend Metal(fake): OK", "not supported [Metal(fake)]: head size 16"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if st, _, errOut := runGdn("verify", "-backend", "metal:gpu", "-run", fastCases); st != 2 || !strings.Contains(errOut, "no such kind gpu") {
		t.Errorf("-backend metal:gpu: status %d, %q", st, errOut)
	}
}

func TestVerifyFailure(t *testing.T) {
	withMetal(t, fakeMetal{broken: true})
	st, out, _ := runGdn("verify", "-backend", "metal:executor", "-run", fastCases)
	if st != 1 {
		t.Fatalf("status %d, want 1\n%s", st, out)
	}
	for _, want := range []string{"): FAIL: ", "nmse(dq)", "0/1 tests passed", "Backend Metal(fake): FAIL"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
