package verify

import (
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
)

var long = flag.Bool("long", false, "run the long case matrix (longer sequences, larger heads)")

// TestCPUMatrix runs every case of the matrix on the CPU reference: the
// float64 backward against finite differences, float32 against float64,
// checkpointed against keep-every-state and one thread against many.
// `go test ./verify -run CPUMatrix/broadcast -v` prints the lines of one
// family; -long runs LongMatrix.
func TestCPUMatrix(t *testing.T) {
	cases := Matrix()
	if *long {
		cases = LongMatrix()
	}
	cases = append(cases, WithAlgo(cases, gdn.Chunk, 0)...)
	for _, c := range cases {
		t.Run(c.Family+"/"+c.Params(), func(t *testing.T) {
			ref, err := NewReference(c)
			if err != nil {
				t.Fatal(err)
			}
			r := Run(gdn.CPU{}, ref)
			t.Log(r.Line())
			if !r.OK() {
				t.Error(r.Line())
			}
			own := "checkpointed=keepall"
			if c.Algo == gdn.Chunk {
				own = "chunk64(dg)"
			}
			for _, name := range []string{"fd64(dq)", "fd64(dk)", "fd64(dv)", "fd64(dg)", "fd64(dbeta)", "fd64(dstate)", own, "threads1=threadsN"} {
				if _, ok := r.Worst(name); !ok {
					t.Errorf("check %s did not run", name)
				}
			}
		})
	}
}

// TestMatrixCoverage: the matrix holds every family and value the issue
// asks for, so that trimming it for speed cannot quietly drop one.
func TestMatrixCoverage(t *testing.T) {
	cs := Matrix()
	has := func(pred func(Case) bool) bool {
		for _, c := range cs {
			if pred(c) {
				return true
			}
		}
		return false
	}
	for _, s := range []int{16, 32, 64, 128} {
		if !has(func(c Case) bool { return c.Sk == s && c.Sv == s }) {
			t.Errorf("no case with head size %d", s)
		}
	}
	for _, T := range []int{1, 2, 7, 33, 64, 65, 100} {
		if !has(func(c Case) bool { return c.T == T && (T <= 2 || T%c.Options().SegmentLength(T) != 0) }) {
			t.Errorf("no case with T = %d and a C that does not divide it", T)
		}
	}
	for rep := 1; rep <= 3; rep++ {
		for _, m := range []string{"tile", "interleave"} {
			if !has(func(c Case) bool { return c.Rep == rep && c.Heads.String() == m }) {
				t.Errorf("no case with v_repeat %d under %s", rep, m)
			}
		}
	}
	checks := map[string]func(Case) bool{
		"S_k != S_v":         func(c Case) bool { return c.Sk != c.Sv },
		"scalar gate":        func(c Case) bool { return !c.KDA },
		"KDA":                func(c Case) bool { return c.KDA },
		"fused q/k, r=3":     func(c Case) bool { return c.Layout == Fused && c.Rep == 3 },
		"permuted q/k":       func(c Case) bool { return c.Layout == Permuted },
		"n_seqs 2":           func(c Case) bool { return c.Seqs == 2 },
		"q/k seq broadcast":  func(c Case) bool { return c.SeqsQK == 1 && c.Seqs == 2 },
		"zero state":         func(c Case) bool { return !c.State },
		"random state":       func(c Case) bool { return c.State },
		"backend-ops ranges": func(c Case) bool { return c.Range == BackendOps },
		"gentle ranges":      func(c Case) bool { return c.Range == Gentle },
	}
	for name, pred := range checks {
		if !has(pred) {
			t.Errorf("no case with %s", name)
		}
	}
	for k := 1; k <= 4; k++ {
		if !has(func(c Case) bool { return max(c.Snapshots, 1) == k }) {
			t.Errorf("no case with %d snapshots", k)
		}
	}
}

// wrong is a backend with a planted bug: the CPU reference, with one block
// of the packed gradient scaled slightly. The checks must catch it.
type wrong struct {
	gdn.CPU
	block int
	by    float32
}

func (w wrong) Name() string { return "wrong" }
func (w wrong) Backward(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options) ([]float32, error) {
	packed, err := w.CPU.Backward(in, dy, dStates, opt)
	if err != nil {
		return nil, err
	}
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	g, err := gdn.NewGrads(s, packed)
	if err != nil {
		return nil, err
	}
	b := g.Blocks()[w.block]
	for i := range b {
		b[i] *= w.by
	}
	return packed, nil
}

func TestRunCatchesWrongGradients(t *testing.T) {
	c := Matrix()[0]
	for _, c2 := range Matrix() {
		if c2.Family == "broadcast_strided" {
			c = c2
			break
		}
	}
	ref, err := NewReference(c)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range gdn.BlockNames {
		r := Run(wrong{block: i, by: 1.001}, ref)
		if r.OK() {
			t.Errorf("a 0.1%% error in %s passed: %s", name, r.Line())
		}
		if !strings.Contains(r.Line(), "nmse("+name+")") {
			t.Errorf("the failure does not name %s: %s", name, r.Line())
		}
	}
}

func TestMetrics(t *testing.T) {
	ref := []float64{1, 2}
	x := []float64{1, 3}
	if got := NMSE(ref, x); got != 1.0/5 {
		t.Errorf("NMSE = %g, want 1/5", got)
	}
	if got := RMSRatio(ref, x); math.Abs(got-math.Sqrt(0.2)) > 1e-15 {
		t.Errorf("RMSRatio = %g, want sqrt(1/5)", got)
	}
	// |(1-1)/2| = 0 and |(2-3)/5| = 0.2, mean 0.1.
	if got := GradModeErr([]float64{1, 2}, []float64{1, 3}, 0); math.Abs(got-0.1) > 1e-15 {
		t.Errorf("GradModeErr = %g, want 0.1", got)
	}
	if got := GradModeErr([]float64{1e-20, 2}, []float64{0, 2}, 1e-12); got != 0 {
		t.Errorf("GradModeErr below the floor = %g, want 0", got)
	}
	if got := MaxRelErr([]float64{1, 2}, []float64{1.5, 2}, 4); got != 0.125 {
		t.Errorf("MaxRelErr = %g, want 0.125", got)
	}
	if got := NMSE([]float64{0}, []float64{1}); !math.IsInf(got, 1) {
		t.Errorf("NMSE against zero = %g, want +Inf", got)
	}
	if (Check{Name: "x", Value: math.NaN(), Limit: 1}).OK() {
		t.Errorf("a NaN check passed")
	}
}
