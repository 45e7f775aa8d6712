package gdn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchInputs builds a contiguous float32 problem at S_k = S_v = s, h value
// heads (one q/k head each), T tokens, one sequence, scalar gate.
func benchInputs(s, h, T int) (*Inputs[float32], Tensor[float32]) {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int, lo, hi float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = lo + (hi-lo)*rng.Float32()
		}
		return x
	}
	in := &Inputs[float32]{
		Q:    Contiguous(fill(s*h*T, -0.1, 0.1), [4]int{s, h, T, 1}),
		K:    Contiguous(fill(s*h*T, -0.1, 0.1), [4]int{s, h, T, 1}),
		V:    Contiguous(fill(s*h*T, -1, 1), [4]int{s, h, T, 1}),
		G:    Contiguous(fill(h*T, -1, -0.01), [4]int{1, h, T, 1}),
		Beta: Contiguous(fill(h*T, 0, 1), [4]int{1, h, T, 1}),
	}
	dy := Contiguous(fill(s*h*T, -1, 1), [4]int{s, h, T, 1})
	return in, dy
}

// The shape: S = 128, H_v = 8, T in {1024, 8192}, float32. Each
// benchmark reports token-heads per second and the backward's scratch per
// (head, seq); run both modes in one invocation to compare them:
//
//	go test ./gdn -run '^$' -bench . -benchtime 3x
func BenchmarkForward(b *testing.B) {
	for _, T := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("S=128/H=8/T=%d", T), func(b *testing.B) {
			in, _ := benchInputs(128, 8, T)
			s, _ := in.Shape(Options{})
			y, st := make([]float32, s.YLen()), make([]float32, s.StatesLen())
			b.ResetTimer()
			for b.Loop() {
				if _, err := ForwardInto(y, st, in, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(T*8*b.N)/b.Elapsed().Seconds(), "token-heads/s")
		})
	}
}

func BenchmarkBackward(b *testing.B) {
	for _, T := range []int{1024, 8192} {
		for _, keep := range []bool{false, true} {
			mode := "checkpointed"
			if keep {
				mode = "keepall"
			}
			b.Run(fmt.Sprintf("S=128/H=8/T=%d/%s", T, mode), func(b *testing.B) {
				in, dy := benchInputs(128, 8, T)
				opt := Options{KeepAll: keep}
				s, _ := in.Shape(opt)
				packed := make([]float32, s.Layout().Total)
				b.ResetTimer()
				for b.Loop() {
					if _, err := BackwardInto(packed, in, dy, nil, opt); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(T*8*b.N)/b.Elapsed().Seconds(), "token-heads/s")
				b.ReportMetric(float64(ScratchBytes[float32](128, 128, T, opt.SegmentLength(T))), "scratch-bytes/head")
				b.ReportMetric(float64(ScratchStates(T, opt.SegmentLength(T))), "scratch-states/head")
			})
		}
	}
}

// BenchmarkChunk: the chunkwise algorithm at the same shapes, forward and
// backward, scalar gate and KDA (the KDA gate repeats the scalar one over
// the key channels, so the arithmetic is the same but every decay is a
// vector):
//
//	go test ./gdn -run '^$' -bench Chunk -benchtime 3x
func BenchmarkChunk(b *testing.B) {
	for _, T := range []int{1024, 8192} {
		for _, kda := range []bool{false, true} {
			in, dy := benchInputs(128, 8, T)
			gate := "scalar"
			if kda {
				gate = "kda"
				g := make([]float32, 128*8*T)
				for i := range g {
					g[i] = in.G.Data[i/128]
				}
				in.G = Contiguous(g, [4]int{128, 8, T, 1})
			}
			opt := Options{Algo: Chunk}
			s, _ := in.Shape(opt)
			b.Run(fmt.Sprintf("S=128/H=8/T=%d/%s/forward", T, gate), func(b *testing.B) {
				y, st := make([]float32, s.YLen()), make([]float32, s.StatesLen())
				for b.Loop() {
					if _, err := ForwardInto(y, st, in, opt); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(T*8*b.N)/b.Elapsed().Seconds(), "token-heads/s")
			})
			b.Run(fmt.Sprintf("S=128/H=8/T=%d/%s/backward", T, gate), func(b *testing.B) {
				packed := make([]float32, s.Layout().Total)
				for b.Loop() {
					if _, err := BackwardInto(packed, in, dy, nil, opt); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(T*8*b.N)/b.Elapsed().Seconds(), "token-heads/s")
				b.ReportMetric(float64(ChunkScratchBytes[float32](s, DefaultChunkLen)), "scratch-bytes/head")
			})
		}
	}
}
