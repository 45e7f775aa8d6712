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

// Layout returns the layout of the packed gradient buffer for s.
func (s Shape) Layout() Layout {
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

// NewGrads returns the Grads of shape s whose named gradients are views of
// packed, a buffer laid out as s.Layout() says (a Backend's Backward
// output, say); packed is not copied. A shape that Shape.Check refuses and
// a packed of the wrong length are errors.
func NewGrads[F Float](s Shape, packed []F) (*Grads[F], error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	l := s.Layout()
	if len(packed) != l.Total {
		return nil, fmt.Errorf("gdn: packed: %d elements, want %d ([dq|dk|dv|dg|dbeta|dstate])", len(packed), l.Total)
	}
	p := packed
	return &Grads[F]{Shape: s, Packed: packed,
		DQ: p[l.DQ:l.DK], DK: p[l.DK:l.DV], DV: p[l.DV:l.DG],
		DG: p[l.DG:l.DBeta], DBeta: p[l.DBeta:l.DState], DState: p[l.DState:l.Total]}, nil
}

// Blocks returns the six gradients in the packed order dq, dk, dv, dg,
// dbeta, dstate (the names of BlockNames).
func (g *Grads[F]) Blocks() [6][]F {
	return [6][]F{g.DQ, g.DK, g.DV, g.DG, g.DBeta, g.DState}
}

// BlockNames names the blocks of the packed buffer, in order.
var BlockNames = [6]string{"dq", "dk", "dv", "dg", "dbeta", "dstate"}

// CheckUpstream checks the backward's upstream gradients against a call of
// shape s: dy must be a view of shape [S_v, H_v, T, n_seqs] inside its
// data, and dStates nil or of s.StatesLen() elements. The error names the
// tensor and the dimension at fault (or, for a shape that Shape.Check
// refuses, the shape's field).
func CheckUpstream[F Float](s Shape, dy Tensor[F], dStates []F) error {
	if err := s.Check(); err != nil {
		return err
	}
	if err := checkView("dy", dy, [4]int{s.Sv, s.Hv, s.T, s.Seqs}, dimNames{"S_v", "H_v", "T", "n_seqs"}); err != nil {
		return fmt.Errorf("gdn: %w", err)
	}
	if dStates != nil && len(dStates) != s.StatesLen() {
		return fmt.Errorf("gdn: dstates: %d elements, want S_k*S_v*H_v*n_seqs*snapshots = %d (%d snapshots)", len(dStates), s.StatesLen(), s.Snapshots)
	}
	return nil
}
