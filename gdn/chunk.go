package gdn

import (
	"fmt"
	"math"
)

// The chunkwise (WY) form of the recurrence: the same outputs, computed
// over chunks of L tokens with matrix products against the state at the
// chunk's start and one triangular solve per chunk, so that the sequential
// work drops from T steps to about T/L. derivation/05-chunkwise.md derives
// every line below from StepForward and StepBackward.
//
// Within a chunk of n tokens r = 0..n-1 with M0 the state before it, let
// Γ_rs = exp(g_{s+1} + ... + g_r) for -1 <= s <= r (a vector over the key
// channels for KDA, one number otherwise; Γ_rr = 1, and Λ_r = Γ_{r,-1} is the
// decay from the chunk's start). Unrolling M_r = M_{r-1} diag(a_r) + d_r k_r^T:
//
//	M_r = M0 diag(Λ_r) + sum_{s<=r} d_s (Γ_rs ⊙ k_s)^T
//	u_r = M_{r-1} diag(a_r) k_r = M0 (Λ_r ⊙ k_r) + sum_{s<r} A_rs d_s,  A_rs = k_r . (Γ_rs ⊙ k_s)
//	d_r = beta_r (v_r - u_r)
//	y_r = scale (M0 (Λ_r ⊙ q_r) + sum_{s<=r} P_rs d_s),                P_rs = q_r . (Γ_rs ⊙ k_s)
//
// The middle two lines are the lower-triangular system
// (I + diag(beta) A) D = diag(beta) (V - K̂ M0^T), solved by forward
// substitution row by row (the UT transform's solve; no inverse is formed).
//
// Numerical safety: every decay Γ_rs is the running product
// a_{s+1} a_{s+2} ... a_r of the per-token decays a_t = exp(g_t) <= 1, taken
// in float64 pair by pair, as the recurrence itself applies them: never a
// ratio exp(G_r) / exp(G_s) of cumulative decays, never an exp of a positive
// number, so every factor lies in [0, 1] whatever the gates
// (test-backend-ops draws g down to -20 per token: 64 tokens would reach
// e^1280 in the factored form exp(G_r) exp(-G_s)). A product that falls
// below the smallest normal number of F is set to zero, so that neither
// the running product nor the arithmetic on it meets subnormals. The price
// is one multiply per pair and key channel for KDA (L/2 per token and
// channel on average), one per pair for a scalar gate; only the T*S_k (or
// T) decays a_t take an exp, as in the recurrence.

// Algo selects how Forward and Backward compute the recurrence.
type Algo int

const (
	// Recurrent runs the recurrence token by token: the definition.
	Recurrent Algo = iota
	// Chunk runs the chunkwise (WY) form over chunks of Options.ChunkLen
	// tokens.
	Chunk
)

// DefaultChunkLen is the chunk length L when Options.ChunkLen is 0 (fla's).
const DefaultChunkLen = 64

func (a Algo) String() string {
	switch a {
	case Recurrent:
		return "recurrent"
	case Chunk:
		return "chunk"
	}
	return fmt.Sprintf("Algo(%d)", int(a))
}

// ParseAlgo reads "recurrent" or "chunk".
func ParseAlgo(s string) (Algo, error) {
	switch s {
	case "recurrent":
		return Recurrent, nil
	case "chunk":
		return Chunk, nil
	}
	return 0, fmt.Errorf("gdn: algo %q: want recurrent or chunk", s)
}

// ChunkLength returns the chunk length L that opt gives: ChunkLen, or
// DefaultChunkLen when it is 0.
func (opt Options) ChunkLength() int {
	if opt.ChunkLen <= 0 {
		return DefaultChunkLen
	}
	return opt.ChunkLen
}

// chunkStarts returns the first token of every chunk, then T. Chunks are L
// tokens long from the start, except that every token whose state is a
// snapshot (the last `snapshots` tokens) ends a chunk: tokens up to
// T-snapshots run in chunks of L (the last of them possibly shorter), and
// each of the other snapshot tokens is a chunk of its own. With one
// snapshot (the final state) that is simply chunks of L and a final partial
// chunk.
func chunkStarts(T, L, snapshots int) []int {
	snapshots = max(snapshots, 1)
	e := T - snapshots + 1 // the regular chunks cover tokens [0, e)
	var st []int
	for t := 0; t < e; t += L {
		st = append(st, t)
	}
	for t := e; t < T; t++ {
		st = append(st, t)
	}
	return append(st, T)
}

// ChunkCount is the number of chunks the Chunk algorithm cuts T tokens
// into for chunk length L and the given number of snapshots (see
// Options.Snapshots): len(chunkStarts) - 1, counted without making the
// list, so that planning a long T allocates nothing.
func ChunkCount(T, L, snapshots int) int {
	L, snapshots = max(L, 1), max(snapshots, 1)
	e := T - snapshots + 1 // the regular chunks cover tokens [0, e)
	n := max(T-e, 0)       // one chunk per snapshot token after them
	if e > 0 {
		n += (e-1)/L + 1
	}
	return n
}

// ChunkScratchBytes is the chunk backward's scratch for one (head, seq) of
// a call of shape s, in bytes of elements of type F, for chunk length L
// (0 means DefaultChunkLen): the state before every chunk (ChunkCount of
// them) and dM, S_v*S_k elements each, plus one chunk's working rows and
// L x L matrices. The planner reports it beside ScratchBytes. A shape
// that Shape.Check refuses gives 0.
func ChunkScratchBytes[F Float](s Shape, L int) int {
	if s.Check() != nil {
		return 0
	}
	if L <= 0 {
		L = DefaultChunkLen
	}
	L = max(1, min(L, s.T))
	ss := s.Sk * s.Sv
	return ((ChunkCount(s.T, L, s.Snapshots)+1)*ss+chunkWorkElems(s.Sk, s.Sv, s.GateWidth, L))*sizeOf[F]() +
		8*chunkWork64(s.GateWidth, L)
}

// chunkWork is one worker's scratch for one chunk: the chunk's tokens
// gathered into rows (row r of a [L][S] buffer is token t0+r), the pair
// matrices A and P, and the backward's gradients.
type chunkWork[F Float] struct {
	sk, sv, gw int
	kda        bool

	// the chunk's inputs
	q, k []F       // [L][S_k]
	v    []F       // [L][S_v]
	beta []F       // [L]
	dec  []float64 // [L][gw] decays a = exp(g), in float64 for the decay products

	// forward quantities
	kd, qd []F       // [L][S_k] Λ_r ⊙ k_r and Λ_r ⊙ q_r
	kl     []F       // [L][S_k] Γ_{n-1,s} ⊙ k_s: token s's share of the final state
	lam    []F       // [S_k] Λ_{n-1}, the decay over the whole chunk
	a, p   []F       // [L][L] A_rs (s < r) and P_rs (s <= r), row r
	u, d   []F       // [L][S_v]
	y      []F       // [L][S_v]
	gams   []F       // [L][S_k] Γ_rs for one s and every r, expanded over S_k
	tmp    []F       // [S_k]
	x      []float64 // [gw] a running decay product

	// backward quantities
	gy, dd, du  []F // [L][S_v]
	dq, dk      []F // [L][S_k]
	dkd, dqd, w []F // [L][S_k]
	dlam, dgam  []F // [S_k]
	dA, dP      []F // [L][L]
	dg          []F // [L][gw]
	acc         []F // [gw]
	dv          []F // [L][S_v]
	dbeta       []F // [L]
}

// chunkWorkElems is the number of F elements of a chunkWork for chunks of
// L tokens and gate width gw.
func chunkWorkElems(sk, sv, gw, L int) int {
	return 11*L*sk + 8*L*sv + 4*L*L + 4*sk + 2*L + (L+1)*gw
}

// chunkWork64 is the number of float64 elements of a chunkWork: the
// chunk's gates and one running exponent.
func chunkWork64(gw, L int) int { return (L + 1) * gw }

func newChunkWork[F Float](s Shape, L int) *chunkWork[F] {
	sk, sv, gw := s.Sk, s.Sv, s.GateWidth
	buf := make([]F, chunkWorkElems(sk, sv, gw, L))
	take := func(n int) []F {
		b := buf[:n:n]
		buf = buf[n:]
		return b
	}
	w := &chunkWork[F]{sk: sk, sv: sv, gw: gw, kda: s.KDA()}
	w.q, w.k, w.kd, w.qd, w.kl, w.gams = take(L*sk), take(L*sk), take(L*sk), take(L*sk), take(L*sk), take(L*sk)
	w.dq, w.dk, w.dkd, w.dqd, w.w = take(L*sk), take(L*sk), take(L*sk), take(L*sk), take(L*sk)
	w.v, w.u, w.d, w.y, w.gy, w.dd, w.du, w.dv = take(L*sv), take(L*sv), take(L*sv), take(L*sv), take(L*sv), take(L*sv), take(L*sv), take(L*sv)
	w.a, w.p, w.dA, w.dP = take(L*L), take(L*L), take(L*L), take(L*L)
	w.lam, w.tmp, w.dlam, w.dgam = take(sk), take(sk), take(sk), take(sk)
	w.beta, w.dbeta = take(L), take(L)
	w.dg, w.acc = take(L*gw), take(gw)
	w.dec = make([]float64, L*gw)
	w.x = make([]float64, gw)
	return w
}

// rows returns row r of a [·][n] buffer.
func rows[F Float](b []F, r, n int) []F { return b[r*n : (r+1)*n : (r+1)*n] }

// gather copies tokens t0..t0+n-1 of pair p into the chunk's rows.
func (w *chunkWork[F]) gather(p *pair[F], t0, n int) {
	in := p.in
	for r := 0; r < n; r++ {
		t := t0 + r
		in.Q.row(rows(w.q, r, w.sk), p.hq, t, p.sq)
		in.K.row(rows(w.k, r, w.sk), p.hq, t, p.sq)
		in.V.row(rows(w.v, r, w.sv), p.h, t, p.seq)
		in.G.row(p.gateBuf, p.h, t, p.seq)
		for i, g := range p.gateBuf {
			w.dec[r*w.gw+i] = math.Exp(float64(g))
		}
		w.beta[r] = in.Beta.At(0, p.h, t, p.seq)
	}
}

// gdn:term chunk-decay
// decays writes Γ_rs = a_{s+1} ... a_r for r = s+1..n-1 into rows r of
// w.gams (expanded over the S_k key channels for a scalar gate). s may be
// -1 (the chunk's start). The product runs in float64 and only ever
// shrinks; below F's smallest normal number it is zero.
func (w *chunkWork[F]) decays(s, n int) {
	x, tiny := w.x, minNormal[F]()
	for i := range x {
		x[i] = 1
	}
	for r := s + 1; r < n; r++ {
		gam := rows(w.gams, r, w.sk)
		a := w.dec[r*w.gw : (r+1)*w.gw]
		if w.kda {
			for i := range gam {
				x[i] = flush(x[i]*a[i], tiny)
				gam[i] = F(x[i])
			}
		} else {
			x[0] = flush(x[0]*a[0], tiny)
			e := F(x[0])
			for i := range gam {
				gam[i] = e
			}
		}
	}
}

// gdn:end

// gdn:term chunk-pairs
// pairs computes, for a chunk of n gathered tokens, Λ_r ⊙ k_r and
// Λ_r ⊙ q_r (kd, qd), the pair matrices A_rs = k_r . (Γ_rs ⊙ k_s) for s < r
// and P_rs = q_r . (Γ_rs ⊙ k_s) for s <= r, each token's share of the final
// state Γ_{n-1,s} ⊙ k_s (kl), and the chunk's decay Λ_{n-1} (lam).
func (w *chunkWork[F]) pairs(n int) {
	sk, L := w.sk, n
	for s := -1; s < n; s++ {
		w.decays(s, n)
		if s < 0 {
			// Λ_r = Γ_{r,-1}: the decay from the chunk's start to token r.
			for r := 0; r < n; r++ {
				gam := rows(w.gams, r, sk)
				mulInto(rows(w.kd, r, sk), gam, rows(w.k, r, sk))
				mulInto(rows(w.qd, r, sk), gam, rows(w.q, r, sk))
			}
			copy(w.lam, rows(w.gams, n-1, sk))
			continue
		}
		ks := rows(w.k, s, sk)
		w.p[s*L+s] = dot(rows(w.q, s, sk), ks) // Γ_ss = 1
		if s == n-1 {
			copy(rows(w.kl, s, sk), ks)
		}
		for r := s + 1; r < n; r++ {
			mulInto(w.tmp, rows(w.gams, r, sk), ks) // Γ_rs ⊙ k_s
			w.a[r*L+s] = dot(rows(w.k, r, sk), w.tmp)
			w.p[r*L+s] = dot(rows(w.q, r, sk), w.tmp)
			if r == n-1 {
				copy(rows(w.kl, s, sk), w.tmp)
			}
		}
	}
}

// gdn:end

// gdn:term chunk-solve
// solve computes u_r and d_r for the chunk's n tokens from M0, the state
// before the chunk: u_r = M0 kd_r + sum_{s<r} A_rs d_s, d_r = beta_r (v_r - u_r).
// This is forward substitution in (I + diag(beta) A) D = diag(beta)(V - K̂ M0^T):
// row r needs the d_s of every earlier row, as token r of the recurrence
// needs the state the earlier tokens left.
func (w *chunkWork[F]) solve(M0 []F, n int) {
	sk, sv, L := w.sk, w.sv, n
	for r := 0; r < n; r++ {
		u, d := rows(w.u, r, sv), rows(w.d, r, sv)
		kd := rows(w.kd, r, sk)
		for j := range u {
			u[j] = dot(rows(M0, j, sk), kd) // M0 (Λ_r ⊙ k_r)
		}
		for s := 0; s < r; s++ {
			axpy(u, w.a[r*L+s], rows(w.d, s, sv)) // + A_rs d_s
		}
		v, b := rows(w.v, r, sv), w.beta[r]
		for j := range d {
			d[j] = b * (v[j] - u[j])
		}
	}
}

// gdn:end

// gdn:term chunk-y
// outputs writes y_r = scale (M0 qd_r + sum_{s<=r} P_rs d_s) into rows of w.y.
func (w *chunkWork[F]) outputs(M0 []F, n int, scale F) {
	sk, sv, L := w.sk, w.sv, n
	for r := 0; r < n; r++ {
		y, qd := rows(w.y, r, sv), rows(w.qd, r, sk)
		for j := range y {
			y[j] = dot(rows(M0, j, sk), qd)
		}
		for s := 0; s <= r; s++ {
			axpy(y, w.p[r*L+s], rows(w.d, s, sv))
		}
		for j := range y {
			y[j] *= scale
		}
	}
}

// gdn:end

// gdn:term chunk-state
// advance turns M0 into the state after the chunk, in place:
// M = M0 diag(Λ_{n-1}) + sum_s d_s (Γ_{n-1,s} ⊙ k_s)^T.
func (w *chunkWork[F]) advance(M []F, n int) {
	sk, sv := w.sk, w.sv
	for j := 0; j < sv; j++ {
		row := rows(M, j, sk)
		for i := range row {
			row[i] *= w.lam[i]
		}
		for s := 0; s < n; s++ {
			axpy(row, w.d[s*sv+j], rows(w.kl, s, sk))
		}
	}
}

// gdn:end

// minNormal is the smallest positive normal number of F, in float64.
func minNormal[F Float]() float64 {
	if sizeOf[F]() == 4 {
		return 0x1p-126
	}
	return 0x1p-1022
}

// flush returns x, or 0 when x is below tiny.
func flush(x, tiny float64) float64 {
	if x < tiny {
		return 0
	}
	return x
}

// mulInto writes dst = a ⊙ b.
func mulInto[F Float](dst, a, b []F) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

// axpy adds c*x to dst.
func axpy[F Float](dst []F, c F, x []F) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += c * x[i]
	}
}

// forwardChunk is forward with the Chunk algorithm.
func forwardChunk[F Float](in *Inputs[F], opt Options, s Shape, y, states []F) {
	L := min(opt.ChunkLength(), s.T)
	starts := chunkStarts(s.T, L, s.Snapshots)
	type work struct {
		M []F
		w *chunkWork[F]
	}
	parallel(s, opt, func() work { return work{make([]F, s.Sk*s.Sv), newChunkWork[F](s, L)} }, func(wk work, item int) {
		p := newPair(in, opt, s, item)
		M, w := wk.M, wk.w
		p.initialState(M)
		for c := 0; c+1 < len(starts); c++ {
			t0, t1 := starts[c], starts[c+1]
			n := t1 - t0
			w.gather(p, t0, n)
			w.pairs(n)
			w.solve(M, n)
			w.outputs(M, n, p.scale)
			w.advance(M, n)
			for r := 0; r < n; r++ {
				yoff := ((p.seq*s.T+t0+r)*s.Hv + p.h) * s.Sv
				copy(y[yoff:yoff+s.Sv], rows(w.y, r, s.Sv))
			}
			if slot := s.T - t1; slot < s.Snapshots {
				copy(states[p.stateOffset(slot):], M)
			}
		}
	})
}
