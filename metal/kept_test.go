package metal

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// keptCases are splitCases (groups of q/k heads, both head maps, fused
// q/k/v, sequence broadcast, snapshots, a partial last chunk) and two of
// one q/k head: KDA with S_k != S_v and an initial state, and the scalar
// gate with chunks of 8 rows over T 20.
func keptCases() []verify.Case {
	return append(splitCases(), verify.WithAlgo([]verify.Case{
		{Family: "kept", Sk: 16, Sv: 32, Hk: 1, Rep: 2, T: 10, Seqs: 1, KDA: true, State: true, Range: verify.BackendOps, Seed: 41},
		{Family: "kept", Sk: 32, Sv: 16, Hk: 1, Rep: 1, T: 20, Seqs: 2, State: true, Snapshots: 3, Seed: 42},
	}, gdn.Chunk, 8)...)
}

// TestChunkKeptBits: ForwardKeep gives Forward's y and states, and
// BackwardKept after it Backward's packed gradients, bit for bit, with the
// value heads all at once and in groups of one q/k head; all at once, the
// pair holds the scratch Backward alone holds (A, P and X are out of the
// areas, not beside them), in groups the backward's group scratch plus the
// other groups' kept matrices.
func TestChunkKeptBits(t *testing.T) {
	for _, c := range keptCases() {
		p := verify.Build[float32](c)
		s, err := p.In.Shape(p.Opt)
		if err != nil {
			t.Fatal(err)
		}
		g := chunkGeomFor(s, p.Opt)
		rep := s.Hv / s.Hk
		for _, hkg := range []int{s.Hk, 1} {
			if hkg == 1 && s.Hk == 1 {
				continue
			}
			sp := chunkSplit{hkg: hkg, ng: (s.Hk + hkg - 1) / hkg, vb: chunkRowsMin}
			name := fmt.Sprintf("%s, groups of %d q/k heads", c, hkg)
			b := openExec(t)
			b.split = sp
			wy, ws, err := b.Forward(&p.In, p.Opt)
			if err != nil {
				t.Fatalf("%s: forward: %v", name, err)
			}
			wg, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
			if err != nil {
				t.Fatalf("%s: backward: %v", name, err)
			}
			k2 := openExec(t)
			k2.split = sp
			y, st, k, err := k2.ForwardKeep(&p.In, p.Opt)
			if err != nil {
				t.Fatalf("%s: ForwardKeep: %v", name, err)
			}
			held := k2.ScratchLen()
			gr, err := k2.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt)
			if err != nil {
				t.Fatalf("%s: BackwardKept: %v", name, err)
			}
			sameBits(t, name+": y", y, wy)
			sameBits(t, name+": states", st, ws)
			sameBits(t, name+": gradients", gr, wg)
			others := (s.Hk - hkg) * rep * s.Seqs * g.nc * 4 * 3 * g.Lp * g.Lp
			if want := hkg*rep*s.Seqs*ChunkScratchBytes(s, c.L) + others; held != want || k2.ScratchLen() != want {
				t.Errorf("%s: the scratch %d bytes after ForwardKeep, %d after BackwardKept, want %d", name, held, k2.ScratchLen(), want)
			}
		}
	}
}

// TestChunkKeptRefuses: a BackwardKept whose Kept does not name the
// matrices the Backend holds, or whose q, k, g, beta, shape or chunking are
// not the forward's, is an error that says which (ErrKept), and the
// Backend holds the matrices still where nothing ran; v, dy and the scale
// may differ, with Backward's bits for the inputs given. Nothing the
// caller passed is modified.
func TestChunkKeptRefuses(t *testing.T) {
	c := keptCases()[0]
	p := verify.Build[float32](c)
	orig := verify.Build[float32](c)
	with := func(f func(in *gdn.Inputs[float32])) *gdn.Inputs[float32] {
		in := p.In
		in.Q.Data, in.K.Data, in.V.Data = slices.Clone(in.Q.Data), slices.Clone(in.K.Data), slices.Clone(in.V.Data)
		in.G.Data, in.Beta.Data = slices.Clone(in.G.Data), slices.Clone(in.Beta.Data)
		f(&in)
		return &in
	}
	other := p.Opt
	other.ChunkLen = 2
	for _, tc := range []struct {
		name string
		in   *gdn.Inputs[float32]
		opt  gdn.Options
		want string
	}{
		{"q", with(func(in *gdn.Inputs[float32]) { in.Q.Data[in.Q.Off] += 0.5 }), p.Opt, "q is not the forward's"},
		{"k", with(func(in *gdn.Inputs[float32]) { in.K.Data[in.K.Off+in.K.Nb[2]] *= 2 }), p.Opt, "k is not the forward's"},
		{"g", with(func(in *gdn.Inputs[float32]) { in.G.Data[in.G.Off] -= 0.25 }), p.Opt, "g is not the forward's"},
		{"beta", with(func(in *gdn.Inputs[float32]) { in.Beta.Data[len(in.Beta.Data)-1] /= 2 }), p.Opt, "beta is not the forward's"},
		{"chunk length", &p.In, other, "chunk length 2, the forward's 4"},
	} {
		b := openExec(t)
		_, _, k, err := b.ForwardKeep(&p.In, p.Opt)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.BackwardKept(k, tc.in, p.DY, p.DStates, tc.opt)
		if !errors.Is(err, ErrKept) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrKept saying %q", tc.name, err, tc.want)
		}
		// nothing ran: the matrices serve the forward's inputs still
		got, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Errorf("%s: BackwardKept after the refusal: %v", tc.name, err)
		} else if want, err := openExec(t).Backward(&p.In, p.DY, p.DStates, p.Opt); err != nil {
			t.Fatal(err)
		} else {
			sameBits(t, tc.name+": gradients after the refusal", got, want)
		}
	}

	// What ends a Kept: any other call, a BackwardKept already run, and
	// a Kept of another Backend; nil; and the recurrent algorithm.
	b, b2 := openExec(t), openExec(t)
	_, _, k, err := b.ForwardKeep(&p.In, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) {
		t.Errorf("a Kept of another Backend: %v, want ErrKept", err)
	}
	if _, _, err := b.Forward(&p.In, p.Opt); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) || !strings.Contains(err.Error(), "another call") {
		t.Errorf("after a Forward: %v, want ErrKept saying another call ran", err)
	}
	_, _, k, err = b.ForwardKeep(&p.In, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) {
		t.Errorf("a Kept that served once: %v, want ErrKept", err)
	}
	if _, err := b.BackwardKept(nil, &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) {
		t.Errorf("a nil Kept: %v, want ErrKept", err)
	}
	rec := p.Opt
	rec.Algo = gdn.Recurrent
	if _, _, _, err := b.ForwardKeep(&p.In, rec); err == nil || !strings.Contains(err.Error(), "only the chunk kernels") {
		t.Errorf("ForwardKeep, recurrent: %v, want a refusal", err)
	}

	// v, dy and the scale are not in A, P and X: Backward's bits for the
	// ones given.
	in := with(func(in *gdn.Inputs[float32]) { in.V.Data[in.V.Off] += 1 })
	dy := p.DY
	dy.Data = slices.Clone(dy.Data)
	dy.Data[dy.Off] -= 1
	opt := p.Opt
	opt.Scale = 0.3
	_, _, k, err = b.ForwardKeep(&p.In, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.BackwardKept(k, in, dy, p.DStates, opt)
	if err != nil {
		t.Fatalf("other v, dy and scale: %v", err)
	}
	want, err := openExec(t).Backward(in, dy, p.DStates, opt)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "other v, dy and scale", got, want)

	for _, x := range []struct {
		name      string
		got, want []float32
	}{{"q", p.In.Q.Data, orig.In.Q.Data}, {"k", p.In.K.Data, orig.In.K.Data}, {"v", p.In.V.Data, orig.In.V.Data},
		{"g", p.In.G.Data, orig.In.G.Data}, {"beta", p.In.Beta.Data, orig.In.Beta.Data}, {"dy", p.DY.Data, orig.DY.Data}} {
		sameBits(t, "the caller's "+x.name+" after the calls", x.got, x.want)
	}
}

// TestChunkKeepSlots: with KeepSlots(n), n ForwardKeep calls keep their
// matrices at once, across other calls of the chunk kernels, and each
// BackwardKept, last layer first, gives Backward's bits; a freed slot
// serves again. A ForwardKeep with every slot held, or larger than a slot,
// is refused and runs nothing; a recurrent call, a call that grows the
// scratch, and KeepSlots end every Kept; KeepSlots(0) is the default again.
func TestChunkKeepSlots(t *testing.T) {
	for _, c := range keptCases()[len(keptCases())-2:] { // one q/k head: KDA, and the scalar gate with snapshots
		var layers []*verify.Problem[float32]
		for i := range 3 {
			lc := c
			lc.Seed += uint64(100 * i)
			layers = append(layers, verify.Build[float32](lc))
		}
		p := layers[0]
		want := make([][]float32, len(layers))
		for i, l := range layers {
			var err error
			if want[i], err = openExec(t).Backward(&l.In, l.DY, l.DStates, l.Opt); err != nil {
				t.Fatal(err)
			}
		}
		s, err := p.In.Shape(p.Opt)
		if err != nil {
			t.Fatal(err)
		}

		b := openExec(t)
		if err := b.KeepSlots(2, &p.In, p.Opt); err != nil {
			t.Fatalf("%s: KeepSlots: %v", c, err)
		}
		ks := make([]*Kept, 2)
		for i := range ks {
			wy, ws, err := openExec(t).Forward(&layers[i].In, layers[i].Opt)
			if err != nil {
				t.Fatal(err)
			}
			y, st, k, err := b.ForwardKeep(&layers[i].In, layers[i].Opt)
			if err != nil {
				t.Fatalf("%s: ForwardKeep %d: %v", c, i, err)
			}
			sameBits(t, fmt.Sprintf("%s: layer %d: y", c, i), y, wy)
			sameBits(t, fmt.Sprintf("%s: layer %d: states", c, i), st, ws)
			ks[i] = k
		}
		// the slots and the areas of p's Backward, from the first call on
		if got, want := b.ScratchLen(), 2*ChunkKeptBytes(s, c.L)+ChunkScratchPairs(s, c.L)*ChunkScratchBytes(s, c.L); got != want {
			t.Errorf("%s: the scratch %d bytes with two slots, want %d", c, got, want)
		}
		if _, _, _, err := b.ForwardKeep(&layers[2].In, layers[2].Opt); !errors.Is(err, ErrKept) || !strings.Contains(err.Error(), "slots of KeepSlots all hold") {
			t.Errorf("%s: a third ForwardKeep on two slots: %v, want ErrKept saying the slots are held", c, err)
		}
		// other calls of the chunk kernels, with their own gradients
		if _, _, err := b.Forward(&layers[2].In, layers[2].Opt); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Backward(&layers[2].In, layers[2].DY, layers[2].DStates, layers[2].Opt); err != nil {
			t.Fatal(err)
		} else {
			sameBits(t, c.String()+": a Backward between", got, want[2])
		}
		for _, i := range []int{1, 0} {
			got, err := b.BackwardKept(ks[i], &layers[i].In, layers[i].DY, layers[i].DStates, layers[i].Opt)
			if err != nil {
				t.Fatalf("%s: BackwardKept %d: %v", c, i, err)
			}
			sameBits(t, fmt.Sprintf("%s: layer %d: gradients", c, i), got, want[i])
			if i == 1 { // its slot is free: a third layer takes it, the first still held
				var err error
				if _, _, ks[1], err = b.ForwardKeep(&layers[2].In, layers[2].Opt); err != nil {
					t.Fatalf("%s: ForwardKeep into a freed slot: %v", c, err)
				}
			}
		}
		if got, err := b.BackwardKept(ks[1], &layers[2].In, layers[2].DY, layers[2].DStates, layers[2].Opt); err != nil {
			t.Fatalf("%s: BackwardKept of the freed slot's layer: %v", c, err)
		} else {
			sameBits(t, c.String()+": the freed slot's layer: gradients", got, want[2])
		}
		if _, err := b.BackwardKept(ks[0], &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) {
			t.Errorf("%s: a Kept that served once, with slots: %v, want ErrKept", c, err)
		}

		// larger than a slot: T + 8 is one chunk more
		long := c
		long.T += 8
		lp := verify.Build[float32](long)
		if _, _, _, err := b.ForwardKeep(&lp.In, lp.Opt); !errors.Is(err, ErrKept) || !strings.Contains(err.Error(), "more than a slot") {
			t.Errorf("%s: ForwardKeep at T %d on slots of T %d: %v, want ErrKept saying it is more than a slot", c, long.T, c.T, err)
		}

		// what ends every Kept
		rec := p.Opt
		rec.Algo = gdn.Recurrent
		for _, end := range []struct {
			name string
			call func() error
		}{
			{"a recurrent Forward", func() error { _, _, err := b.Forward(&p.In, rec); return err }},
			{"a Backward that grows the scratch", func() error {
				_, err := b.Backward(&lp.In, lp.DY, lp.DStates, lp.Opt)
				return err
			}},
			{"KeepSlots", func() error { return b.KeepSlots(2, &p.In, p.Opt) }},
		} {
			_, _, k, err := b.ForwardKeep(&p.In, p.Opt)
			if err != nil {
				t.Fatalf("%s: ForwardKeep before %s: %v", c, end.name, err)
			}
			if err := end.call(); err != nil {
				t.Fatalf("%s: %s: %v", c, end.name, err)
			}
			if _, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) || !strings.Contains(err.Error(), "another call") {
				t.Errorf("%s: after %s: %v, want ErrKept saying another call ended it", c, end.name, err)
			}
		}

		// the default again: any other call ends the one Kept
		if err := b.KeepSlots(0, nil, p.Opt); err != nil {
			t.Fatal(err)
		}
		_, _, k, err := b.ForwardKeep(&p.In, p.Opt)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Forward(&p.In, p.Opt); err != nil {
			t.Fatal(err)
		}
		if _, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt); !errors.Is(err, ErrKept) {
			t.Errorf("%s: KeepSlots(0), a Forward after ForwardKeep: %v, want ErrKept", c, err)
		}
	}
}

// TestKeepSlotsRefuses: KeepSlots' bad arguments are errors that say
// which, and leave the Backend as it was.
func TestKeepSlotsRefuses(t *testing.T) {
	p := verify.Build[float32](keptCases()[len(keptCases())-1])
	b := openExec(t)
	if err := b.KeepSlots(1, &p.In, p.Opt); err != nil {
		t.Fatal(err)
	}
	_, _, k, err := b.ForwardKeep(&p.In, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.In.Shape(p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := openExec(t).KeepSlots(MaxKeepSlots(s, p.Opt.ChunkLen), &p.In, p.Opt); err != nil {
		t.Errorf("KeepSlots(MaxKeepSlots): %v", err)
	}
	bad := p.In
	bad.Beta.Ne[1]++
	narrow := keptCases()[len(keptCases())-1]
	narrow.Sk = 8
	pn := verify.Build[float32](narrow)
	for _, tc := range []struct {
		name string
		n    int
		in   *gdn.Inputs[float32]
		opt  gdn.Options
		want string
	}{
		{"n < 0", -1, &p.In, p.Opt, "n = -1"},
		{"bad inputs", 1, &bad, p.Opt, "beta"},
		{"a head size the kernels do not take", 1, &pn.In, pn.Opt, "S_k"},
		{"past 32-bit indices", 1 << 24, &p.In, p.Opt, "32-bit indices"},
		{"one past MaxKeepSlots", MaxKeepSlots(s, p.Opt.ChunkLen) + 1, &p.In, p.Opt, fmt.Sprintf("keep at most %d slots", MaxKeepSlots(s, p.Opt.ChunkLen))},
	} {
		if err := b.KeepSlots(tc.n, tc.in, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	got, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		t.Fatalf("BackwardKept after the refusals: %v", err)
	}
	want, err := openExec(t).Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "gradients after the refusals", got, want)
	if _, err := (&Backend{}).MaxKeepSlots(&p.In, p.Opt); !errors.Is(err, ErrNotOpen) {
		t.Errorf("MaxKeepSlots on a Backend not open: %v, want ErrNotOpen", err)
	}
	if _, err := b.MaxKeepSlots(&bad, p.Opt); err == nil || !strings.Contains(err.Error(), "beta") {
		t.Errorf("MaxKeepSlots of bad inputs: %v, want an error naming beta", err)
	}
	if err := (&Backend{}).KeepSlots(1, &p.In, p.Opt); !errors.Is(err, ErrNotOpen) {
		t.Errorf("KeepSlots on a Backend not open: %v, want ErrNotOpen", err)
	}
}

// TestMaxKeepSlots: MaxKeepSlots slots of ChunkKeptBytes and the
// backward's areas (ChunkScratchPairs of ChunkScratchBytes; Backward's
// areas are the kept pair's and A, P and X) reach at most the kernels'
// 32-bit indices, one slot more past them, at the 27B shape, both gates.
func TestMaxKeepSlots(t *testing.T) {
	for _, gw := range []int{1, 128} {
		for _, T := range []int{1024, 4096, 8192} {
			s := gdn.Shape{Sk: 128, Sv: 128, Hk: 16, Hv: 48, T: T, Seqs: 1, SeqsQK: 1, GateWidth: gw, Snapshots: 1}
			n := MaxKeepSlots(s, 64)
			slot, areas := int64(ChunkKeptBytes(s, 64)), int64(ChunkScratchPairs(s, 64)*ChunkScratchBytes(s, 64))
			if n < 1 || int64(n)*slot+areas > 4*math.MaxInt32 || int64(n+1)*slot+areas <= 4*math.MaxInt32 {
				t.Errorf("gate width %d, T %d: MaxKeepSlots %d of %d bytes beside %d bytes of areas, past or short of %d bytes", gw, T, n, slot, areas, int64(4*math.MaxInt32))
			}
		}
	}
	if n := MaxKeepSlots(gdn.Shape{Sk: 8, Sv: 8, Hk: 1, Hv: 1, T: 8, Seqs: 1, SeqsQK: 1, GateWidth: 1, Snapshots: 1}, 64); n != 0 {
		t.Errorf("head size 8: MaxKeepSlots %d, want 0", n)
	}
}

// TestChunkSizesBadShape: the sizing functions take hand-built shapes; one
// that gdn's Shape.Check refuses gives 0 from each (no division by H_k = 0,
// no negative count), and Supports names the field.
func TestChunkSizesBadShape(t *testing.T) {
	good := gdn.Shape{Sk: 128, Sv: 128, Hk: 16, Hv: 48, T: 64, Seqs: 1, SeqsQK: 1, GateWidth: 1, Snapshots: 1}
	sizes := func(s gdn.Shape) [4]int {
		return [4]int{ChunkScratchBytes(s, 64), ChunkScratchPairs(s, 64), ChunkKeptBytes(s, 64), MaxKeepSlots(s, 64)}
	}
	for i, n := range sizes(good) {
		if n <= 0 {
			t.Fatalf("good shape: size %d is %d", i, n)
		}
	}
	b := openExec(t)
	for _, tc := range []struct {
		name string
		mod  func(s *gdn.Shape)
		want string
	}{
		{"H_k zero", func(s *gdn.Shape) { s.Hk = 0 }, "H_k = 0"},
		{"H_k negative", func(s *gdn.Shape) { s.Hk = -1 }, "H_k = -1"},
		{"H_v zero", func(s *gdn.Shape) { s.Hv = 0 }, "H_v = 0"},
		{"H_v not multiple", func(s *gdn.Shape) { s.Hv = 47 }, "not a multiple of H_k"},
		{"n_seqs zero", func(s *gdn.Shape) { s.Seqs = 0 }, "n_seqs = 0"},
		{"gate width", func(s *gdn.Shape) { s.GateWidth = 0 }, "gate width = 0"},
		{"T zero", func(s *gdn.Shape) { s.T = 0 }, "T = 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.mod(&s)
			if got := sizes(s); got != [4]int{} {
				t.Errorf("sizes %v, want all 0", got)
			}
			err := b.Supports(s, gdn.Options{Algo: gdn.Chunk})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Supports: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// capped is an engine whose device caps a buffer at limit bytes, as a
// Mac's GPU does (maxBufferLength): the executor otherwise.
type capped struct {
	engine
	limit int
}

func (c capped) maxBuffer() int { return c.limit }

// TestDeviceBufferCap: on a device that caps a buffer's bytes, a call whose
// scratch would pass the cap and KeepSlots slots past it are refused before
// anything runs, saying how many slots fit, and a Kept held before the
// refused call still serves its BackwardKept, with Backward's bits.
func TestDeviceBufferCap(t *testing.T) {
	p := verify.Build[float32](keptCases()[len(keptCases())-1])
	s, err := p.In.Shape(p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	room, areas := keepLayout(s, chunkGeomFor(s, p.Opt), chunkSplit{})
	want, err := openExec(t).Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	// room for two slots and the areas, not three
	b := openExec(t)
	if n, err := b.MaxKeepSlots(&p.In, p.Opt); err != nil || n != MaxKeepSlots(s, p.Opt.ChunkLen) {
		t.Errorf("Backend.MaxKeepSlots without a cap: %d, %v, want metal.MaxKeepSlots's %d", n, err, MaxKeepSlots(s, p.Opt.ChunkLen))
	}
	b.eng = capped{b.eng, 4 * (2*room + areas)}
	if n, err := b.MaxKeepSlots(&p.In, p.Opt); err != nil || n != 2 {
		t.Errorf("Backend.MaxKeepSlots under the cap: %d, %v, want 2", n, err)
	}
	if err := b.KeepSlots(3, &p.In, p.Opt); err == nil || !strings.Contains(err.Error(), "maxBufferLength") || !strings.Contains(err.Error(), "keep at most 2 slots") {
		t.Errorf("KeepSlots(3): %v, want an error past maxBufferLength saying 2 slots fit", err)
	}
	if err := b.KeepSlots(2, &p.In, p.Opt); err != nil {
		t.Fatalf("KeepSlots(2): %v", err)
	}
	_, _, k, err := b.ForwardKeep(&p.In, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	// a longer call's scratch passes the cap: refused, the Kept kept
	long := keptCases()[len(keptCases())-1]
	long.T *= 4
	pl := verify.Build[float32](long)
	if _, err := b.Backward(&pl.In, pl.DY, pl.DStates, pl.Opt); err == nil || !strings.Contains(err.Error(), "the scratch would take") || !strings.Contains(err.Error(), "keep fewer slots") {
		t.Errorf("Backward past the cap: %v, want the scratch refused, naming the slots", err)
	}
	got, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		t.Fatalf("BackwardKept after the refused call: %v", err)
	}
	sameBits(t, "gradients after the refused call", got, want)
	// without slots the hint is the split alone
	b2 := openExec(t)
	b2.eng = capped{b2.eng, 4 * areas}
	if _, err := b2.Backward(&pl.In, pl.DY, pl.DStates, pl.Opt); err == nil || !strings.Contains(err.Error(), "maxBufferLength") || strings.Contains(err.Error(), "KeepSlots") {
		t.Errorf("Backward past the cap, no slots: %v, want the scratch refused without a word of slots", err)
	}
	if got, err := b2.Backward(&p.In, p.DY, p.DStates, p.Opt); err != nil {
		t.Errorf("Backward within the cap: %v", err)
	} else {
		sameBits(t, "gradients within the cap", got, want)
	}
}
