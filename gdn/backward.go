package gdn

import "fmt"

// Layout gives the offsets, in elements, of each block of the packed
// gradient buffer [dq|dk|dv|dg|dbeta|dstate], the upstream op's output.
// Each block is contiguous in its input's logical shape, ggml's order:
//
//	dq, dk   [S_k, H_k, T, n_seqs_qk]
//	dv       [S_v, H_v, T, n_seqs]
//	dg       [1 or S_k, H_v, T, n_seqs]
//	dbeta    [1, H_v, T, n_seqs]
//	dstate   [S_k, S_v, H_v, n_seqs]
type Layout struct {
	DQ, DK, DV, DG, DBeta, DState int // offsets
	Total                         int // length of the packed buffer
}

// Packed returns the packed layout for s.
func (s Shape) Packed() Layout {
	var l Layout
	qk := s.Sk * s.Hk * s.T * s.SeqsQK
	vt := s.Hv * s.T * s.Seqs
	l.DQ = 0
	l.DK = l.DQ + qk
	l.DV = l.DK + qk
	l.DG = l.DV + s.Sv*vt
	l.DBeta = l.DG + s.GateWidth*vt
	l.DState = l.DBeta + vt
	l.Total = l.DState + s.StateLen()
	return l
}

// Grads holds the backward's results: Packed, and each gradient as a
// sub-slice of it in its input's logical shape (see Layout).
type Grads[F Float] struct {
	Shape                         Shape
	Packed                        []F
	DQ, DK, DV, DG, DBeta, DState []F
}

// split makes g's named slices views of g.Packed.
func (g *Grads[F]) split() {
	l := g.Shape.Packed()
	p := g.Packed
	g.DQ, g.DK, g.DV = p[l.DQ:l.DK], p[l.DK:l.DV], p[l.DV:l.DG]
	g.DG, g.DBeta, g.DState = p[l.DG:l.DBeta], p[l.DBeta:l.DState], p[l.DState:l.Total]
}

// ScratchStates is the number of S_v x S_k states the backward keeps per
// (head, seq) in flight for T tokens and segment length C: ceil(T/C)
// checkpoints, C states of the segment being replayed, and dM. With C = T
// (keep every state) that is T + 2.
func ScratchStates(T, C int) int {
	if C < 1 || C > T {
		C = T
	}
	return (T+C-1)/C + C + 1
}

// ScratchBytes is the backward's scratch for one (head, seq) in bytes, for
// elements of elemSize bytes: ScratchStates(T, C) states of S_v*S_k
// elements, plus the gathered token rows.
func ScratchBytes(sk, sv, T, C, elemSize int) int {
	return (ScratchStates(T, C)*sk*sv + 6*sk + 4*sv) * elemSize
}

// Backward returns the gradients of a loss L through the op, given
// dy = dL/dy ([S_v, H_v, T, n_seqs], a view like the inputs) and
// dStates = dL/dStates (the forward's state outputs, [S_k, S_v, H_v, n_seqs, K]
// slot-major, or nil for none). It recomputes the states from checkpoints
// every opt.SegmentLength(T) tokens (see Options). The inputs are not
// modified; NaN and Inf propagate as IEEE 754 says.
//
// When several value heads (or sequences) share one q/k head, its dq and dk
// are the sums of their contributions, added in increasing order of
// (seq, value head), whatever the number of threads.
func Backward[F Float](in *Inputs[F], dy Tensor[F], dStates []F, opt Options) (*Grads[F], error) {
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	g := &Grads[F]{Shape: s, Packed: make([]F, s.Packed().Total)}
	g.split()
	if err := backward(g, in, dy, dStates, opt); err != nil {
		return nil, err
	}
	return g, nil
}

// BackwardInto is Backward writing into packed, a caller-owned buffer of
// Shape.Packed().Total elements, which it overwrites. The returned Grads
// views packed.
func BackwardInto[F Float](packed []F, in *Inputs[F], dy Tensor[F], dStates []F, opt Options) (*Grads[F], error) {
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	if want := s.Packed().Total; len(packed) != want {
		return nil, fmt.Errorf("gdn: packed: output buffer has %d elements, want %d ([dq|dk|dv|dg|dbeta|dstate])", len(packed), want)
	}
	g := &Grads[F]{Shape: s, Packed: packed}
	g.split()
	if err := backward(g, in, dy, dStates, opt); err != nil {
		return nil, err
	}
	return g, nil
}

// backScratch is one worker's scratch: the checkpoints, the replayed
// segment, dM and one token's rows.
type backScratch[F Float] struct {
	ckpt, seg, dM []F
	mp, gy        []F
	x             *Token[F]
	g             *TokenGrads[F]
}

func backward[F Float](g *Grads[F], in *Inputs[F], dy Tensor[F], dStates []F, opt Options) error {
	s := g.Shape
	if err := checkView("dy", dy, [4]int{s.Sv, s.Hv, s.T, s.Seqs}, dimNames{"S_v", "H_v", "T", "n_seqs"}); err != nil {
		return fmt.Errorf("gdn: %w", err)
	}
	if dStates != nil && len(dStates) != s.StatesLen() {
		return fmt.Errorf("gdn: dstates: %d elements, want S_k*S_v*H_v*n_seqs*K = %d (K = %d snapshots)", len(dStates), s.StatesLen(), s.Snapshots)
	}
	C := opt.SegmentLength(s.T)
	nck := (s.T + C - 1) / C
	ss := s.Sk * s.Sv
	// dq and dk of each value (head, seq), [S_k, T] per item, summed into
	// the q/k heads below in a fixed order.
	items := s.Hv * s.Seqs
	pdq := make([]F, s.Sk*s.T*items)
	pdk := make([]F, s.Sk*s.T*items)

	newScratch := func() *backScratch[F] {
		return &backScratch[F]{
			ckpt: make([]F, nck*ss), seg: make([]F, C*ss), dM: make([]F, ss),
			mp: make([]F, s.Sk), gy: make([]F, s.Sv),
			g: NewTokenGrads[F](s.Sk, s.Sv),
		}
	}
	parallel(s, opt, newScratch, func(w *backScratch[F], item int) {
		p := newPair(in, opt, s, item)
		if w.x == nil {
			w.x = p.newToken()
		}
		x, tg := w.x, w.g
		state := func(buf []F, n int) []F { return buf[n*ss : (n+1)*ss] }

		// Pass 1: replay the forward, keeping the state before every
		// segment: checkpoint c is M_{cC-1}, the state before token cC.
		p.initialState(state(w.ckpt, 0))
		for c := 1; c < nck; c++ {
			M := state(w.ckpt, c)
			copy(M, state(w.ckpt, c-1))
			for t := (c - 1) * C; t < c*C; t++ {
				p.token(x, t)
				StepForward(M, x, nil)
			}
		}

		// Pass 2: segment by segment from the last, replay the segment from
		// its checkpoint keeping every state, then run the backward through
		// it. seg[i] is the state after token t0+i; the state before t0 is
		// the checkpoint.
		dM := w.dM
		clear(dM)
		for c := nck - 1; c >= 0; c-- {
			t0, t1 := c*C, min((c+1)*C, s.T)
			prev := state(w.ckpt, c)
			for t := t0; t < t1; t++ {
				M := state(w.seg, t-t0)
				copy(M, prev)
				p.token(x, t)
				StepForward(M, x, nil)
				prev = M
			}
			for t := t1 - 1; t >= t0; t-- {
				// term dM, snapshot part: slot T-1-t is M_t.
				if slot := s.T - 1 - t; slot < s.Snapshots && dStates != nil {
					addInto(dM, dStates[p.stateOffset(slot):][:ss])
				}
				Mprev := state(w.ckpt, c)
				if t > t0 {
					Mprev = state(w.seg, t-t0-1)
				}
				p.token(x, t)
				dy.row(w.gy, p.h, t, p.seq)
				StepBackward(dM, Mprev, state(w.seg, t-t0), x, w.gy, tg, w.mp)
				p.store(g, pdq, pdk, item, t, tg)
			}
		}
		termDstate(g.DState[p.stateOffset(0):][:ss], dM)
	})

	// gdn:region dqk-sum
	// dq and dk: each q/k (head, seq) sums the value items that read it, in
	// increasing item order (seq-major, then value head).
	clear(g.DQ)
	clear(g.DK)
	for item := 0; item < items; item++ {
		h, seq := item%s.Hv, item/s.Hv
		hq, sq := s.qkHead(h, seq, opt.Heads)
		for t := 0; t < s.T; t++ {
			src := (item*s.T + t) * s.Sk
			dst := ((sq*s.T+t)*s.Hk + hq) * s.Sk
			addInto(g.DQ[dst:dst+s.Sk], pdq[src:src+s.Sk])
			addInto(g.DK[dst:dst+s.Sk], pdk[src:src+s.Sk])
		}
	}
	// gdn:end
	return nil
}

// gdn:term dstate
// termDstate: the initial state M_{-1} enters the forward only through
// token 0's Mp = M_{-1} diag(a_0), so once the backward has passed token 0,
// dM holds dL/dM_{-1}: the initial state's gradient, whole.
func termDstate[F Float](dstate, dM []F) { copy(dstate, dM) }

// gdn:end

// store writes token t's gradients of this pair into g (dv, dg, dbeta) and
// into the per-item partial sums of dq and dk.
func (p *pair[F]) store(g *Grads[F], pdq, pdk []F, item, t int, tg *TokenGrads[F]) {
	s := p.s
	row := (p.seq*s.T+t)*s.Hv + p.h // index of (h, t, seq) in [·, H_v, T, n_seqs]
	copy(g.DV[row*s.Sv:(row+1)*s.Sv], tg.DV)
	if p.kdaGates {
		copy(g.DG[row*s.Sk:(row+1)*s.Sk], tg.DG)
	} else {
		var dg F
		for _, x := range tg.DG {
			dg += x
		}
		g.DG[row] = dg
	}
	g.DBeta[row] = tg.DBeta
	off := (item*s.T + t) * s.Sk
	copy(pdq[off:off+s.Sk], tg.DQ)
	copy(pdk[off:off+s.Sk], tg.DK)
}

// addInto adds src to dst element by element.
func addInto[F Float](dst, src []F) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
