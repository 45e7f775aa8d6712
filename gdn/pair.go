package gdn

import (
	"sync"
	"sync/atomic"
)

// pair is one (value head, sequence) of a call: where its inputs are.
type pair[F Float] struct {
	in       *Inputs[F]
	s        Shape
	h, seq   int // value head and sequence
	hq, sq   int // q/k head and sequence it reads
	scale    F
	gateBuf  []F
	kdaGates bool
}

// newPair locates item (item = seq*H_v + h).
func newPair[F Float](in *Inputs[F], opt Options, s Shape, item int) *pair[F] {
	h, seq := item%s.Hv, item/s.Hv
	hq, sq := s.qkHead(h, seq, opt.Heads)
	return &pair[F]{in: in, s: s, h: h, seq: seq, hq: hq, sq: sq,
		scale: F(opt.ScaleFor(s.Sk)), gateBuf: make([]F, s.GateWidth), kdaGates: s.KDA()}
}

func (p *pair[F]) newToken() *Token[F] {
	return &Token[F]{
		Q: make([]F, p.s.Sk), K: make([]F, p.s.Sk), V: make([]F, p.s.Sv), A: make([]F, p.s.Sk),
		Scale: p.scale,
	}
}

// token gathers token t's inputs into x.
func (p *pair[F]) token(x *Token[F], t int) {
	in := p.in
	in.Q.row(x.Q, p.hq, t, p.sq)
	in.K.row(x.K, p.hq, t, p.sq)
	in.V.row(x.V, p.h, t, p.seq)
	in.G.row(p.gateBuf, p.h, t, p.seq)
	if p.kdaGates {
		for i, g := range p.gateBuf {
			x.A[i] = exp(g)
		}
	} else {
		a := exp(p.gateBuf[0])
		for i := range x.A {
			x.A[i] = a
		}
	}
	x.Beta = in.Beta.At(0, p.h, t, p.seq)
}

// initialState writes this pair's initial state (zeros when none) into M.
func (p *pair[F]) initialState(M []F) {
	st := p.in.State
	if st.Data == nil {
		clear(M)
		return
	}
	for j := 0; j < p.s.Sv; j++ {
		st.row(M[j*p.s.Sk:(j+1)*p.s.Sk], j, p.h, p.seq)
	}
}

// stateOffset is where slot's state of this pair starts in a
// [S_k, S_v, H_v, n_seqs, snapshots] buffer.
func (p *pair[F]) stateOffset(slot int) int {
	return ((slot*p.s.Seqs+p.seq)*p.s.Hv + p.h) * p.s.Sk * p.s.Sv
}

// parallel runs fn on every (head, seq) item, seq-major (item = seq*H_v + h),
// on up to opt.Threads goroutines, each with its own scratch made by
// newScratch. Items write disjoint outputs, so the result does not depend on
// the order in which they run.
func parallel[W any](s Shape, opt Options, newScratch func() W, fn func(w W, item int)) {
	n := s.Hv * s.Seqs
	workers := opt.threads(n)
	if workers == 1 {
		w := newScratch()
		for i := 0; i < n; i++ {
			fn(w, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			w := newScratch()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(w, i)
			}
		})
	}
	wg.Wait()
}
