package metal

import (
	"errors"
	"fmt"
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
