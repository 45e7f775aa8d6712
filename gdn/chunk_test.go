package gdn

import (
	"fmt"
	"math"
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
