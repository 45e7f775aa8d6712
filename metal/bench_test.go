package metal

import (
	"flag"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

var (
	benchKind = flag.String("bench.kind", Auto, "Metal backend kind for the benchmarks: auto, gpu or executor")
	benchS    = flag.Int("bench.S", 0, "head size S_k = S_v (0: 128 on the GPU, 32 on the executor)")
	benchHk   = flag.Int("bench.hk", 0, "q/k heads (0: 16 on the GPU, 1 on the executor)")
	benchHv   = flag.Int("bench.hv", 0, "value heads, a multiple of -bench.hk (0: 48 on the GPU, 3 on the executor)")
	benchT    = flag.Int("bench.T", 0, "tokens (0: 8192 on the GPU, 64 on the executor)")
	benchKDA  = flag.Bool("bench.kda", false, "per-channel (KDA) gate")
)

// benchProblem opens the backend and builds the benchmark's problem: the
// 27B shape on the GPU, a small one on the executor (which runs one OS
// thread per GPU thread and is slow), or the -bench.* flags.
func benchProblem(b *testing.B) (*Backend, *verify.Problem[float32]) {
	be, err := Open(*benchKind)
	if err != nil {
		b.Fatal(err)
	}
	S, hk, hv, T := 128, 16, 48, 8192
	if be.Kind() == Executor {
		S, hk, hv, T = 32, 1, 3, 64
	}
	for _, f := range []struct {
		dst *int
		v   int
	}{{&S, *benchS}, {&hk, *benchHk}, {&hv, *benchHv}, {&T, *benchT}} {
		if f.v > 0 {
			*f.dst = f.v
		}
	}
	if hv%hk != 0 {
		b.Fatalf("-bench.hv %d is not a multiple of -bench.hk %d", hv, hk)
	}
	c := verify.Case{Family: "bench", Sk: S, Sv: S, Hk: hk, Rep: hv / hk, T: T, Seqs: 1,
		KDA: *benchKDA, Heads: gdn.Tile, Layout: verify.Fused, State: true, Seed: 1}
	p := verify.Build[float32](c)
	s, err := p.In.Shape(p.Opt)
	if err != nil {
		b.Fatal(err)
	}
	if err := be.Supports(s, p.Opt); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: S %d, H_k %d, H_v %d, T %d, KDA %v, q/k/v fused", be.Name(), S, hk, hv, T, *benchKDA)
	return be, p
}

// BenchmarkForward measures the forward; token-heads/s is T*H_v per second.
func BenchmarkForward(b *testing.B) {
	be, p := benchProblem(b)
	if _, _, err := be.Forward(&p.In, p.Opt); err != nil { // compile and warm up
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := be.Forward(&p.In, p.Opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.Case.T*p.Case.Hv())*float64(b.N)/b.Elapsed().Seconds(), "token-heads/s")
}

// BenchmarkBackward measures the checkpointed backward (C = ceil(sqrt(T))).
func BenchmarkBackward(b *testing.B) {
	be, p := benchProblem(b)
	if _, err := be.Backward(&p.In, p.DY, p.DStates, p.Opt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := be.Backward(&p.In, p.DY, p.DStates, p.Opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.Case.T*p.Case.Hv())*float64(b.N)/b.Elapsed().Seconds(), "token-heads/s")
	b.ReportMetric(float64(be.ScratchLen()), "scratch-bytes")
}
