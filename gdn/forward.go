package gdn

import "fmt"

// ForwardResult holds the forward's outputs, contiguous, in ggml's order.
type ForwardResult[F Float] struct {
	Shape Shape
	// Y is [S_v, H_v, T, n_seqs].
	Y []F
	// States is [S_k, S_v, H_v, n_seqs, snapshots], slot-major: slot 0 (the first
	// StateLen elements) is the final state, slot s the state after token
	// T-1-s. Each slot has the initial state's layout.
	States []F
}

// Forward runs the gated delta rule over every (head, seq) and returns y and
// the state snapshots. The inputs are not modified. It returns an error,
// naming the tensor and dimension, for any inconsistent input. NaN and Inf in
// the inputs propagate through the arithmetic as IEEE 754 says; they are not
// errors.
func Forward[F Float](in *Inputs[F], opt Options) (*ForwardResult[F], error) {
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	r := &ForwardResult[F]{Shape: s, Y: make([]F, s.YLen()), States: make([]F, s.StatesLen())}
	if err := forward(in, opt, s, r.Y, r.States); err != nil {
		return nil, err
	}
	return r, nil
}

// ForwardInto is Forward writing into caller-owned buffers: y of
// Shape.YLen() and states of Shape.StatesLen() elements, both overwritten.
// It reports as errors buffers of the wrong length, and buffers that share
// memory with each other or with the elements an input view reads.
func ForwardInto[F Float](y, states []F, in *Inputs[F], opt Options) (Shape, error) {
	s, err := in.Shape(opt)
	if err != nil {
		return s, err
	}
	if len(y) != s.YLen() {
		return s, fmt.Errorf("gdn: y: output buffer has %d elements, want S_v*H_v*T*n_seqs = %d", len(y), s.YLen())
	}
	if len(states) != s.StatesLen() {
		return s, fmt.Errorf("gdn: states: output buffer has %d elements, want S_k*S_v*H_v*n_seqs*snapshots = %d", len(states), s.StatesLen())
	}
	inNames, ins := in.ranges()
	if err := checkOverlap([]string{"y", "states"}, []memRange{sliceRange(y), sliceRange(states)}, inNames, ins); err != nil {
		return s, err
	}
	return s, forward(in, opt, s, y, states)
}

func forward[F Float](in *Inputs[F], opt Options, s Shape, y, states []F) error {
	if opt.Algo == Chunk {
		forwardChunk(in, opt, s, y, states)
		return nil
	}
	parallel(s, opt, func() []F { return make([]F, s.Sk*s.Sv) }, func(M []F, item int) {
		p := newPair(in, opt, s, item)
		p.initialState(M)
		x := p.newToken()
		h, seq := p.h, p.seq
		for t := 0; t < s.T; t++ {
			p.token(x, t)
			// y is [S_v, H_v, T, n_seqs]: the row of (h, t, seq).
			yoff := ((seq*s.T+t)*s.Hv + h) * s.Sv
			StepForward(M, x, y[yoff:yoff+s.Sv])
			if slot := s.T - 1 - t; slot < s.Snapshots {
				copy(states[p.stateOffset(slot):], M)
			}
		}
	})
	return nil
}
