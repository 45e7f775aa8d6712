package gdn

import (
	"math"
	"testing"
)

// keepEveryState is the recurrent backward written without checkpoints or
// a segment buffer: one forward keeps every state (states[t+1] is M_t,
// states[0] the initial state M_{-1}), then StepBackward runs from the last
// token to the first, (head, seq) items in increasing order on one
// goroutine, adding each token's dq and dk straight into the q/k heads.
// Backward must give the same bits: it makes the same StepForward and
// StepBackward calls on the same states, and adds dq and dk in the same
// order.
func keepEveryState[F Float](t *testing.T, in *Inputs[F], dy Tensor[F], dStates []F, opt Options) *Grads[F] {
	t.Helper()
	s, err := in.Shape(opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGrads(s, make([]F, s.Layout().Total))
	if err != nil {
		t.Fatal(err)
	}
	ss := s.Sk * s.Sv
	items := s.Hv * s.Seqs
	pdq := make([]F, s.Sk*s.T*items)
	pdk := make([]F, s.Sk*s.T*items)
	dM, mp, gy := make([]F, ss), make([]F, s.Sk), make([]F, s.Sv)
	tg := NewTokenGrads[F](s.Sk, s.Sv)
	for item := 0; item < items; item++ {
		p := newPair(in, opt, s, item)
		x := p.newToken()
		states := make([][]F, s.T+1)
		states[0] = make([]F, ss)
		p.initialState(states[0])
		for tok := 0; tok < s.T; tok++ {
			states[tok+1] = append([]F(nil), states[tok]...)
			p.token(x, tok)
			StepForward(states[tok+1], x, nil)
		}
		clear(dM)
		hq, sq := s.qkHead(p.h, p.seq, opt.Heads)
		for tok := s.T - 1; tok >= 0; tok-- {
			if slot := s.T - 1 - tok; slot < s.Snapshots && dStates != nil {
				addInto(dM, dStates[p.stateOffset(slot):][:ss])
			}
			p.token(x, tok)
			dy.row(gy, p.h, tok, p.seq)
			StepBackward(dM, states[tok], states[tok+1], x, gy, tg, mp)
			p.store(g, pdq, pdk, item, tok, tg)
			dst := ((sq*s.T+tok)*s.Hk + hq) * s.Sk
			addInto(g.DQ[dst:dst+s.Sk], tg.DQ)
			addInto(g.DK[dst:dst+s.Sk], tg.DK)
		}
		copy(g.DState[p.stateOffset(0):][:ss], dM)
	}
	return g
}

// sameBits reports the first element where got and want differ in their
// bits, or -1.
func sameBits[F Float](got, want []F) int {
	for i := range want {
		if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
			return i
		}
	}
	return -1
}

// TestBackwardKeepEveryStateBits pins the checkpointed backward's
// bookkeeping (which states its segment buffer hands StepBackward) to
// keepEveryState, bit for bit, in float32 and float64, for segment lengths
// that divide T and that do not, a last segment of one token, and several
// thread counts.
func TestBackwardKeepEveryStateBits(t *testing.T) {
	cases := []struct {
		name  string
		p     *problem
		nilDS bool
	}{
		{"scalar gates, interleave, snapshots", newProblem(21, 8, 8, 2, 2, 13, 1, 2, false, Interleave, 3), false},
		{"kda, tile, snapshots", newProblem(22, 6, 10, 1, 3, 12, 2, 2, true, Tile, 4), false},
		{"no dStates", newProblem(23, 5, 4, 2, 1, 9, 1, 1, false, Tile, 2), true},
		{"one token", newProblem(24, 4, 4, 1, 1, 1, 1, 1, true, Tile, 1), false},
	}
	for _, tc := range cases {
		p := tc.p
		p32 := toF32(p)
		ds64, ds32 := p.dStates, p32.dStates
		if tc.nilDS {
			ds64, ds32 = nil, nil
		}
		want64 := keepEveryState(t, &p.in, p.dy, ds64, p.opt)
		want32 := keepEveryState(t, &p32.in, p32.dy, ds32, p.opt)
		T := p.in.Q.Ne[2]
		for _, c := range []int{0, 1, 2, 3, 4, 5, 6, T - 1, T} {
			for _, threads := range []int{1, 3} {
				opt := p.opt
				opt.Segment, opt.Threads = c, threads
				g64, err := Backward(&p.in, p.dy, ds64, opt)
				if err != nil {
					t.Fatal(err)
				}
				if i := sameBits(g64.Packed, want64.Packed); i >= 0 {
					t.Fatalf("%s, float64, C=%d threads=%d: packed[%d] = %g, keep-every-state gives %g", tc.name, c, threads, i, g64.Packed[i], want64.Packed[i])
				}
				g32, err := Backward(&p32.in, p32.dy, ds32, opt)
				if err != nil {
					t.Fatal(err)
				}
				if i := sameBits(g32.Packed, want32.Packed); i >= 0 {
					t.Fatalf("%s, float32, C=%d threads=%d: packed[%d] = %g, keep-every-state gives %g", tc.name, c, threads, i, g32.Packed[i], want32.Packed[i])
				}
			}
		}
	}
}
