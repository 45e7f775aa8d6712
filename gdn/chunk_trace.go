package gdn

import "fmt"

// ChunkTrace holds every intermediate of one chunk's forward and backward,
// token by token (row r is the chunk's token r): what TraceChunk returns.
type ChunkTrace[F Float] struct {
	// The forward: u_r = M0 (Λ_r ⊙ k_r) + sum_{s<r} A_rs d_s,
	// d_r = beta_r (v_r - u_r), y_r, and the state after the chunk.
	U, D, Y [][]F
	A, P    [][]F // A[r][s] for s < r, P[r][s] for s <= r (zero elsewhere)
	M       []F
	// The backward: dL/dd_r and dL/du_r (the recurrence's TokenGrads.DD
	// and DU), the inputs' gradients (DG per key channel, as TokenGrads),
	// and dL/dM0.
	DD, DU, DV, DQ, DK, DG [][]F
	DBeta                  []F
	DM0                    []F
}

// TraceChunk runs the Chunk algorithm's forward and backward over one chunk
// of n = len(xs) tokens of one (head, seq), from the state M0 before it
// (S_v x S_k, row-major), with dM = dL/dM_n (the state after the chunk) and
// gy[r] = dL/dy_r, and returns every intermediate. It is the arithmetic that
// Forward and Backward run per chunk, exposed so that the derivation can
// check each term against StepForward and StepBackward. The decays are the
// tokens' A (exp of the log gates), one per key channel; the scale is
// xs[0].Scale. M0, dM, gy and xs are not modified.
func TraceChunk[F Float](M0 []F, xs []*Token[F], dM []F, gy [][]F) (*ChunkTrace[F], error) {
	n := len(xs)
	if n == 0 {
		return nil, fmt.Errorf("gdn: TraceChunk: no tokens")
	}
	sk, sv := len(xs[0].K), len(xs[0].V)
	if len(M0) != sk*sv || len(dM) != sk*sv || len(gy) != n {
		return nil, fmt.Errorf("gdn: TraceChunk: M0 and dM need S_v*S_k = %d elements (have %d, %d), gy %d rows (has %d)", sk*sv, len(M0), len(dM), n, len(gy))
	}
	s := Shape{Sk: sk, Sv: sv, GateWidth: sk}
	w := newChunkWork[F](s, n)
	w.kda = true
	for r, x := range xs {
		if len(x.Q) != sk || len(x.K) != sk || len(x.A) != sk || len(x.V) != sv || len(gy[r]) != sv {
			return nil, fmt.Errorf("gdn: TraceChunk: token %d: q, k, a need S_k = %d and v, gy S_v = %d elements", r, sk, sv)
		}
		copy(rows(w.q, r, sk), x.Q)
		copy(rows(w.k, r, sk), x.K)
		copy(rows(w.v, r, sv), x.V)
		for i, a := range x.A {
			w.dec[r*sk+i] = float64(a)
		}
		w.beta[r] = x.Beta
	}
	scale := xs[0].Scale
	tr := &ChunkTrace[F]{M: append([]F(nil), M0...), DM0: append([]F(nil), dM...)}
	w.pairs(n)
	w.solve(M0, n)
	w.outputs(M0, n, scale)
	w.advance(tr.M, n)
	split := func(b []F, width int) [][]F {
		out := make([][]F, n)
		for r := range out {
			out[r] = append([]F(nil), rows(b, r, width)...)
		}
		return out
	}
	tr.U, tr.D, tr.Y = split(w.u, sv), split(w.d, sv), split(w.y, sv)
	tr.A, tr.P = split(w.a, n), split(w.p, n)
	for r := range n {
		for c := r; c < n; c++ {
			tr.A[r][c] = 0
			if c > r {
				tr.P[r][c] = 0
			}
		}
	}
	for r := range n {
		copy(rows(w.gy, r, sv), gy[r])
	}
	w.backward(M0, tr.DM0, n, scale)
	tr.DD, tr.DU, tr.DV = split(w.dd, sv), split(w.du, sv), split(w.dv, sv)
	tr.DQ, tr.DK, tr.DG = split(w.dq, sk), split(w.dk, sk), split(w.dg, sk)
	tr.DBeta = append([]F(nil), w.beta[:0]...)
	tr.DBeta = append(tr.DBeta, w.dbeta[:n]...)
	return tr, nil
}
