package gdn

import (
	"fmt"
	"math"
)

// ScratchStates is the number of S_v x S_k states the backward keeps per
// (head, seq) in flight for T tokens and segment length C: ceil(T/C)
// checkpoints, C states of the segment being replayed, and dM. With C = T
// (keep every state) that is T + 2. C < 1 or C > T means T; T < 1 gives 0.
// T must not exceed MaxElems.
func ScratchStates(T, C int) int {
	if T < 1 {
		return 0
	}
	if C < 1 || C > T {
		C = T
	}
	return Segments(T, C) + C + 1
}

// ScratchBytes is the backward's scratch in bytes for one (head, seq) in
// elements of type F, at head sizes sk and sv, T tokens and segment length
// C (C < 1 or C > T means T, keeping every state): ScratchStates(T, C)
// states of S_v*S_k elements, plus the gathered token rows. T, sk or sv
// below 1 give 0; T beyond MaxElems, or a size beyond math.MaxInt, gives
// math.MaxInt.
func ScratchBytes[F Float](sk, sv, T, C int) int {
	if T < 1 || sk < 1 || sv < 1 {
		return 0
	}
	if T > MaxElems {
		return math.MaxInt
	}
	states := satMul(ScratchStates(T, C), sk, sv)
	return satMul(satAdd(states, satAdd(satMul(6, sk), satMul(4, sv))), sizeOf[F]())
}

// satMul and satAdd are a*b and a+b for non-negative ints, saturating at
// math.MaxInt instead of overflowing.
func satMul(n ...int) int {
	p := 1
	for _, x := range n {
		if x != 0 && p > math.MaxInt/x {
			return math.MaxInt
		}
		p *= x
	}
	return p
}

func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// Backward returns the gradients of a loss L through the op, given
// dy = dL/dy ([S_v, H_v, T, n_seqs], a view like the inputs) and
// dStates = dL/dStates (the forward's state outputs,
// [S_k, S_v, H_v, n_seqs, snapshots] slot-major, or nil for none). It
// recomputes the states from checkpoints every opt.SegmentLength(T) tokens
// (see Options). The inputs are not modified; NaN and Inf propagate as
// IEEE 754 says.
//
// When several value heads (or sequences) share one q/k head, its dq and dk
// are the sums of their contributions, added in increasing order of
// (seq, value head), whatever the number of threads.
func Backward[F Float](in *Inputs[F], dy Tensor[F], dStates []F, opt Options) (*Grads[F], error) {
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	g, err := NewGrads(s, make([]F, s.Layout().Total))
	if err != nil {
		return nil, err
	}
	if err := backward(g, in, dy, dStates, opt); err != nil {
		return nil, err
	}
	return g, nil
}

// BackwardInto is Backward writing into packed, a caller-owned buffer of
// Shape.Layout().Total elements, which it overwrites. The returned Grads
// views packed. A packed buffer of the wrong length, or one that shares
// memory with dy, dStates or the elements an input view reads, is an error.
func BackwardInto[F Float](packed []F, in *Inputs[F], dy Tensor[F], dStates []F, opt Options) (*Grads[F], error) {
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	if want := s.Layout().Total; len(packed) != want {
		return nil, fmt.Errorf("gdn: packed: output buffer has %d elements, want %d ([dq|dk|dv|dg|dbeta|dstate])", len(packed), want)
	}
	if err := CheckUpstream(s, dy, dStates); err != nil {
		return nil, err
	}
	inNames, ins := in.ranges()
	inNames = append(inNames, "dy", "dstates")
	ins = append(ins, viewRange(dy), sliceRange(dStates))
	if err := checkOverlap([]string{"packed"}, []memRange{sliceRange(packed)}, inNames, ins); err != nil {
		return nil, err
	}
	g, err := NewGrads(s, packed)
	if err != nil {
		return nil, err
	}
	if err := backward(g, in, dy, dStates, opt); err != nil {
		return nil, err
	}
	return g, nil
}

// backScratch is one worker's scratch: the checkpoints, the replayed
// segment (the state before each of its tokens), dM and one token's rows.
type backScratch[F Float] struct {
	ckpt, seg, dM []F
	mp, gy        []F
	x             *Token[F]
	g             *TokenGrads[F]
}

// state returns state n of buf, a run of S_v*S_k states.
func (w *backScratch[F]) state(buf []F, n int) []F {
	ss := len(w.dM)
	return buf[n*ss : (n+1)*ss]
}

// backCall is what every (head, seq) of one backward call shares: its
// outputs, its upstream gradients, and the per-item partial dq and dk.
type backCall[F Float] struct {
	g        *Grads[F]
	dy       Tensor[F]
	dStates  []F
	pdq, pdk []F // [S_k, T] per item, summed into g.DQ and g.DK at the end
}

// backward runs the two passes, checkpointPass and segmentBackward, on
// every (head, seq) and then sums dq and dk into the q/k heads.
func backward[F Float](g *Grads[F], in *Inputs[F], dy Tensor[F], dStates []F, opt Options) error {
	s := g.Shape
	if err := CheckUpstream(s, dy, dStates); err != nil {
		return err
	}
	C := opt.SegmentLength(s.T)
	nck := Segments(s.T, C)
	ss := s.Sk * s.Sv
	// dq and dk of each value (head, seq), [S_k, T] per item, summed into
	// the q/k heads below in a fixed order.
	items := s.Hv * s.Seqs
	pdq := make([]F, s.Sk*s.T*items)
	pdk := make([]F, s.Sk*s.T*items)
	call := &backCall[F]{g: g, dy: dy, dStates: dStates, pdq: pdq, pdk: pdk}

	newScratch := func() *backScratch[F] {
		return &backScratch[F]{
			ckpt: make([]F, nck*ss), seg: make([]F, C*ss), dM: make([]F, ss),
			mp: make([]F, s.Sk), gy: make([]F, s.Sv),
			g: NewTokenGrads[F](s.Sk, s.Sv),
		}
	}
	recurrent := func(w *backScratch[F], item int) {
		p := newPair(in, opt, s, item)
		if w.x == nil {
			w.x = p.newToken()
		}
		checkpointPass(p, w, C, nck)
		clear(w.dM)
		for c := nck - 1; c >= 0; c-- {
			segmentBackward(p, w, call, item, c*C, min((c+1)*C, s.T), w.state(w.ckpt, c))
		}
		termDstate(g.DState[p.stateOffset(0):][:ss], w.dM)
	}
	if opt.Algo == Chunk {
		backwardChunk(g, in, dy, dStates, opt, pdq, pdk)
	} else {
		parallel(s, opt, newScratch, recurrent)
	}

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

// checkpointPass is the backward's first pass over one (head, seq): it
// replays the forward and keeps the state before every segment of C
// tokens in w.ckpt: checkpoint c is M_{cC-1}, the state before token cC.
func checkpointPass[F Float](p *pair[F], w *backScratch[F], C, nck int) {
	p.initialState(w.state(w.ckpt, 0))
	for c := 1; c < nck; c++ {
		M := w.state(w.ckpt, c)
		copy(M, w.state(w.ckpt, c-1))
		for t := (c - 1) * C; t < c*C; t++ {
			p.token(w.x, t)
			StepForward(M, w.x, nil)
		}
	}
}

// segmentBackward is the backward's second pass over tokens t0 to t1-1 of
// one (head, seq), run segment by segment from the last. It replays the
// segment from its checkpoint ckpt (M_{t0-1}), storing the state before
// each token in w.seg (slot i holds M_{t0+i-1}, the package doc's one
// convention), then runs StepBackward through the segment from its last
// token, carrying dL/dM in w.dM (dL/dM_{t1-1} on entry, dL/dM_{t0-1} on
// return). The replay advances ckpt in place, so that it ends as M_{t1-1},
// the state after the last token, which StepBackward of that token reads;
// no later segment reads checkpoint c again.
func segmentBackward[F Float](p *pair[F], w *backScratch[F], call *backCall[F], item, t0, t1 int, ckpt []F) {
	s, x := p.s, w.x
	M := ckpt // the running state, M_{t-1} when token t comes
	for t := t0; t < t1; t++ {
		copy(w.state(w.seg, t-t0), M)
		p.token(x, t)
		StepForward(M, x, nil)
	}
	Mt := M // M_{t1-1}
	for t := t1 - 1; t >= t0; t-- {
		// term dM, snapshot part: slot T-1-t is M_t.
		if slot := s.T - 1 - t; slot < s.Snapshots && call.dStates != nil {
			addInto(w.dM, call.dStates[p.stateOffset(slot):][:len(w.dM)])
		}
		Mprev := w.state(w.seg, t-t0)
		p.token(x, t)
		call.dy.row(w.gy, p.h, t, p.seq)
		StepBackward(w.dM, Mprev, Mt, x, w.gy, w.g, w.mp)
		p.store(call.g, call.pdq, call.pdk, item, t, w.g)
		Mt = Mprev
	}
}

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
