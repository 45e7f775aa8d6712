package metal_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/metal/exec"
	"github.com/gdnback/gdnback/verify"
)

// long selects the long case matrix, as in verify's own tests.
var long = flag.Bool("long", false, "run the long case matrix (longer sequences, larger heads)")

func metalCases() []verify.Case {
	if *long {
		return verify.LongMatrix()
	}
	return verify.Matrix()
}

// openMetal opens the default Metal backend: the GPU on a Mac, the CPU
// executor of the same kernel source elsewhere.
func openMetal(t *testing.T) *metal.Backend {
	t.Helper()
	b, err := metal.Open(metal.Auto)
	if err != nil {
		t.Fatalf("opening the Metal backend: %v", err)
	}
	t.Logf("Metal backend: %s (%s/%s)", b.Name(), runtime.GOOS, runtime.GOARCH)
	return b
}

func openExecutor(t *testing.T) *metal.Backend {
	t.Helper()
	b, err := metal.Open(metal.Executor)
	if err != nil {
		t.Fatalf("opening the Metal executor: %v", err)
	}
	return b
}

// TestMetalMatrix runs the Metal forward and backward on every case of the
// matrix against the float64 reference (NMSE), the backward against finite
// differences (grad mode) and twice (bit-identical), as test-backend-ops
// would: on the GPU on a Mac, on the CPU executor elsewhere.
func TestMetalMatrix(t *testing.T) { runMatrix(t, openMetal(t), metalCases()) }

// runMatrix runs backend b on cases with every backend's limits, logging
// each case's line and failing on any that does not pass.
func runMatrix(t *testing.T, b gdn.Backend, cases []verify.Case) {
	t.Helper()
	start := time.Now()
	var out strings.Builder
	sums := verify.RunAll([]gdn.Backend{b}, cases, func(r verify.Result) {
		fmt.Fprintf(&out, "  %s\n", r.Line())
		if !r.OK() {
			t.Errorf("%s", r.Line())
		}
	})
	sums[0].Lines(&out)
	t.Logf("%d cases on %s in %v:\n%s", len(cases), b.Name(), time.Since(start).Round(time.Second), out.String())
	if s := sums[0]; s.Passed != len(cases) {
		t.Errorf("%d of %d cases passed (%d failed, %d not supported)", s.Passed, len(cases), s.Failed, s.Skipped)
	}
}

// TestMetalGPUAgainstExecutor compares the GPU with the CPU executor of the
// same source on every case of the matrix (NMSE of each output against the
// other). It needs a Metal device.
func TestMetalGPUAgainstExecutor(t *testing.T) {
	gpu, err := metal.Open(metal.GPU)
	if errors.Is(err, metal.ErrNoGPU) {
		t.Skipf("no GPU to compare with the executor: %v (TestMetalMatrix runs the executor here)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cpu := openExecutor(t)
	for _, c := range metalCases() {
		p := verify.Build[float32](c)
		gy, gs, err := gpu.Forward(&p.In, p.Opt)
		if err != nil {
			t.Fatalf("%s: GPU forward: %v", c, err)
		}
		ey, es, err := cpu.Forward(&p.In, p.Opt)
		if err != nil {
			t.Fatalf("%s: executor forward: %v", c, err)
		}
		gb, err := gpu.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Fatalf("%s: GPU backward: %v", c, err)
		}
		eb, err := cpu.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Fatalf("%s: executor backward: %v", c, err)
		}
		for _, o := range []struct {
			name string
			a, b []float32
		}{{"y", gy, ey}, {"states", gs, es}, {"packed", gb, eb}} {
			if n := verify.NMSE(gdn.Convert[float64](o.b), gdn.Convert[float64](o.a)); !(n <= verify.MaxNMSE) {
				t.Errorf("%s: %s: GPU against executor NMSE %.3g (limit %.0e)", c, o.name, n, verify.MaxNMSE)
			}
		}
	}
}

// determinismCases are the cases the schedule tests run: head broadcast
// with q/k as strided views of a fused buffer, KDA, several row blocks,
// several sequences and snapshots; and two for the chunk kernels.
func determinismCases(t *testing.T) []verify.Case {
	var out []verify.Case
	for _, c := range verify.Matrix() {
		switch {
		case c.Family == "broadcast_strided" && c.Sk <= 64,
			c.Family == "n_seqs" && c.KDA,
			c.Family == "snapshots" && c.Snapshots == 4:
			out = append(out, c)
		}
	}
	if len(out) < 4 {
		t.Fatalf("found %d determinism cases in the matrix, want at least 4", len(out))
	}
	return append(out, chunkBarrierCases(t)...) // and the chunk kernels
}

var schedules = []exec.Schedule{
	{Policy: exec.Ascending},
	{Policy: exec.Descending},
	{Policy: exec.Random, Seed: 1},
	{Policy: exec.Random, Seed: 2, Workers: 1}, // one threadgroup at a time
	{Policy: exec.Random, Seed: 3, Workers: 3},
}

// runSchedules runs the forward and backward of p on b under every schedule
// and returns, for each, the outputs, y, states and packed gradients
// concatenated, and the first error.
func runSchedules(b *metal.Backend, p *verify.Problem[float32]) ([][]float32, error) {
	var outs [][]float32
	for _, s := range schedules {
		if err := b.SetSchedule(s); err != nil {
			return nil, err
		}
		o, err := runSchedule(b, p)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", s, err)
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// runSchedule runs the forward and backward of p on b under its schedule
// as set, and returns y, the states and the packed gradients in one slice.
func runSchedule(b *metal.Backend, p *verify.Problem[float32]) ([]float32, error) {
	y, st, err := b.Forward(&p.In, p.Opt)
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	g, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		return nil, fmt.Errorf("backward: %w", err)
	}
	return append(append(append([]float32{}, y...), st...), g...), nil
}

// differing counts the elements whose bits differ.
func differing(a, b []float32) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}

// TestMetalDeterminism: the backward twice, and under every schedule of the
// executor (ascending, descending and seeded random orders of the threads
// between barriers and of the threadgroups, with one, three or the default
// number of threadgroups at once), gives bit-identical outputs.
func TestMetalDeterminism(t *testing.T) {
	b := openExecutor(t)
	for _, c := range determinismCases(t) {
		p := verify.Build[float32](c)
		g1, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Fatal(err)
		}
		if n := differing(g1, g2); n != 0 {
			t.Errorf("%s: two runs of the backward differ in %d elements", c, n)
		}
		outs, err := runSchedules(b, p)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		for i, o := range outs[1:] {
			if n := differing(outs[0], o); n != 0 {
				t.Errorf("%s: %v differs from %v in %d elements", c, schedules[i+1], schedules[0], n)
			}
		}
	}
}

// TestMetalExecutorCatchesMissingBarrier plants a missing barrier in a copy
// of the kernel source and checks that the executor reports it: the outputs
// differ between schedules (or a schedule fails), while the source as it is
// gives identical outputs under the same schedules.
func TestMetalExecutorCatchesMissingBarrier(t *testing.T) {
	var c verify.Case
	for _, x := range verify.Matrix() {
		if x.Family == "broadcast_strided" && x.Sk == 64 {
			c = x
			break
		}
	}
	if c.Family == "" {
		t.Fatal("no broadcast_strided case at S = 64 in the matrix")
	}
	p := verify.Build[float32](c)
	src := metal.Source()
	for _, marker := range []string{"// barrier:stage", "// barrier:replay"} {
		t.Run(strings.TrimPrefix(marker, "// "), func(t *testing.T) {
			planted, err := metal.WithoutBarrier(src, strings.TrimPrefix(marker, "// barrier:"))
			if err != nil {
				t.Fatal(err)
			}
			bad, err := metal.OpenExecutorSource(planted)
			if err != nil {
				t.Fatal(err)
			}
			outs, err := runSchedules(bad, p)
			if err != nil {
				t.Logf("the executor reports the planted bug: %v", err)
				return
			}
			worst := 0
			for _, o := range outs[1:] {
				worst = max(worst, differing(outs[0], o))
			}
			if worst == 0 {
				t.Fatalf("with the barrier %q removed, every schedule gave bit-identical outputs: the executor missed the bug", marker)
			}
			t.Logf("the executor reports the planted bug: up to %d of %d output elements differ between schedules", worst, len(outs[0]))
		})
	}
}

// TestKernelResourcesNotCUDA: the kernel list is the CUDA backend's; the
// executor has no compiler's figures to give.
func TestKernelResourcesNotCUDA(t *testing.T) {
	b := openExecutor(t)
	if ks, ok := b.KernelResources(); ok || ks != nil {
		t.Errorf("executor: KernelResources = %v, %v; want nil, false", ks, ok)
	}
}
