//go:build linux

package metal

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
	"github.com/gdnback/gdnback/verify"
)

var (
	cudaReal = flag.Int("cuda.realT", 0, "TestCUDARealShape: tokens of the 27B-shape cases against the float64 CPU reference (0: skip; 8192 is the model's)")
)

// openCUDA opens the CUDA backend, or skips the test where there is no
// NVIDIA GPU.
func openCUDAOrSkip(t *testing.T) *Backend {
	t.Helper()
	b, err := Open(CUDA)
	if errors.Is(err, ErrNoCUDA) {
		t.Skipf("no NVIDIA GPU here (%v); the CUDA runner's GPU-free logic has its own tests", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backend %s", b.Name())
	return b
}

// TestCUDACompileError: a source NVRTC rejects fails to open, with
// NVRTC's log in the error.
func TestCUDACompileError(t *testing.T) {
	openCUDAOrSkip(t)
	bad := append(Source(), "\nstatic_assert(sizeof(gdn_args) == 3, \"gdn-cuda-compile-test\");\n"...)
	_, err := openCUDA(bad)
	if err == nil || !strings.Contains(err.Error(), "NVRTC") || !strings.Contains(err.Error(), "gdn-cuda-compile-test") {
		t.Errorf("opening a source that does not compile: %v", err)
	} else {
		t.Logf("the error:\n%v", err)
	}
}

// TestCUDAScratch: the scratch is ShapeScratchBytes of the largest call so
// far and kept for smaller ones; the peak counts it with the buffers of the
// call's inputs, outputs and args, also kept.
func TestCUDAScratch(t *testing.T) {
	b := openCUDAOrSkip(t)
	big := verify.Case{Family: "x", Sk: 64, Sv: 128, Hk: 2, Rep: 3, T: 50, Seqs: 2, C: 7, KDA: true, Seed: 3}
	small := verify.Case{Family: "x", Sk: 16, Sv: 16, Hk: 1, Rep: 1, T: 4, Seqs: 1, Seed: 2}
	pb := verify.Build[float32](big)
	if _, err := b.Backward(&pb.In, pb.DY, pb.DStates, pb.Opt); err != nil {
		t.Fatal(err)
	}
	s, _ := pb.In.Shape(pb.Opt)
	want := b.ScratchBytes(s, pb.Opt) * s.Hv * s.Seqs
	if got := b.ScratchLen(); got != want {
		t.Errorf("scratch after the big call: %d bytes, want %d", got, want)
	}
	st, ok := b.DeviceStats()
	pl, err := newPlan(&pb.In, pb.DY, pb.DStates, pb.Opt, true)
	if err != nil {
		t.Fatal(err)
	}
	if minPeak := int64(want + 4*len(pl.src) + 4*pl.dstLen + len(pl.args)); !ok || st.PeakBytes < minPeak || st.LastKernelTime <= 0 {
		t.Errorf("stats %+v (ok %v), want a peak of at least %d bytes and a kernel time", st, ok, minPeak)
	}
	b.ResetPeak()
	ps := verify.Build[float32](small)
	if _, err := b.Backward(&ps.In, ps.DY, ps.DStates, ps.Opt); err != nil {
		t.Fatal(err)
	}
	if got := b.ScratchLen(); got != want {
		t.Errorf("scratch after a smaller call: %d bytes, want it kept at %d", got, want)
	}
	// The smaller call fits the kept buffers: nothing new is allocated.
	if st2, _ := b.DeviceStats(); st2.PeakBytes != st.PeakBytes {
		t.Errorf("peak after ResetPeak and a smaller call %d, want the kept %d", st2.PeakBytes, st.PeakBytes)
	}
}

var cudaAlgo = flag.String("cuda.algo", "recurrent", "TestCUDARealShape: the kernels to hold to the float64 reference: recurrent, chunk or all")

// TestCUDARealShape runs the 27B shape (S 128, H_k 16, H_v 48) at
// -cuda.realT tokens on the GPU in float32 against the float64 CPU
// reference on every core: KDA and scalar gate, interleaved and tiled
// heads, q/k/v as row views of one fused buffer, a random initial state.
// -cuda.algo picks the kernels: the token-serial ones (recurrent, the
// default), the chunk kernels (chunk, L = gdn.DefaultChunkLen) or both
// against one reference per case. It reports the relative RMS error of
// each output (verify.RMSRatio: RMS(got - want) / RMS(want) over the
// whole tensor), limit 1e-5, and per algorithm and gate the worst of each
// output over the head mappings.
func TestCUDARealShape(t *testing.T) {
	if *cudaReal == 0 {
		t.Skip("-cuda.realT not set (8192 for the model's length)")
	}
	var algos []gdn.Algo
	switch *cudaAlgo {
	case "all":
		algos = []gdn.Algo{gdn.Recurrent, gdn.Chunk}
	default:
		a, err := gdn.ParseAlgo(*cudaAlgo)
		if err != nil {
			t.Fatalf("-cuda.algo %q: want recurrent, chunk or all", *cudaAlgo)
		}
		algos = []gdn.Algo{a}
	}
	b := openCUDAOrSkip(t)
	names := append([]string{"y", "states"}, gdn.BlockNames[:]...)
	for _, kda := range []bool{false, true} {
		gate := "scalar"
		if kda {
			gate = "kda"
		}
		worst := make([][]float64, len(algos)) // [algo][output]
		for i := range worst {
			worst[i] = make([]float64, len(names))
		}
		for _, heads := range []gdn.HeadMap{gdn.Interleave, gdn.Tile} {
			c := verify.Case{Family: "27b", Sk: 128, Sv: 128, Hk: 16, Rep: 3, T: *cudaReal, Seqs: 1, KDA: kda,
				Heads: heads, Layout: verify.Fused, State: true, Range: verify.Gentle, Seed: 27}
			t0 := time.Now()
			p64 := verify.Build[float64](c)
			p64.Opt.Threads = runtime.NumCPU()
			f, err := gdn.Forward(&p64.In, p64.Opt)
			if err != nil {
				t.Fatal(err)
			}
			g, err := gdn.Backward(&p64.In, p64.DY, p64.DStates, p64.Opt)
			if err != nil {
				t.Fatal(err)
			}
			cpu := time.Since(t0)
			want := g.Blocks()
			p := verify.Build[float32](c)
			for ai, algo := range algos {
				opt := p.Opt
				opt.Algo = algo
				y, states, err := b.Forward(&p.In, opt)
				if err != nil {
					t.Fatalf("%s, algo %s: %v", c, algo, err)
				}
				fwMS := mustStats(b).LastKernelTime
				packed, err := b.Backward(&p.In, p.DY, p.DStates, opt)
				if err != nil {
					t.Fatalf("%s, algo %s: %v", c, algo, err)
				}
				bwMS := mustStats(b).LastKernelTime
				got, err := gdn.NewGrads(g.Shape, packed)
				if err != nil {
					t.Fatal(err)
				}
				errs := []float64{verify.RMSRatio(f.Y, to64(y)), verify.RMSRatio(f.States, to64(states))}
				for i, blk := range got.Blocks() {
					errs = append(errs, verify.RMSRatio(want[i], to64(blk)))
				}
				t.Logf("%s, algo %s: relative RMS %s; GPU forward %.2f ms, backward %.2f ms; float64 CPU reference (%d threads) %v",
					c, algo, rmsList(names, errs), fwMS, bwMS, p64.Opt.Threads, cpu.Round(time.Millisecond))
				for i, e := range errs {
					if !(e <= 1e-5) { // NaN fails too
						t.Errorf("%s, algo %s: relative RMS of %s %.3g, limit 1e-5", c, algo, names[i], e)
					}
					worst[ai][i] = max(worst[ai][i], e)
				}
				if algo == gdn.Chunk {
					cudaKeptCheck(t, b, p, opt, c.String(), [3][]float32{y, states, packed})
				}
			}
		}
		for ai, algo := range algos {
			t.Logf("27B shape, T %d, algo %s, gate %s, float32 against float64: worst relative RMS %s", *cudaReal, algo, gate, rmsList(names, worst[ai]))
		}
	}
}

// cudaKeptCheck runs ForwardKeep and BackwardKept on p and compares y, the
// states and the packed gradients with Forward's and Backward's (want):
// the same bits where the CUDA compiler built the forward's prep and the
// backward's alike (A, P and X are formed by the same lines in both), and
// within 1e-6 relative RMS of them where it did not; it logs which, and
// the kept pair's GPU times.
func cudaKeptCheck(t *testing.T, b *Backend, p *verify.Problem[float32], opt gdn.Options, name string, want [3][]float32) {
	t.Helper()
	y, states, k, err := b.ForwardKeep(&p.In, opt)
	if err != nil {
		t.Fatalf("%s: ForwardKeep: %v", name, err)
	}
	fwMS := mustStats(b).LastKernelTime
	packed, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, opt)
	if err != nil {
		t.Fatalf("%s: BackwardKept: %v", name, err)
	}
	bwMS := mustStats(b).LastKernelTime
	what := [3]string{"y", "states", "gradients"}
	var parts []string
	for i, got := range [3][]float32{y, states, packed} {
		parts = append(parts, keptDiff(t, name, what[i], got, want[i]))
	}
	t.Logf("%s, kept (ForwardKeep, BackwardKept): %s; GPU forward %.2f ms, backward %.2f ms", name, strings.Join(parts, ", "), fwMS, bwMS)

	// Two slots (KeepSlots): two forwards kept at once, a Backward
	// between, then both backwards, the second first (at T 8192 the second
	// slot starts 288 MiB into the scratch, the areas 576 MiB).
	if err := b.KeepSlots(2, &p.In, opt); err != nil {
		t.Fatalf("%s: KeepSlots: %v", name, err)
	}
	defer b.KeepSlots(0, nil, opt)
	var ks [2]*Kept
	for i := range ks {
		if _, _, ks[i], err = b.ForwardKeep(&p.In, opt); err != nil {
			t.Fatalf("%s: ForwardKeep into slot %d: %v", name, i, err)
		}
	}
	if _, err := b.Backward(&p.In, p.DY, p.DStates, opt); err != nil {
		t.Fatalf("%s: Backward between the slots' pairs: %v", name, err)
	}
	parts = parts[:0]
	for _, i := range []int{1, 0} {
		got, err := b.BackwardKept(ks[i], &p.In, p.DY, p.DStates, opt)
		if err != nil {
			t.Fatalf("%s: BackwardKept of slot %d: %v", name, i, err)
		}
		parts = append(parts, keptDiff(t, name, fmt.Sprintf("slot %d's gradients", i), got, want[2]))
	}
	t.Logf("%s, kept in two slots (KeepSlots): %s", name, strings.Join(parts, ", "))
}

// keptDiff says how a kept pair's output got differs from want (the pair
// that forms A, P and X twice): the same bits, or how many values differ
// and their relative RMS, an error past 1e-6.
func keptDiff(t *testing.T, name, what string, got, want []float32) string {
	t.Helper()
	diff := 0
	for j := range got {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			diff++
		}
	}
	if diff == 0 {
		return what + " the same bits"
	}
	e := verify.RMSRatio(to64(want), to64(got))
	if !(e <= 1e-6) {
		t.Errorf("%s: kept %s against the pair that forms A, P and X twice: relative RMS %.3g, limit 1e-6", name, what, e)
	}
	return fmt.Sprintf("%s %d values differ, relative RMS %.2g", what, diff, e)
}

// rmsList formats "name1 e1, name2 e2, ...".
func rmsList(names []string, errs []float64) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = fmt.Sprintf("%s %.2g", names[i], e)
	}
	return strings.Join(parts, ", ")
}

func mustStats(b *Backend) DeviceStats {
	s, _ := b.DeviceStats()
	return s
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestCUDAHeadSizes runs the head sizes the matrix leaves out on the GPU
// (S_k 256, whose kernels keep 8 columns per lane, and S_k != S_v at the
// extremes) against the reference, with finite differences.
func TestCUDAHeadSizes(t *testing.T) {
	runCases(t, openCUDAOrSkip(t), []verify.Case{
		{Family: "head_size", Sk: 256, Sv: 256, Hk: 1, Rep: 2, T: 9, Seqs: 1, C: 4, KDA: true, Heads: gdn.Interleave, Layout: verify.Fused, State: true, Seed: 11},
		{Family: "head_size", Sk: 256, Sv: 64, Hk: 2, Rep: 1, T: 6, Seqs: 2, C: 4, Snapshots: 2, State: true, Range: verify.BackendOps, Seed: 12},
		{Family: "head_size", Sk: 64, Sv: 256, Hk: 1, Rep: 3, T: 5, Seqs: 1, C: 2, KDA: true, Seed: 13},
	})
}

var cudaDrop = flag.String("cuda.drop", "", "TestCUDAPlantedBarrier: the barrier (stage or replay) to remove, for compute-sanitizer racecheck to find")

// TestCUDAPlantedBarrier runs, with -cuda.drop NAME, a copy of gdn.metal
// without the barrier marked "// barrier:NAME" on cases that need it, so
// that compute-sanitizer's racecheck, run around this test, can show the
// race. It checks that exactly one barrier was removed and that the copy
// compiled and ran; what the numbers do is logged (a race need not show
// in them on one run).
func TestCUDAPlantedBarrier(t *testing.T) {
	if *cudaDrop == "" {
		t.Skip("-cuda.drop not set (stage or replay)")
	}
	openCUDAOrSkip(t)
	src, err := WithoutBarrier(source, *cudaDrop)
	if err != nil {
		t.Fatal(err)
	}
	e, err := openCUDA(src)
	if err != nil {
		t.Fatal(err)
	}
	marker := "// barrier:" + *cudaDrop
	b := &Backend{eng: e, kind: CUDA}
	for _, c := range []verify.Case{
		{Family: "broadcast_strided", Sk: 64, Sv: 64, Hk: 1, Rep: 3, T: 5, Seqs: 1, C: 2, KDA: true, Heads: gdn.Interleave, Layout: verify.Fused, State: true, Range: verify.BackendOps, Seed: 5},
		{Family: "head_size", Sk: 128, Sv: 128, Hk: 1, Rep: 1, T: 7, Seqs: 1, C: 3, State: true, Seed: 6},
	} {
		ref, err := verify.NewReference(c)
		if err != nil {
			t.Fatal(err)
		}
		r := verify.Run(b, ref)
		if r.Err != nil {
			t.Fatalf("%s without %s: %v", c, marker, r.Err)
		}
		t.Logf("without %s: %s", marker, r.Line())
	}
}

// TestCUDAKernelResources: the backend reports every kernel of gdn.metal,
// in its order, with the registers NVRTC gave it (within the 255 a thread
// may have) and room for a threadgroup of 8 simdgroups. -test.v logs each
// kernel's registers and local memory, the figures gdn bench prints.
func TestCUDAKernelResources(t *testing.T) {
	b := openCUDAOrSkip(t)
	want, err := cudaKernels(source)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := b.KernelResources()
	if !ok {
		t.Fatal("KernelResources: ok is false for the CUDA backend")
	}
	if len(got) != len(want) {
		t.Fatalf("KernelResources: %d kernels, gdn.metal has %d", len(got), len(want))
	}
	for i, k := range got {
		if k.Name != want[i].name {
			t.Errorf("kernel %d: %s, gdn.metal's is %s", i, k.Name, want[i].name)
		}
		if k.Registers < 1 || k.Registers > 255 {
			t.Errorf("%s: %d registers a thread, outside 1 to 255", k.Name, k.Registers)
		}
		if k.MaxThreads < maxSimdgroups*simdWidth {
			t.Errorf("%s: at most %d threads a block, the kernels need %d", k.Name, k.MaxThreads, maxSimdgroups*simdWidth)
		}
		if k.LocalBytes < 0 || k.SharedStatic < 0 {
			t.Errorf("%s: the driver did not give its local or shared memory: %+v", k.Name, k)
		}
		t.Logf("%-28s %3d registers, %5d B local, %6d B static shared, %4d threads", k.Name, k.Registers, k.LocalBytes, k.SharedStatic, k.MaxThreads)
	}
}
