package gdn

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// relRMS is the relative RMS error of x against ref: ||x - ref|| / ||ref||
// (the absolute RMS when ref is all zeros).
func relRMS(ref, x []float64) float64 {
	var num, den float64
	for i := range ref {
		d := x[i] - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	if den == 0 {
		return math.Sqrt(num / float64(max(len(ref), 1)))
	}
	return math.Sqrt(num / den)
}

// TestChunkEqualsRecurrent: in float64 the chunkwise forward and backward
// give the recurrence's outputs and gradients to rounding, at chunk lengths
// that divide T, do not, exceed it and equal 1, with both gates, head and
// sequence broadcast, permuted q/k, an initial state and several snapshots.
func TestChunkEqualsRecurrent(t *testing.T) {
	var worst float64
	for _, kda := range []bool{false, true} {
		for _, snaps := range []int{1, 3} {
			for _, heads := range []HeadMap{Tile, Interleave} {
				p := newProblem(21, 6, 5, 2, 3, 23, 1, 2, kda, heads, snaps)
				ref, err := Forward(&p.in, p.opt)
				if err != nil {
					t.Fatal(err)
				}
				gref, err := Backward(&p.in, p.dy, p.dStates, p.opt)
				if err != nil {
					t.Fatal(err)
				}
				for _, L := range []int{1, 2, 4, 7, 16, 23, 64} {
					name := fmt.Sprintf("kda=%v snaps=%d heads=%v L=%d", kda, snaps, heads, L)
					opt := p.opt
					opt.Algo, opt.ChunkLen = Chunk, L
					f, err := Forward(&p.in, opt)
					if err != nil {
						t.Fatal(err)
					}
					g, err := Backward(&p.in, p.dy, p.dStates, opt)
					if err != nil {
						t.Fatal(err)
					}
					check := func(what string, want, got []float64) {
						e := relRMS(want, got)
						if e > worst {
							worst = e
						}
						if !(e <= 1e-13) {
							t.Errorf("%s: %s: relative RMS %g against the recurrence", name, what, e)
						}
					}
					check("y", ref.Y, f.Y)
					check("states", ref.States, f.States)
					check("dq", gref.DQ, g.DQ)
					check("dk", gref.DK, g.DK)
					check("dv", gref.DV, g.DV)
					check("dg", gref.DG, g.DG)
					check("dbeta", gref.DBeta, g.DBeta)
					check("dstate", gref.DState, g.DState)
				}
			}
		}
	}
	t.Logf("worst relative RMS against the recurrence: %.3g", worst)
}

// TestChunkThreadsBitIdentical: the chunked backward gives the same bits
// for any thread count, in float32.
func TestChunkThreadsBitIdentical(t *testing.T) {
	p := toF32(newProblem(3, 8, 8, 2, 2, 13, 1, 2, true, Interleave, 3))
	for _, L := range []int{1, 4, 64} {
		opt := Options{Heads: Interleave, Snapshots: 3, Algo: Chunk, ChunkLen: L, Threads: 1}
		ref, err := Backward(&p.in, p.dy, p.dStates, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, threads := range []int{2, 3, 8} {
			opt.Threads = threads
			g, err := Backward(&p.in, p.dy, p.dStates, opt)
			if err != nil {
				t.Fatal(err)
			}
			for i := range g.Packed {
				if math.Float32bits(g.Packed[i]) != math.Float32bits(ref.Packed[i]) {
					t.Fatalf("L=%d threads=%d: packed[%d] = %g, one thread gives %g", L, threads, i, g.Packed[i], ref.Packed[i])
				}
			}
		}
	}
}

// TestChunkStrongGates: with gates far below test-backend-ops' -20 per
// token (so that a chunk's cumulative log decay reaches -6400, and the
// factored form exp(G_r) exp(-G_s) would overflow), the chunked results
// stay finite and equal to the recurrence's, in float64 and float32.
func TestChunkStrongGates(t *testing.T) {
	for _, kda := range []bool{false, true} {
		p := newProblem(8, 6, 5, 1, 2, 70, 1, 1, kda, Tile, 2)
		for i := range p.in.G.Data {
			p.in.G.Data[i] = -100 * float64(i%3) // 0, -100, -200: some tokens keep everything
		}
		opt := p.opt
		opt.Algo = Chunk
		check := func(prec string, want, got []float64) {
			for i, x := range got {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("kda=%v %s: element %d is %g", kda, prec, i, x)
				}
			}
			limit := 1e-12
			if prec == "f32" {
				limit = 1e-6
			}
			if e := relRMS(want, got); !(e <= limit) {
				t.Errorf("kda=%v %s: relative RMS %g against the float64 recurrence", kda, prec, e)
			}
		}
		ref, err := Backward(&p.in, p.dy, p.dStates, p.opt)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Backward(&p.in, p.dy, p.dStates, opt)
		if err != nil {
			t.Fatal(err)
		}
		check("f64", ref.Packed, g.Packed)
		p32 := toF32(p)
		g32, err := Backward(&p32.in, p32.dy, p32.dStates, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, len(g32.Packed))
		for i, x := range g32.Packed {
			got[i] = float64(x)
		}
		check("f32", ref.Packed, got)
	}
}

// TestChunkBadOptions: an unknown algorithm and a negative chunk length
// are errors naming the option.
func TestChunkBadOptions(t *testing.T) {
	p := newProblem(1, 4, 4, 1, 1, 3, 1, 1, false, Tile, 1)
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{Algo: Algo(7)}, "algo"},
		{Options{Algo: Chunk, ChunkLen: -1}, "chunk length L = -1"},
	} {
		if _, err := Forward(&p.in, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.opt, err, c.want)
		}
		if _, err := Backward(&p.in, p.dy, nil, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: backward error %v, want one naming %q", c.opt, err, c.want)
		}
	}
	if a, err := ParseAlgo("chunk"); err != nil || a != Chunk || a.String() != "chunk" {
		t.Errorf("ParseAlgo(chunk) = %v, %v", a, err)
	}
	if _, err := ParseAlgo("wy"); err == nil {
		t.Errorf("ParseAlgo(wy) gave no error")
	}
}

// TestChunkStarts: chunks of L from the start, a final partial chunk, and
// every snapshot token ending a chunk.
func TestChunkStarts(t *testing.T) {
	for _, c := range []struct {
		T, L, K int
		want    []int
	}{
		{10, 4, 1, []int{0, 4, 8, 10}},
		{8, 4, 1, []int{0, 4, 8}},
		{3, 64, 1, []int{0, 3}},
		{10, 4, 3, []int{0, 4, 8, 9, 10}}, // tokens 7 (T-3), 8 and 9 end chunks
		{5, 1, 5, []int{0, 1, 2, 3, 4, 5}},
	} {
		if got := chunkStarts(c.T, c.L, c.K); !slices.Equal(got, c.want) {
			t.Errorf("chunkStarts(T %d, L %d, K %d) = %v, want %v", c.T, c.L, c.K, got, c.want)
		}
	}
}

// TestChunkScratchBytes: at the 27B shape (S 128, T 8192, L 64, float32)
// the chunk backward holds 128 chunk-boundary states and dM, 129 states of
// 128*128*4 = 65536 bytes (8454144 bytes), plus one chunk's rows: 11 rows
// of [64][S_k], 8 of [64][S_v], four 64 x 64 matrices, four [S_k] vectors,
// two [64] and dg and its running sum for a scalar gate, 64 + 1 (172737
// floats, 690948 bytes), plus 65 float64 for the decays and their running
// product (520 bytes): 9145612 bytes, 8.72 MiB, under the checkpointed
// recurrence's 11.4 MiB.
func TestChunkScratchBytes(t *testing.T) {
	s := Shape{Sk: 128, Sv: 128, Hk: 16, Hv: 48, T: 8192, Seqs: 1, SeqsQK: 1, GateWidth: 1, Snapshots: 1}
	if got, want := ChunkScratchBytes[float32](s, 64), 9145612; got != want {
		t.Errorf("ChunkScratchBytes = %d, want %d", got, want)
	}
	if c, r := ChunkScratchBytes[float32](s, 0), ScratchBytes[float32](128, 128, 8192, 91); c >= r {
		t.Errorf("chunk scratch %d bytes is not below the recurrent %d", c, r)
	}
	if got := ChunkCount(8192, 64, 1); got != 128 {
		t.Errorf("ChunkCount(8192, 64, 1) = %d, want 128", got)
	}
}
