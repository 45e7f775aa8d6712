package gdn

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// problem is a small float64 problem with every feature switched on:
// head broadcast, sequence broadcast, KDA optional, an initial state and
// snapshots, q/k read through permuted views.
type problem struct {
	in      Inputs[float64]
	dy      Tensor[float64]
	dStates []float64
	opt     Options
}

func newProblem(seed uint64, sk, sv, hk, rep, T, seqsQK, seqs int, kda bool, heads HeadMap, snaps int) *problem {
	rng := rand.New(rand.NewPCG(seed, 3))
	fill := func(n int, lo, hi float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = lo + (hi-lo)*rng.Float64()
		}
		return x
	}
	hv := hk * rep
	gw := 1
	if kda {
		gw = sk
	}
	// q and k are stored [S_k, T, H_k, n_seqs] and viewed with heads and
	// tokens swapped.
	perm := func(data []float64) Tensor[float64] {
		return Permute(Contiguous(data, [4]int{sk, T, hk, seqsQK}), [4]int{0, 2, 1, 3})
	}
	p := &problem{
		in: Inputs[float64]{
			Q:     perm(fill(sk*hk*T*seqsQK, -0.5, 0.5)),
			K:     perm(fill(sk*hk*T*seqsQK, -0.5, 0.5)),
			V:     Contiguous(fill(sv*hv*T*seqs, -1, 1), [4]int{sv, hv, T, seqs}),
			G:     Contiguous(fill(gw*hv*T*seqs, -1, 0), [4]int{gw, hv, T, seqs}),
			Beta:  Contiguous(fill(hv*T*seqs, 0, 1), [4]int{1, hv, T, seqs}),
			State: Contiguous(fill(sk*sv*hv*seqs, -1, 1), [4]int{sk, sv, hv, seqs}),
		},
		dy:  Contiguous(fill(sv*hv*T*seqs, -1, 1), [4]int{sv, hv, T, seqs}),
		opt: Options{Heads: heads, Snapshots: snaps, Scale: 0.7},
	}
	p.dStates = fill(sk*sv*hv*seqs*snaps, -1, 1)
	return p
}

// naiveForward is the package documentation's recurrence written out index
// by index, with no code shared with the package beyond Tensor.At: a second
// reading of the forward, so that a wrong head mapping or snapshot slot
// cannot hide behind a gradient check that is consistent with it.
func naiveForward(p *problem) (y, states []float64) {
	in := p.in
	sk, hk, T, seqsQK := in.Q.Ne[0], in.Q.Ne[1], in.Q.Ne[2], in.Q.Ne[3]
	sv, hv, seqs := in.V.Ne[0], in.V.Ne[1], in.V.Ne[3]
	K := p.opt.Snapshots
	y = make([]float64, sv*hv*T*seqs)
	states = make([]float64, sk*sv*hv*seqs*K)
	for s := 0; s < seqs; s++ {
		for h := 0; h < hv; h++ {
			hq := h % hk
			if p.opt.Heads == Interleave {
				hq = h / (hv / hk)
			}
			sq := s / (seqs / seqsQK)
			M := make([][]float64, sv)
			for j := range M {
				M[j] = make([]float64, sk)
				for i := range M[j] {
					M[j][i] = in.State.At(i, j, h, s)
				}
			}
			for t := 0; t < T; t++ {
				a := func(i int) float64 {
					if in.G.Ne[0] == 1 {
						return math.Exp(in.G.At(0, h, t, s))
					}
					return math.Exp(in.G.At(i, h, t, s))
				}
				beta := in.Beta.At(0, h, t, s)
				for j := 0; j < sv; j++ {
					var u float64
					for i := 0; i < sk; i++ {
						M[j][i] *= a(i)
						u += M[j][i] * in.K.At(i, hq, t, sq)
					}
					d := beta * (in.V.At(j, h, t, s) - u)
					var yj float64
					for i := 0; i < sk; i++ {
						M[j][i] += d * in.K.At(i, hq, t, sq)
						yj += M[j][i] * in.Q.At(i, hq, t, sq)
					}
					y[((s*T+t)*hv+h)*sv+j] = p.opt.Scale * yj
				}
				if slot := T - 1 - t; slot < K {
					for j := 0; j < sv; j++ {
						for i := 0; i < sk; i++ {
							states[(((slot*seqs+s)*hv+h)*sv+j)*sk+i] = M[j][i]
						}
					}
				}
			}
		}
	}
	return y, states
}

func TestForwardAgainstNaive(t *testing.T) {
	for _, tc := range []struct {
		name                                 string
		sk, sv, hk, rep, T, seqsQK, seqs, sn int
		kda                                  bool
		heads                                HeadMap
	}{
		{"plain", 8, 8, 1, 1, 5, 1, 1, 1, false, Tile},
		{"sk_ne_sv", 8, 5, 2, 1, 4, 1, 1, 2, true, Tile},
		{"tile", 6, 6, 2, 3, 5, 1, 1, 3, false, Tile},
		{"interleave", 6, 6, 2, 3, 5, 1, 1, 3, true, Interleave},
		{"seq_broadcast", 4, 4, 1, 2, 3, 1, 2, 3, true, Interleave},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProblem(7, tc.sk, tc.sv, tc.hk, tc.rep, tc.T, tc.seqsQK, tc.seqs, tc.kda, tc.heads, tc.sn)
			r, err := Forward(&p.in, p.opt)
			if err != nil {
				t.Fatal(err)
			}
			y, st := naiveForward(p)
			if d := maxDiff(r.Y, y); d > 1e-12 {
				t.Errorf("y differs from the naive forward by %g", d)
			}
			if d := maxDiff(r.States, st); d > 1e-12 {
				t.Errorf("states differ from the naive forward by %g", d)
			}
		})
	}
}

func maxDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// TestBackwardDirectional checks the backward against a central difference
// of the loss L = <y, dy> + <states, dStates> along one random direction in
// all inputs at once, with the head and sequence broadcasts on, so that a
// wrong sum over broadcast heads shows here even without package verify.
func TestBackwardDirectional(t *testing.T) {
	for _, heads := range []HeadMap{Tile, Interleave} {
		p := newProblem(11, 6, 5, 2, 3, 7, 1, 2, true, heads, 2)
		p.opt.Segment = 3
		g, err := Backward(&p.in, p.dy, p.dStates, p.opt)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 5))
		ts := []Tensor[float64]{p.in.Q, p.in.K, p.in.V, p.in.G, p.in.Beta, p.in.State}
		gs := [][]float64{g.DQ, g.DK, g.DV, g.DG, g.DBeta, g.DState}
		dirs := make([][]float64, len(ts))
		var want float64 // <gradient, direction>
		for n, tt := range ts {
			dirs[n] = make([]float64, len(tt.Data))
			for i := range dirs[n] {
				dirs[n][i] = rng.Float64()*2 - 1
			}
			// The direction lives in Data; the gradient in the logical
			// shape. Pair them through the view's strides.
			dense := Tensor[float64]{Data: dirs[n], Ne: tt.Ne, Nb: tt.Nb, Off: tt.Off}.Dense()
			for i, x := range dense {
				want += gs[n][i] * x
			}
		}
		loss := func(h float64) float64 {
			q := *p
			ins := []*Tensor[float64]{&q.in.Q, &q.in.K, &q.in.V, &q.in.G, &q.in.Beta, &q.in.State}
			for n, tt := range ins {
				data := slices.Clone(tt.Data)
				for i := range data {
					data[i] += h * dirs[n][i]
				}
				tt.Data = data
			}
			r, err := Forward(&q.in, q.opt)
			if err != nil {
				t.Fatal(err)
			}
			dy := q.dy.Dense()
			var L float64
			for i := range r.Y {
				L += r.Y[i] * dy[i]
			}
			for i := range r.States {
				L += r.States[i] * q.dStates[i]
			}
			return L
		}
		const h = 1e-3
		got := (loss(-2*h) - 8*loss(-h) + 8*loss(h) - loss(2*h)) / (12 * h)
		if rel := math.Abs(got-want) / math.Abs(want); rel > 1e-7 {
			t.Errorf("%v: directional derivative %.12g, backward gives %.12g (rel %g)", heads, got, want, rel)
		}
	}
}

// TestSegmentsBitIdentical: every segment length, keep-every-state and any
// thread count give the same bits.
func TestSegmentsBitIdentical(t *testing.T) {
	p := newProblem(3, 8, 8, 2, 2, 13, 1, 2, false, Interleave, 3)
	in32 := toF32(p)
	ref, err := Backward(&in32.in, in32.dy, in32.dStates, Options{Heads: Interleave, Snapshots: 3, KeepAll: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{0, 1, 2, 3, 5, 12, 13, 100} {
		for _, threads := range []int{1, 2, 3, 8} {
			opt := Options{Heads: Interleave, Snapshots: 3, Segment: c, Threads: threads}
			g, err := Backward(&in32.in, in32.dy, in32.dStates, opt)
			if err != nil {
				t.Fatal(err)
			}
			for i := range g.Packed {
				if math.Float32bits(g.Packed[i]) != math.Float32bits(ref.Packed[i]) {
					t.Fatalf("C=%d threads=%d: packed[%d] = %g, keep-all gives %g", c, threads, i, g.Packed[i], ref.Packed[i])
				}
			}
		}
	}
}

type problem32 struct {
	in      Inputs[float32]
	dy      Tensor[float32]
	dStates []float32
}

func toF32(p *problem) *problem32 {
	conv := func(t Tensor[float64]) Tensor[float32] {
		d := make([]float32, len(t.Data))
		for i, x := range t.Data {
			d[i] = float32(x)
		}
		return Tensor[float32]{Data: d, Ne: t.Ne, Nb: t.Nb, Off: t.Off}
	}
	ds := make([]float32, len(p.dStates))
	for i, x := range p.dStates {
		ds[i] = float32(x)
	}
	return &problem32{
		in: Inputs[float32]{Q: conv(p.in.Q), K: conv(p.in.K), V: conv(p.in.V), G: conv(p.in.G), Beta: conv(p.in.Beta), State: conv(p.in.State)},
		dy: conv(p.dy), dStates: ds,
	}
}

// TestInputsUnmodified: nothing the caller passes in is written.
func TestInputsUnmodified(t *testing.T) {
	p := newProblem(9, 6, 6, 1, 2, 5, 1, 1, true, Tile, 2)
	all := [][]float64{p.in.Q.Data, p.in.K.Data, p.in.V.Data, p.in.G.Data, p.in.Beta.Data, p.in.State.Data, p.dy.Data, p.dStates}
	before := make([][]float64, len(all))
	for i, d := range all {
		before[i] = slices.Clone(d)
	}
	if _, err := Forward(&p.in, p.opt); err != nil {
		t.Fatal(err)
	}
	if _, err := Backward(&p.in, p.dy, p.dStates, p.opt); err != nil {
		t.Fatal(err)
	}
	for i, d := range all {
		if !slices.Equal(d, before[i]) {
			t.Errorf("input %d was modified", i)
		}
	}
}

// TestNaNPropagates: a NaN in one head's v reaches that head's outputs and
// gradients, leaves the other heads alone, and is no error.
func TestNaNPropagates(t *testing.T) {
	p := newProblem(4, 4, 4, 2, 1, 3, 1, 1, false, Tile, 1)
	p.in.V.Data[0] = math.NaN() // head 0, token 0
	r, err := Forward(&p.in, p.opt)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(r.Y[0]) {
		t.Errorf("y of head 0 is %g, want NaN", r.Y[0])
	}
	if math.IsNaN(r.Y[4]) {
		t.Errorf("y of head 1 is NaN; NaN leaked across heads")
	}
	g, err := Backward(&p.in, p.dy, p.dStates, p.opt)
	if err != nil {
		t.Fatal(err)
	}
	// dbeta_t = dd . (v - u) meets the NaN directly. (dstate does not: the
	// loss is affine in v, so no gradient of a state depends on v.)
	if !math.IsNaN(g.DBeta[0]) {
		t.Errorf("dbeta of head 0 is %g, want NaN", g.DBeta[0])
	}
	if math.IsNaN(g.DBeta[1]) || math.IsNaN(g.DState[16]) {
		t.Errorf("a gradient of head 1 is NaN; NaN leaked across heads")
	}
}

// TestBadInputs: each malformed input is an error that names the tensor and
// the dimension, never a panic.
func TestBadInputs(t *testing.T) {
	base := func() *problem { return newProblem(1, 4, 4, 2, 2, 3, 1, 2, false, Tile, 1) }
	for _, tc := range []struct {
		name  string
		mod   func(p *problem)
		wants []string
	}{
		{"k shape", func(p *problem) { p.in.K.Ne[0] = 3 }, []string{"k:", "ne[0] (S_k)"}},
		{"H_v not multiple", func(p *problem) {
			p.in.Q = Contiguous(make([]float64, 4*3*3), [4]int{4, 3, 3, 1})
			p.in.K = p.in.Q
		}, []string{"v:", "H_v", "H_k"}},
		{"n_seqs not multiple", func(p *problem) {
			p.in.V.Ne[3] = 1
			p.in.G.Ne[3], p.in.Beta.Ne[3], p.in.State.Ne[3] = 1, 1, 1
			p.in.Q = Contiguous(make([]float64, 4*2*3*2), [4]int{4, 2, 3, 2})
			p.in.K = p.in.Q
		}, []string{"v:", "n_seqs"}},
		{"gate width", func(p *problem) { p.in.G = Contiguous(make([]float64, 3*4*3*2), [4]int{3, 4, 3, 2}) }, []string{"g:", "gate width"}},
		{"T zero", func(p *problem) { p.in.Q.Ne[2] = 0 }, []string{"q:", "ne[2] (T)"}},
		{"v T", func(p *problem) { p.in.V.Ne[2] = 2 }, []string{"v:", "ne[2] (T)"}},
		{"beta heads", func(p *problem) { p.in.Beta.Ne[1] = 2 }, []string{"beta:", "ne[1] (H_v)"}},
		{"state size", func(p *problem) { p.in.State.Ne[1] = 5 }, []string{"state:", "ne[1] (S_v)"}},
		{"stride past end", func(p *problem) { p.in.V.Nb[2] *= 2 }, []string{"v:", "past the end"}},
		{"negative stride", func(p *problem) { p.in.Beta.Nb[1] = -1 }, []string{"beta:", "before the start"}},
		{"offset", func(p *problem) { p.in.G.Off = 1 }, []string{"g:", "past the end"}},
		{"huge stride", func(p *problem) { p.in.Q.Nb[3] = 1 << 50 }, []string{"q:", "nb[3]"}},
		{"snapshots", func(p *problem) { p.opt.Snapshots = 4 }, []string{"snapshots", "T = 3"}},
		{"segment", func(p *problem) { p.opt.Segment = -1 }, []string{"segment length C"}},
		{"heads", func(p *problem) { p.opt.Heads = 7 }, []string{"head map"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mod(p)
			_, ferr := Forward(&p.in, p.opt)
			_, berr := Backward(&p.in, p.dy, nil, p.opt)
			for _, err := range []error{ferr, berr} {
				if err == nil {
					t.Fatalf("no error")
				}
				for _, w := range tc.wants {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
			}
		})
	}
}

func TestBadBackwardArgs(t *testing.T) {
	p := newProblem(1, 4, 4, 1, 1, 3, 1, 1, false, Tile, 2)
	s, _ := p.in.Shape(p.opt)
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"dy shape", func() error {
			dy := p.dy
			dy.Ne[0] = 3
			_, err := Backward(&p.in, dy, p.dStates, p.opt)
			return err
		}, "dy: ne[0] (S_v)"},
		{"dstates length", func() error { _, err := Backward(&p.in, p.dy, p.dStates[1:], p.opt); return err }, "dstates:"},
		{"packed length", func() error {
			_, err := BackwardInto(make([]float64, s.Layout().Total-1), &p.in, p.dy, p.dStates, p.opt)
			return err
		}, "packed:"},
		{"y length", func() error {
			_, err := ForwardInto(make([]float64, 1), make([]float64, s.StatesLen()), &p.in, p.opt)
			return err
		}, "y:"},
		{"states length", func() error {
			_, err := ForwardInto(make([]float64, s.YLen()), make([]float64, 1), &p.in, p.opt)
			return err
		}, "states:"},
		{"nil inputs", func() error { _, err := Forward[float64](nil, p.opt); return err }, "nil"},
	} {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

// FuzzShapes throws arbitrary shapes, strides and offsets at the op: it
// must return an error or a result, never panic.
func FuzzShapes(f *testing.F) {
	f.Add(uint8(4), uint8(4), uint8(1), uint8(2), uint8(3), uint8(1), uint8(1), false, int8(0), int8(0), uint8(0), uint8(1), uint8(0))
	f.Add(uint8(3), uint8(2), uint8(2), uint8(1), uint8(1), uint8(2), uint8(2), true, int8(-1), int8(3), uint8(2), uint8(2), uint8(5))
	f.Fuzz(func(t *testing.T, sk, sv, hk, rep, T, seqsQK, seqs uint8, kda bool, qStride, vStride int8, off, snaps, seg uint8) {
		sk, sv, hk, rep, T = sk%9, sv%9, hk%4, rep%4, T%9
		seqsQK, seqs = seqsQK%3, seqs%4
		hv := int(hk) * int(rep)
		gw := 1
		if kda {
			gw = int(sk)
		}
		qlen := int(sk) * int(hk) * int(T) * int(seqsQK)
		q := Contiguous(make([]float64, qlen), [4]int{int(sk), int(hk), int(T), int(seqsQK)})
		q.Nb[1] += int(qStride)
		q.Off = int(off % 4)
		v := Contiguous(make([]float64, int(sv)*hv*int(T)*int(seqs)), [4]int{int(sv), hv, int(T), int(seqs)})
		v.Nb[2] += int(vStride)
		in := &Inputs[float64]{
			Q: q, K: q, V: v,
			G:    Contiguous(make([]float64, gw*hv*int(T)*int(seqs)), [4]int{gw, hv, int(T), int(seqs)}),
			Beta: Contiguous(make([]float64, hv*int(T)*int(seqs)), [4]int{1, hv, int(T), int(seqs)}),
		}
		opt := Options{Snapshots: int(snaps % 4), Segment: int(seg % 6)}
		r, ferr := Forward(in, opt)
		dy := Contiguous(make([]float64, int(sv)*hv*int(T)*int(seqs)), [4]int{int(sv), hv, int(T), int(seqs)})
		g, berr := Backward(in, dy, nil, opt)
		if (ferr == nil) != (berr == nil) {
			t.Fatalf("forward error %v but backward error %v", ferr, berr)
		}
		if ferr == nil && (len(r.Y) != r.Shape.YLen() || len(g.Packed) != g.Shape.Layout().Total) {
			t.Fatalf("output sizes wrong")
		}
	})
}

// TestSharpEdges: bad arguments to the exported functions are errors that
// name what is wrong, or documented panics with a message, never a division
// by zero or a wrong answer with a nil error.
func TestSharpEdges(t *testing.T) {
	// Sizes: no division by zero, no overflow.
	for _, tc := range []struct {
		name      string
		got, want int
	}{
		{"ScratchStates(0, 0)", ScratchStates(0, 0), 0},
		{"ScratchStates(-5, 3)", ScratchStates(-5, 3), 0},
		{"ScratchStates(10, 0)", ScratchStates(10, 0), 12},
		{"ScratchStates(10, 3)", ScratchStates(10, 3), 4 + 3 + 1},
		{"ScratchBytes(2, 2, MaxInt, 0)", ScratchBytes[float64](2, 2, math.MaxInt, 0), math.MaxInt},
		{"ScratchBytes(128, 128, 0, 0)", ScratchBytes[float32](128, 128, 0, 0), 0},
		{"ScratchBytes(0, 128, 8, 2)", ScratchBytes[float32](0, 128, 8, 2), 0},
		{"ScratchBytes(2, 3, 10, 3)", ScratchBytes[float64](2, 3, 10, 3), (8*2*3 + 6*2 + 4*3) * 8},
		{"ScratchBytes(2^20, 2^20, 2^40, 0)", ScratchBytes[float32](1<<20, 1<<20, 1<<40, 0), math.MaxInt},
		{"Segments(0, 4)", Segments(0, 4), 0},
		{"Segments(9, 4)", Segments(9, 4), 3},
		{"Segments(MaxInt, 2)", Segments(math.MaxInt, 2), math.MaxInt/2 + 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}

	// Documented panics carry a message naming the argument.
	panics := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if msg, _ := r.(string); !strings.Contains(msg, want) {
				t.Errorf("%s: panic %v, want one containing %q", name, r, want)
			}
		}()
		f()
	}
	x := Contiguous(make([]float64, 24), [4]int{2, 3, 4, 1})
	panics("Segments(5, 0)", "gdn: Segments: segment length C = 0, want at least 1", func() { Segments(5, 0) })
	panics("Permute out of range", "gdn: Permute: axes [0 1 2 4] are not a permutation of 0, 1, 2, 3", func() { Permute(x, [4]int{0, 1, 2, 4}) })
	panics("Permute repeated", "gdn: Permute: axes [0 0 2 3] are not a permutation", func() { Permute(x, [4]int{0, 0, 2, 3}) })
	panics("Permute negative", "gdn: Permute: axes [-1 1 2 3]", func() { Permute(x, [4]int{-1, 1, 2, 3}) })
	oob := x
	oob.Ne[2] = 5
	panics("Dense out of bounds", "gdn: Dense: strides [1 2 6 24] with offset 0 read element 29, past the end of the data (len 24)", func() { oob.Dense() })
	neg := x
	neg.Off = -1
	panics("Dense negative offset", "gdn: Dense: offset -1 is negative", func() { neg.Dense() })
	if got := Permute(x, [4]int{0, 2, 1, 3}); got.Ne != [4]int{2, 4, 3, 1} || got.Nb != [4]int{1, 6, 2, 24} {
		t.Errorf("Permute: %v %v", got.Ne, got.Nb)
	}

	// Scale: one rule, finite; NaN and Inf are errors in every entry point.
	in, dy := smallProblem(t)
	for _, sc := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		opt := Options{Scale: sc}
		if _, err := Forward(&in, opt); err == nil || !strings.Contains(err.Error(), "gdn: scale: ") {
			t.Errorf("Forward with scale %g: %v", sc, err)
		}
		if _, err := Backward(&in, dy, nil, opt); err == nil || !strings.Contains(err.Error(), "want a finite number") {
			t.Errorf("Backward with scale %g: %v", sc, err)
		}
	}

	// Overlapping outputs: refused, naming both buffers.
	s, err := in.Shape(Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float64, s.YLen()+s.StatesLen())
	y, states := buf[:s.YLen()], buf[s.YLen():]
	for _, tc := range []struct {
		name      string
		y, states []float64
		want      string
	}{
		{"y overlaps states", buf[:s.YLen()], buf[1 : 1+s.StatesLen()], "gdn: y: output buffer overlaps the states output buffer"},
		{"states is q", make([]float64, s.YLen()), in.Q.Data[:s.StatesLen()], "gdn: states: output buffer overlaps the elements input q reads"},
		{"y is v", in.V.Data[:s.YLen()], make([]float64, s.StatesLen()), "gdn: y: output buffer overlaps the elements input v reads"},
	} {
		if len(tc.states) != s.StatesLen() || len(tc.y) != s.YLen() {
			t.Fatalf("%s: test buffers of the wrong length", tc.name)
		}
		if _, err := ForwardInto(tc.y, tc.states, &in, Options{}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Disjoint parts of one buffer are fine, and give Forward's result.
	if _, err := ForwardInto(y, states, &in, Options{}); err != nil {
		t.Fatal(err)
	}
	r, err := Forward(&in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range y {
		if y[i] != r.Y[i] {
			t.Fatalf("ForwardInto's y[%d] = %g, Forward's %g", i, y[i], r.Y[i])
		}
	}
	packed := make([]float64, s.Layout().Total+1)
	if _, err := BackwardInto(packed[:s.Layout().Total], &in, Contiguous(packed[1:1+s.YLen()], dy.Ne), nil, Options{}); err == nil || err.Error() != "gdn: packed: output buffer overlaps the elements input dy reads" {
		t.Errorf("packed overlapping dy: %v", err)
	}
	if _, err := BackwardInto(in.K.Data[:s.Layout().Total], &in, dy, nil, Options{}); err == nil || err.Error() != "gdn: packed: output buffer overlaps the elements input q reads" {
		t.Errorf("packed overlapping q/k: %v", err)
	}
}

// smallProblem is a small valid call: S_k 3, S_v 2, H 1, H_v 2, T 4, one
// sequence, q and k one buffer of plenty of elements (so that an output can
// overlap it).
func smallProblem(t *testing.T) (Inputs[float64], Tensor[float64]) {
	t.Helper()
	fill := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = 0.1 * float64(i%5-2)
		}
		return x
	}
	qk := fill(1000)
	var in Inputs[float64]
	in.Q = Contiguous(qk, [4]int{3, 1, 4, 1})
	in.K = Contiguous(qk, [4]int{3, 1, 4, 1})
	in.V = Contiguous(fill(1000), [4]int{2, 2, 4, 1})
	in.G = Contiguous(fill(8), [4]int{1, 2, 4, 1})
	in.Beta = Contiguous(fill(8), [4]int{1, 2, 4, 1})
	dy := Contiguous(fill(16), [4]int{2, 2, 4, 1})
	return in, dy
}

// TestChunkCount: ChunkCount counts chunkStarts' chunks without making the
// list, and plans a T of 2^40 tokens without allocating.
func TestChunkCount(t *testing.T) {
	for T := 1; T <= 40; T++ {
		for L := 1; L <= 9; L++ {
			for snap := 1; snap <= T; snap++ {
				if got, want := ChunkCount(T, L, snap), len(chunkStarts(T, L, snap))-1; got != want {
					t.Fatalf("ChunkCount(%d, %d, %d) = %d, want %d", T, L, snap, got, want)
				}
			}
		}
	}
	if a := testing.AllocsPerRun(3, func() { ChunkCount(1<<40, 64, 1) }); a != 0 {
		t.Errorf("ChunkCount at T 2^40: %g allocations", a)
	}
	if got := ChunkCount(1<<40, 64, 1); got != 1<<34 {
		t.Errorf("ChunkCount(2^40, 64, 1) = %d, want 2^34", got)
	}
}

// TestShapeCheck: every shape Inputs.Shape returns passes Shape.Check, and a
// hand-built shape with one field out of place fails it, naming the field;
// the sizing functions that take a Shape give 0 for it instead of dividing
// by zero or counting negative sizes.
func TestShapeCheck(t *testing.T) {
	for _, p := range []*problem{
		newProblem(1, 4, 4, 2, 2, 3, 1, 2, false, Tile, 1),
		newProblem(2, 8, 4, 1, 3, 5, 2, 2, true, Interleave, 5),
	} {
		s, err := p.in.Shape(p.opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Errorf("Inputs.Shape gave %+v, which Check refuses: %v", s, err)
		}
	}
	good := Shape{Sk: 128, Sv: 128, Hk: 16, Hv: 48, T: 64, Seqs: 2, SeqsQK: 1, GateWidth: 128, Snapshots: 1}
	if ChunkScratchBytes[float32](good, 64) == 0 {
		t.Fatalf("ChunkScratchBytes(%+v) = 0", good)
	}
	for _, tc := range []struct {
		name string
		mod  func(s *Shape)
		want string
	}{
		{"H_k zero", func(s *Shape) { s.Hk = 0 }, "H_k = 0"},
		{"H_v zero", func(s *Shape) { s.Hv = 0 }, "H_v = 0"},
		{"H_v not multiple", func(s *Shape) { s.Hv = 47 }, "H_v = 47 is not a multiple of H_k = 16"},
		{"S_k negative", func(s *Shape) { s.Sk = -128 }, "S_k = -128"},
		{"S_v zero", func(s *Shape) { s.Sv = 0 }, "S_v = 0"},
		{"T zero", func(s *Shape) { s.T = 0 }, "T = 0"},
		{"n_seqs zero", func(s *Shape) { s.Seqs = 0 }, "n_seqs = 0"},
		{"q/k n_seqs zero", func(s *Shape) { s.SeqsQK = 0 }, "n_seqs of q/k = 0"},
		{"n_seqs not multiple", func(s *Shape) { s.Seqs, s.SeqsQK = 3, 2 }, "n_seqs = 3 is not a multiple"},
		{"gate width", func(s *Shape) { s.GateWidth = 7 }, "gate width = 7"},
		{"snapshots zero", func(s *Shape) { s.Snapshots = 0 }, "snapshots = 0"},
		{"snapshots past T", func(s *Shape) { s.Snapshots = 65 }, "snapshots = 65, want 1 to T = 64"},
		{"too large", func(s *Shape) { s.T = 1 << 40 }, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.mod(&s)
			err := s.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check(%+v) = %v, want an error with %q", s, err, tc.want)
			}
			if n := ChunkScratchBytes[float32](s, 64); n != 0 {
				t.Errorf("ChunkScratchBytes = %d, want 0", n)
			}
			if f, b := Flops(s, Options{Algo: Chunk}); f != 0 || b != 0 {
				t.Errorf("Flops = %g, %g, want 0, 0", f, b)
			}
			if _, err := NewGrads(s, make([]float32, 8)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewGrads: %v, want an error with %q", err, tc.want)
			}
			if err := CheckUpstream(s, Tensor[float32]{}, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckUpstream: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
