package metal

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// splitCases have several q/k heads, so that the value heads can run in
// groups: both head mappings, q/k as views of one fused buffer, sequence
// broadcast, snapshots, KDA and the scalar gate, a partial last chunk.
func splitCases() []verify.Case {
	return verify.WithAlgo([]verify.Case{
		{Family: "split", Sk: 32, Sv: 32, Hk: 3, Rep: 2, T: 11, Seqs: 1, KDA: true, Heads: gdn.Interleave, Layout: verify.Fused, State: true, Seed: 31},
		{Family: "split", Sk: 16, Sv: 32, Hk: 3, Rep: 2, T: 9, Seqs: 2, SeqsQK: 1, Snapshots: 2, State: true, Range: verify.BackendOps, Seed: 32},
	}, gdn.Chunk, 4)
}

// TestChunkGroups: running the value heads in groups of whole q/k heads,
// one group after another in one scratch, gives the bits of running them
// all at once (every pair's sums are its own, and dq and dk sum over the
// value heads of a q/k head in the same order), forward and backward,
// with groups of one and of two q/k heads (the last group then smaller);
// the scratch is the largest group's.
func TestChunkGroups(t *testing.T) {
	for _, c := range splitCases() {
		p := verify.Build[float32](c)
		s, err := p.In.Shape(p.Opt)
		if err != nil {
			t.Fatal(err)
		}
		run := func(sp chunkSplit) (y, st, g []float32, scr int) {
			t.Helper()
			b := openExec(t)
			b.split = sp
			if y, st, err = b.Forward(&p.In, p.Opt); err != nil {
				t.Fatalf("%s, %+v: forward: %v", c, sp, err)
			}
			if g, err = b.Backward(&p.In, p.DY, p.DStates, p.Opt); err != nil {
				t.Fatalf("%s, %+v: backward: %v", c, sp, err)
			}
			return y, st, g, b.ScratchLen()
		}
		all := chunkSplit{hkg: s.Hk, ng: 1, vb: chunkRowsMin}
		wy, ws, wg, wscr := run(all)
		if want := s.Hv * s.Seqs * ChunkScratchBytes(s, c.L); wscr != want {
			t.Errorf("%s: all heads at once hold %d bytes of scratch, want %d", c, wscr, want)
		}
		for _, hkg := range []int{1, 2} {
			sp := chunkSplit{hkg: hkg, ng: (s.Hk + hkg - 1) / hkg, vb: chunkRowsMin}
			y, st, g, scr := run(sp)
			name := fmt.Sprintf("%s, groups of %d q/k heads", c, hkg)
			sameBits(t, name+": y", y, wy)
			sameBits(t, name+": states", st, ws)
			sameBits(t, name+": gradients", g, wg)
			if want := hkg * (s.Hv / s.Hk) * s.Seqs * ChunkScratchBytes(s, c.L); scr != want {
				t.Errorf("%s: %d bytes of scratch, want %d (the largest group's)", name, scr, want)
			}
		}
	}
}

// TestChunkWalkBlocks: walk blocks of 16 value rows, which the small
// calls of the other tests do not choose (they take blocks of 8), against
// the reference and finite differences, in groups and all at once.
func TestChunkWalkBlocks(t *testing.T) {
	for _, hkg := range []int{1, 3} {
		b := openExec(t)
		b.split = chunkSplit{hkg: hkg, ng: (3 + hkg - 1) / hkg, vb: chunkRows}
		runCases(t, b, splitCases())
	}
}

// sameBits fails unless got and want hold the same float32 bits.
func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s[%d] = %v, want %v bit for bit", name, i, got[i], want[i])
			return
		}
	}
}

// TestChunkSplitFor: the split under ChunkScratchLimit at the 27B shape
// and at a shape that fits.
func TestChunkSplitFor(t *testing.T) {
	for _, tc := range []struct {
		T, gw    int
		backward bool
		want     chunkSplit
	}{
		{8192, 1, true, chunkSplit{hkg: 16, ng: 1, vb: 16}},   // 2.21 GiB for all 48 value heads
		{8192, 128, true, chunkSplit{hkg: 16, ng: 1, vb: 16}}, // KDA: 2.02 GiB
		{16384, 128, true, chunkSplit{hkg: 8, ng: 2, vb: 8}},  // KDA: 4.04 GiB, two groups of 24
		{8192, 1, false, chunkSplit{hkg: 16, ng: 1, vb: 16}},  // the forward's areas: 1.79 GiB
		{4096, 128, true, chunkSplit{hkg: 16, ng: 1, vb: 16}},
	} {
		s := gdn.Shape{Sk: 128, Sv: 128, Hk: 16, Hv: 48, T: tc.T, Seqs: 1, SeqsQK: 1, GateWidth: tc.gw, Snapshots: 1}
		g := chunkGeomFor(s, gdn.Options{})
		sp := chunkSplitFor(s, g, tc.backward)
		if sp != tc.want {
			t.Errorf("T %d, gate width %d, backward %v: %+v, want %+v", tc.T, tc.gw, tc.backward, sp, tc.want)
		}
		if got := int64(sp.hkg*3) * int64(4*g.nc*chunkAreaElems(128, 128, tc.gw, g.Lp, tc.backward)); got > ChunkScratchLimit {
			t.Errorf("T %d, gate width %d, backward %v: a group's scratch %d bytes, over the limit", tc.T, tc.gw, tc.backward, got)
		}
	}
}
