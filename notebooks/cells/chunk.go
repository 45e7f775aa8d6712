package cells

// nb:cell chunk-imports
import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// nb:end

// nb:cell chunk-problem
// chunkProblem is one chunk of n tokens of one (head, seq): the state M0
// before it, the tokens, and the gradients that reach the chunk from
// outside, W = dL/dM_n (the state after it) and GY[r] = dL/dy_r.
type chunkProblem struct {
	Sk, Sv int
	M0     []float64
	X      []*gdn.Token[float64]
	W      []float64
	GY     [][]float64
}

// newChunkProblem draws a problem from seed: q and k of unit length, one
// log gate per key channel in (gmin, -0.05), the rest uniform.
func newChunkProblem(seed uint64, sk, sv, n int, gmin float64) *chunkProblem {
	rng := rand.New(rand.NewPCG(seed, 7))
	uniform := func(m int, lo, hi float64) []float64 {
		x := make([]float64, m)
		for i := range x {
			x[i] = lo + (hi-lo)*rng.Float64()
		}
		return x
	}
	unit := func(m int) []float64 {
		x := uniform(m, -1, 1)
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		for i := range x {
			x[i] /= math.Sqrt(ss)
		}
		return x
	}
	p := &chunkProblem{Sk: sk, Sv: sv, M0: uniform(sk*sv, -1, 1), W: uniform(sk*sv, -1, 1)}
	for range n {
		a := uniform(sk, gmin, -0.05)
		for i := range a {
			a[i] = math.Exp(a[i])
		}
		p.X = append(p.X, &gdn.Token[float64]{Q: unit(sk), K: unit(sk), V: uniform(sv, -1, 1), A: a,
			Beta: rng.Float64(), Scale: 1 / math.Sqrt(float64(sk))})
		p.GY = append(p.GY, uniform(sv, -1, 1))
	}
	return p
}

// recurrence runs the same chunk token by token with gdn.StepForward and
// gdn.StepBackward: the states M_{-1} = M0 ... M_{n-1}, the outputs, u_r
// (recomputed as M_{r-1} diag(a_r) k_r), each token's gradients, and
// dL/dM0.
func (p *chunkProblem) recurrence() (Ms, ys, us [][]float64, gs []*gdn.TokenGrads[float64], dM0 []float64) {
	Ms = [][]float64{slices.Clone(p.M0)}
	for r, x := range p.X {
		M := slices.Clone(Ms[r])
		u := make([]float64, p.Sv)
		for j := range u {
			for i := range p.Sk {
				u[j] += M[j*p.Sk+i] * x.A[i] * x.K[i]
			}
		}
		y := make([]float64, p.Sv)
		gdn.StepForward(M, x, y)
		Ms, ys, us = append(Ms, M), append(ys, y), append(us, u)
	}
	dM := slices.Clone(p.W)
	gs = make([]*gdn.TokenGrads[float64], len(p.X))
	for r := len(p.X) - 1; r >= 0; r-- {
		gs[r] = gdn.NewTokenGrads[float64](p.Sk, p.Sv)
		gdn.StepBackward(dM, Ms[r], Ms[r+1], p.X[r], p.GY[r], gs[r], make([]float64, p.Sk))
	}
	return Ms, ys, us, gs, dM
}

// agree prints the worst relative difference between the chunked and the
// recurrent value of a term, and panics (failing the cell) above 1e-12:
// the two compute the same numbers in a different order, so they differ
// by rounding only.
func agree(term string, chunked, recurrent [][]float64) {
	var worst, scale float64
	for r := range chunked {
		for i := range chunked[r] {
			worst = max(worst, math.Abs(chunked[r][i]-recurrent[r][i]))
			scale = max(scale, math.Abs(recurrent[r][i]))
		}
	}
	rel := worst / scale
	status := "OK"
	if !(rel <= 1e-12) {
		status = "FAIL"
	}
	fmt.Printf("%-8s chunked against recurrent: max |difference| / max |value| = %.0e  %s\n", term, rel, status)
	if status != "OK" {
		panic(term + ": the chunked and the recurrent values differ")
	}
}

// nb:end

// nb:main chunk-forward
func chunkForward() {
	p := newChunkProblem(1, 8, 6, 16, -1)
	Ms, ys, us, _, _ := p.recurrence()
	tr, err := gdn.TraceChunk(p.M0, p.X, p.W, p.GY)
	if err != nil {
		panic(err)
	}
	var ds [][]float64
	for r, x := range p.X {
		d := make([]float64, p.Sv)
		for j := range d {
			d[j] = x.Beta * (x.V[j] - us[r][j])
		}
		ds = append(ds, d)
	}
	agree("u", tr.U, us)
	agree("d", tr.D, ds)
	agree("y", tr.Y, ys)
	agree("M_n", [][]float64{tr.M}, [][]float64{Ms[len(p.X)]})
}

// nb:end

// nb:main chunk-decay
func chunkDecay() {
	// 64 tokens at g = -20: the cumulative log gate G_r = g_0 + ... + g_r
	// reaches G_62 = -1260 and G_63 = -1280. The decay from token 62 to
	// token 63 is e^-20, but factored as exp(G_63) exp(-G_62) it is
	// 0 * Inf = NaN in float64 (and far earlier in float32). As a running
	// product of the a_t = e^g_t <= 1 it is a number in [0, 1] however far
	// apart the tokens are.
	g := -20.0
	G62, G63 := 63*g, 64*g
	fmt.Printf("factored:  exp(G_63) * exp(-G_62) = %g * %g = %g\n", math.Exp(G63), math.Exp(-G62), math.Exp(G63)*math.Exp(-G62))
	fmt.Printf("direct:    exp(g_63)              = %g\n", math.Exp(g))
	prod := 1.0
	for range 63 {
		prod *= math.Exp(g)
	}
	fmt.Printf("product:   a_1 a_2 ... a_63       = %g (e^-1260 is below float64's range)\n", prod)
	// The chunk at gates down to -20, against the recurrence.
	p := newChunkProblem(2, 8, 6, 64, -20)
	Ms, ys, _, gs, dM0 := p.recurrence()
	tr, err := gdn.TraceChunk(p.M0, p.X, p.W, p.GY)
	if err != nil {
		panic(err)
	}
	agree("y", tr.Y, ys)
	agree("M_n", [][]float64{tr.M}, [][]float64{Ms[len(p.X)]})
	var dg [][]float64
	for _, g := range gs {
		dg = append(dg, g.DG)
	}
	agree("dg", tr.DG, dg)
	agree("dM0", [][]float64{tr.DM0}, [][]float64{dM0})
}

// nb:end

// nb:main chunk-dsolve
func chunkDsolve() {
	// The back substitution gives dd_r = dL/dd_r and du_r = -beta_r dd_r,
	// the recurrence's own intermediates, and from them dv and dbeta.
	p := newChunkProblem(3, 8, 6, 16, -1)
	_, _, _, gs, _ := p.recurrence()
	tr, err := gdn.TraceChunk(p.M0, p.X, p.W, p.GY)
	if err != nil {
		panic(err)
	}
	var dd, du, dv, db [][]float64
	for _, g := range gs {
		dd, du, dv = append(dd, g.DD), append(du, g.DU), append(dv, g.DV)
		db = append(db, []float64{g.DBeta})
	}
	var tdb [][]float64
	for _, b := range tr.DBeta {
		tdb = append(tdb, []float64{b})
	}
	agree("dd", tr.DD, dd)
	agree("du", tr.DU, du)
	agree("dv", tr.DV, dv)
	agree("dbeta", tdb, db)
}

// nb:end

// nb:main chunk-dstate
func chunkDstate() {
	// With dL/dy = 0 only the state after the chunk reaches the loss: the
	// gradient enters through this term alone, and dM0 and dd must still be
	// the recurrence's.
	p := newChunkProblem(4, 8, 6, 16, -1)
	for _, gy := range p.GY {
		clear(gy)
	}
	_, _, _, gs, dM0 := p.recurrence()
	tr, err := gdn.TraceChunk(p.M0, p.X, p.W, p.GY)
	if err != nil {
		panic(err)
	}
	var dd [][]float64
	for _, g := range gs {
		dd = append(dd, g.DD)
	}
	agree("dM0", [][]float64{tr.DM0}, [][]float64{dM0})
	agree("dd", tr.DD, dd)
}

// nb:end

// nb:main chunk-dy
func chunkDy() {
	// With dL/dM_n = 0 only the outputs reach the loss: the gradient enters
	// through this term alone.
	p := newChunkProblem(6, 8, 6, 16, -1)
	clear(p.W)
	_, _, _, gs, dM0 := p.recurrence()
	tr, err := gdn.TraceChunk(p.M0, p.X, p.W, p.GY)
	if err != nil {
		panic(err)
	}
	var dd, dq [][]float64
	for _, g := range gs {
		dd, dq = append(dd, g.DD), append(dq, g.DQ)
	}
	agree("dM0", [][]float64{tr.DM0}, [][]float64{dM0})
	agree("dd", tr.DD, dd)
	agree("dq", tr.DQ, dq)
}

// nb:end

// nb:main chunk-dpairs
func chunkDpairs() {
	// The pair terms carry dA, dP, dΛ and dkl back to q, k and, through the
	// decays, to the gates.
	p := newChunkProblem(5, 8, 6, 16, -1)
	_, _, _, gs, _ := p.recurrence()
	tr, err := gdn.TraceChunk(p.M0, p.X, p.W, p.GY)
	if err != nil {
		panic(err)
	}
	var dq, dk, dg [][]float64
	for _, g := range gs {
		dq, dk, dg = append(dq, g.DQ), append(dk, g.DK), append(dg, g.DG)
	}
	agree("dq", tr.DQ, dq)
	agree("dk", tr.DK, dk)
	agree("dg", tr.DG, dg)
}

// nb:end

// nb:main chunk-op
func chunkOp() {
	// The whole op, Options.Algo = gdn.Chunk against the recurrence, on a
	// case with test-backend-ops' gates, three value heads over one q/k
	// head, a fused q/k/v buffer and three snapshots, at several L.
	c := verify.Case{Family: "chunk", Sk: 32, Sv: 32, Hk: 1, Rep: 3, T: 100, Seqs: 1, KDA: true,
		Heads: gdn.Interleave, Layout: verify.Fused, State: true, Snapshots: 3, Range: verify.BackendOps, Seed: 5}
	for _, L := range []int{1, 7, 16, 64} {
		checks, err := verify.ChunkAgainstRecurrent(verify.WithAlgo([]verify.Case{c}, gdn.Chunk, L)[0])
		if err != nil {
			panic(err)
		}
		worst := checks[0]
		for _, ch := range checks {
			if ch.Value > worst.Value {
				worst = ch
			}
			if !ch.OK() {
				panic(fmt.Sprintf("L %d: %v", L, ch))
			}
		}
		fmt.Printf("L = %-2d  worst relative RMS of float64 chunked against recurrent: %.1e (%s)\n", L, worst.Value, worst.Name)
	}
}

// nb:end
