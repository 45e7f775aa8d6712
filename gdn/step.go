package gdn

// One token of one (head, seq): the local map of the recurrence and its
// backward, term by term. Everything else in this package is bookkeeping
// around these two functions.
//
// A state M is S_v x S_k, stored row-major: row j (a value index) holds the
// S_k key columns contiguously, M[j][i] = M[j*S_k+i]. Every loop below walks
// one row at a time, so that a row of M, dM and Mp stays in cache while all
// the terms that need it run.

// Token holds one token's inputs for one (head, seq), gathered into
// contiguous rows.
type Token[F Float] struct {
	Q, K  []F // [S_k]
	V     []F // [S_v]
	A     []F // [S_k] decay a = exp(g); a scalar gate is repeated over the S_k key channels
	Beta  F
	Scale F
}

// StepForward advances the state by one token, in place: M holds M_{t-1} on
// entry and M_t on return. When y is not nil it receives y_t = scale*M_t q_t
// ([S_v]).
//
// StepForward is the inner loop of Forward and does no checking: M must
// hold S_v*S_k elements and y (when not nil) S_v, with S_k = len(x.K) and
// S_v = len(x.V); other lengths are a programmer's error and panic with an
// index out of range.
func StepForward[F Float](M []F, x *Token[F], y []F) {
	sk := len(x.K)
	for j := range x.V {
		row := M[j*sk : (j+1)*sk]
		// Mp = M diag(a), u_j = sum_i Mp[j][i] k_i
		u := decayDot(row, row, x.A, x.K)
		// d = beta (v - u)
		d := x.Beta * (x.V[j] - u)
		// M = Mp + d k^T, and y_j = scale * sum_i M[j][i] q_i
		yj := rankOneDot(row, d, x.K, x.Q)
		if y != nil {
			y[j] = x.Scale * yj
		}
	}
}

// decayDot writes dst = src .* a and returns dst . k. dst may be src.
// The backward calls it to recompute Mp and u exactly as the forward did:
// the same operations in the same order give the same bits.
func decayDot[F Float](dst, src, a, k []F) F {
	src, a, k = src[:len(dst)], a[:len(dst)], k[:len(dst)]
	for i := range dst {
		dst[i] = src[i] * a[i]
	}
	return dot(dst, k)
}

// rankOneDot adds d*k to row and returns the new row . q.
func rankOneDot[F Float](row []F, d F, k, q []F) F {
	k = k[:len(row)]
	for i := range row {
		row[i] += d * k[i]
	}
	return dot(row, q)
}

// dot returns x . y. It keeps four partial sums, added as (s0+s1)+(s2+s3)
// at the end: a single running sum makes every add wait for the one before
// it, which on its own makes the whole step several times slower. The order
// is fixed, so the result is the same bits on every call.
func dot[F Float](x, y []F) F {
	y = y[:len(x)]
	var s0, s1, s2, s3 F
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 += xs[0] * ys[0]
		s1 += xs[1] * ys[1]
		s2 += xs[2] * ys[2]
		s3 += xs[3] * ys[3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// TokenGrads are the gradients of one token of one (head, seq), and the
// intermediates dd and du, kept so that each term can be checked on its own.
type TokenGrads[F Float] struct {
	DQ, DK []F // [S_k]
	DV     []F // [S_v]
	DG     []F // [S_k] per key channel; a scalar gate's dg is their sum
	DBeta  F
	DD, DU []F // [S_v] dd = dL/dd and du = dL/du
}

// NewTokenGrads allocates the gradients of one token. Negative sizes panic,
// as make does.
func NewTokenGrads[F Float](sk, sv int) *TokenGrads[F] {
	return &TokenGrads[F]{
		DQ: make([]F, sk), DK: make([]F, sk), DG: make([]F, sk),
		DV: make([]F, sv), DD: make([]F, sv), DU: make([]F, sv),
	}
}

// StepBackward runs the backward of one token. On entry dM holds dL/dM_t
// from every later use of M_t (the next token and any snapshot of M_t), but
// not yet from y_t; on return it holds dL/dM_{t-1}. Mprev is M_{t-1}, Mt is
// M_t, gy is dL/dy_t. mp is scratch of S_k elements for one row of Mp.
// The gradients of the token's inputs are written to g, overwriting it.
//
// Like StepForward it does no checking: states of S_v*S_k elements, gy of
// S_v, mp of S_k and g from NewTokenGrads(S_k, S_v), or it panics with an
// index out of range.
func StepBackward[F Float](dM, Mprev, Mt []F, x *Token[F], gy []F, g *TokenGrads[F], mp []F) {
	sk := len(x.K)
	clear(g.DQ)
	clear(g.DK)
	clear(g.DG)
	g.DBeta = 0
	for j := range x.V {
		dMj := dM[j*sk : (j+1)*sk]
		c := x.Scale * gy[j]

		// In the forward pass this was: y_j = scale * sum_i M_t[j][i] q_i,
		// so now we have:
		termDM(dMj, c, x.Q)                // dM[j] += scale gy_j q
		termDq(g.DQ, c, Mt[j*sk:(j+1)*sk]) // dq += scale gy_j M_t[j]

		// Recompute this row of the decayed state and u, as the forward did:
		// Mp[j] = M_{t-1}[j] .* a, u_j = Mp[j] . k, d_j = beta (v_j - u_j).
		u := decayDot(mp, Mprev[j*sk:(j+1)*sk], x.A, x.K)
		d := x.Beta * (x.V[j] - u)

		// In the forward pass this was: M_t[j] = Mp[j] + d_j k,
		// so now we have:
		dd := termDd(dMj, x.K) // dd_j = dM[j] . k
		// and d_j = beta (v_j - u_j) gives:
		g.DV[j] = termDv(x.Beta, dd)
		du := termDu(x.Beta, dd)
		g.DBeta += termDbeta(dd, x.V[j], u)
		g.DD[j], g.DU[j] = dd, du
		// k appears in M_t = Mp + d k^T and in u = Mp k:
		termDk(g.DK, dMj, d, mp, du) // dM read before the du update below

		// Mp appears in M_t = Mp + d k^T and in u = Mp k:
		termDMp(dMj, du, x.K) // dM[j] becomes dMp[j]
		// and Mp = M_{t-1} diag(exp(g)):
		termDg(g.DG, dMj, mp)
		termDSPrev(dMj, x.A) // dMp[j] becomes dM_{t-1}[j]
	}
}

// gdn:term dM
// termDM adds the output's gradient to row j of dM:
// dM[j][i] += scale * gy_j * q_i, where c = scale * gy_j.
func termDM[F Float](dMj []F, c F, q []F) {
	q = q[:len(dMj)]
	for i := range dMj {
		dMj[i] += c * q[i]
	}
}

// gdn:end

// gdn:term dq
// termDq accumulates dq = scale * M_t^T gy one row at a time:
// dq_i += scale * gy_j * M_t[j][i], where c = scale * gy_j.
func termDq[F Float](dq []F, c F, Mtj []F) {
	Mtj = Mtj[:len(dq)]
	for i := range dq {
		dq[i] += c * Mtj[i]
	}
}

// gdn:end

// gdn:term dd
// termDd returns dd_j = sum_i dM[j][i] k_i, the gradient of d_j through
// M_t = Mp + d k^T.
func termDd[F Float](dMj, k []F) F {
	return dot(dMj, k)
}

// gdn:end

// gdn:term dv
// termDv returns dv_j = beta * dd_j: d = beta (v - u) is linear in v.
func termDv[F Float](beta, dd F) F { return beta * dd }

// gdn:end

// gdn:term du
// termDu returns du_j = -beta * dd_j: d = beta (v - u) has slope -beta in u.
func termDu[F Float](beta, dd F) F { return -beta * dd }

// gdn:end

// gdn:term dbeta
// termDbeta returns row j's share of dbeta = sum_j dd_j (v_j - u_j).
func termDbeta[F Float](dd, vj, uj F) F { return dd * (vj - uj) }

// gdn:end

// gdn:term dk
// termDk adds row j's share of dk = dM^T d + Mp^T du: k enters
// M_t = Mp + d k^T (through row j as d_j k) and u = Mp k (as Mp[j] . k).
// dM must not yet hold the du update of termDMp.
func termDk[F Float](dk, dMj []F, d F, mpj []F, du F) {
	dMj, mpj = dMj[:len(dk)], mpj[:len(dk)]
	for i := range dk {
		dk[i] += dMj[i]*d + mpj[i]*du
	}
}

// gdn:end

// gdn:term dMp
// termDMp turns row j of dM into row j of dMp = dM + du k^T, in place:
// Mp reaches the loss directly through M_t = Mp + d k^T and through
// u = Mp k, d = beta (v - u).
func termDMp[F Float](dMj []F, du F, k []F) {
	k = k[:len(dMj)]
	for i := range dMj {
		dMj[i] += du * k[i]
	}
}

// gdn:end

// gdn:term dg
// termDg adds row j's share of dg_i = sum_j dMp[j][i] Mp[j][i]: since
// Mp[j][i] = M_{t-1}[j][i] exp(g_i), dMp/dg_i = Mp[j][i]. A scalar gate's
// dg is the sum of these over i.
func termDg[F Float](dg, dMpj, mpj []F) {
	dMpj, mpj = dMpj[:len(dg)], mpj[:len(dg)]
	for i := range dg {
		dg[i] += dMpj[i] * mpj[i]
	}
}

// gdn:end

// gdn:term dS_prev
// termDSPrev turns row j of dMp into row j of dM_{t-1} = dMp diag(a), in
// place: Mp = M_{t-1} diag(a).
func termDSPrev[F Float](dMj, a []F) {
	a = a[:len(dMj)]
	for i := range dMj {
		dMj[i] *= a[i]
	}
}

// gdn:end

// gdn:term dstate
// termDstate: the initial state M_{-1} enters the forward only through
// token 0's Mp = M_{-1} diag(a_0), so once the backward has passed token 0,
// dM holds dL/dM_{-1}: the initial state's gradient, whole.
func termDstate[F Float](dstate, dM []F) { copy(dstate, dM) }

// gdn:end
