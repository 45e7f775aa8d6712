package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
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
	gdn.CPU
	broken bool
}

func (f fakeMetal) Name() string { return "Metal(fake)" }

// Supports refuses T = 2 (the matrix's T = 2 cases, as fakeCases picks
// them).
func (f fakeMetal) Supports(s gdn.Shape, _ gdn.Options) error {
	if s.T == 2 {
		return errors.New("T = 2")
	}
	return nil
}

func (f fakeMetal) Backward(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options) ([]float32, error) {
	packed, err := f.CPU.Backward(in, dy, dStates, opt)
	if f.broken && err == nil {
		packed[0] += 1
	}
	return packed, err
}

// fakeCases are two cases fakeMetal runs and two it refuses.
const fakeCases = `seq_len:.*T=[12],`

func withMetal(t *testing.T, b gdn.Backend) {
	t.Helper()
	old := openMetal
	t.Cleanup(func() { openMetal = old })
	openMetal = func(kind string) (gdn.Backend, error) {
		if kind != "" && kind != "executor" {
			return nil, errors.New("no such kind " + kind)
		}
		return b, nil
	}
}

func TestVerifyAllBackends(t *testing.T) {
	withMetal(t, fakeMetal{})
	st, out, errOut := runGdn("verify", "-backend", "all", "-run", fakeCases)
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{"Backend CPU: OK", "2/2 tests passed\n2 tests not supported by Metal(fake)\nBackend Metal(fake): OK", "not supported [Metal(fake)]: T = 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// A backend that fails to open is a runtime error (1), not a usage error.
	if st, _, errOut := runGdn("verify", "-backend", "metal:gpu", "-run", fastCases); st != 1 || !strings.Contains(errOut, "no such kind gpu") {
		t.Errorf("-backend metal:gpu: status %d, %q", st, errOut)
	}
}

func TestVerifyFailure(t *testing.T) {
	withMetal(t, fakeMetal{broken: true})
	st, out, _ := runGdn("verify", "-backend", "metal:executor", "-run", fastCases)
	if st != 1 {
		t.Fatalf("status %d, want 1\n%s", st, out)
	}
	for _, want := range []string{"): FAIL: ", "nmse(dq)", "0/2 tests passed", "Backend Metal(fake): FAIL"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
