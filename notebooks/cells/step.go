package cells

// nb:cell step-imports
import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/diff/fd"
	"gonum.org/v1/gonum/floats"

	"github.com/gdnback/gdnback/gdn"
)

// nb:end

// nb:cell step-problem
// stepProblem is a tokenProblem with the gradients that reach the step from
// outside, W = dL/dM_t from the tokens after t and gy = dL/dy_t. The
// scalar whose gradient every check takes is the step's local loss
//
//	L = <W, M_t> + <gy, y_t>,
//
// the first-order part of any loss through this step, so its gradients are
// exactly what gdn.StepBackward computes from W and gy.
type stepProblem struct {
	tokenProblem
	W, GY []float64
}

// newStepProblem draws a problem from seed: the token as newTokenProblem
// does, then W and gy uniform in [-1, 1).
func newStepProblem(seed uint64, sk, sv int, kda bool) *stepProblem {
	rng := rand.New(rand.NewPCG(seed, 2024))
	p := &stepProblem{tokenProblem: *drawTokenProblem(rng, sk, sv, kda)}
	p.W = uniform(rng, sv*sk, -1, 1)
	p.GY = uniform(rng, sv, -1, 1)
	return p
}

// loss runs the forward step, gdn.StepForward, and returns L.
func (p *stepProblem) loss() float64 {
	p.gate()
	M := slices.Clone(p.Mprev)
	y := make([]float64, p.Sv)
	gdn.StepForward(M, &p.X, y)
	return floats.Dot(p.W, M) + floats.Dot(p.GY, y)
}

// backward runs gdn.StepBackward from W and gy and returns dL/dM_{t-1} and
// the token's gradients (with the intermediates dd and du).
func (p *stepProblem) backward() ([]float64, *gdn.TokenGrads[float64]) {
	p.gate()
	Mt := slices.Clone(p.Mprev)
	gdn.StepForward(Mt, &p.X, nil)
	dM := slices.Clone(p.W) // on entry: dL/dM_t from everything after t
	g := gdn.NewTokenGrads[float64](p.Sk, p.Sv)
	gdn.StepBackward(dM, p.Mprev, Mt, &p.X, p.GY, g, make([]float64, p.Sk))
	return dM, g // dM now holds dL/dM_{t-1}
}

// numeric returns central finite differences (gonum's diff/fd) of f with
// respect to xs, a slice that f reads; xs is restored afterwards.
func numeric(xs []float64, f func() float64) []float64 {
	x0 := slices.Clone(xs)
	grad := fd.Gradient(nil, func(x []float64) float64 {
		copy(xs, x)
		return f()
	}, slices.Clone(x0), &fd.Settings{Formula: fd.Central, Step: 1e-5})
	copy(xs, x0)
	return grad
}

// compare prints the worst difference between the analytic and the numeric
// gradient, relative to the largest analytic entry, and panics (which fails
// the cell) above 1e-7: central differences with step 1e-5 are good to
// about 1e-10 here.
func compare(term string, analytic, numeric []float64) {
	var worst, scale float64
	for i := range analytic {
		worst = max(worst, math.Abs(analytic[i]-numeric[i]))
		scale = max(scale, math.Abs(analytic[i]))
	}
	rel := worst / scale
	status := "OK"
	if !(rel <= 1e-7) {
		status = "FAIL"
	}
	fmt.Printf("%-12s n = %-3d max |analytic - numeric| / max |analytic| = %.0e  %s\n", term, len(analytic), rel, status)
	if status != "OK" {
		panic(term + ": the analytic gradient disagrees with finite differences")
	}
}

// nb:end

// nb:main check-dM
func checkDM() {
	// With k = 0 and a = 1 (g = 0) the step leaves the state alone: u = 0,
	// M_t = M_{t-1} + d 0^T. What remains is the read-out y = scale M q,
	// so the gradient StepBackward returns for M_{t-1} is the dM term's
	// result alone, dL/dM_t = W + scale gy q^T, and finite differences of
	// L over M_{t-1} measure it.
	p := newStepProblem(2, 8, 6, true)
	clear(p.X.K)
	clear(p.G)
	dM, _ := p.backward()
	compare("dM", dM, numeric(p.Mprev, p.loss))
}

// nb:end

// nb:main check-dq
func checkDq() {
	p := newStepProblem(3, 8, 6, true)
	_, g := p.backward()
	compare("dq", g.DQ, numeric(p.X.Q, p.loss))
}

// nb:end

// nb:main check-dd
func checkDd() {
	// d = beta (v - u) is where v enters, so moving v by delta/beta moves d
	// by delta and nothing else: L as a function of d's perturbation.
	p := newStepProblem(4, 8, 6, true)
	_, g := p.backward()
	v0 := slices.Clone(p.X.V)
	delta := make([]float64, p.Sv)
	num := numeric(delta, func() float64 {
		for j := range delta {
			p.X.V[j] = v0[j] + delta[j]/p.X.Beta
		}
		return p.loss()
	})
	compare("dd", g.DD, num)
}

// nb:end

// nb:main check-dv
func checkDv() {
	p := newStepProblem(5, 8, 6, true)
	_, g := p.backward()
	compare("dv", g.DV, numeric(p.X.V, p.loss))
}

// nb:end

// nb:main check-du
func checkDu() {
	// u enters only through d = beta (v - u): moving u by delta is moving
	// v by -delta.
	p := newStepProblem(6, 8, 6, true)
	_, g := p.backward()
	v0 := slices.Clone(p.X.V)
	delta := make([]float64, p.Sv)
	num := numeric(delta, func() float64 {
		for j := range delta {
			p.X.V[j] = v0[j] - delta[j]
		}
		return p.loss()
	})
	compare("du", g.DU, num)
}

// nb:end

// nb:main check-dbeta
func checkDbeta() {
	p := newStepProblem(7, 8, 6, true)
	_, g := p.backward()
	beta := []float64{p.X.Beta}
	num := numeric(beta, func() float64 {
		p.X.Beta = beta[0]
		return p.loss()
	})
	p.X.Beta = beta[0]
	compare("dbeta", []float64{g.DBeta}, num)
}

// nb:end

// nb:main check-dk
func checkDk() {
	// k enters twice, in u = Mp k and in M_t = Mp + d k^T; the check
	// moves both, as the forward does.
	p := newStepProblem(8, 8, 6, true)
	_, g := p.backward()
	compare("dk", g.DK, numeric(p.X.K, p.loss))
}

// nb:end

// nb:main check-dMp
func checkDMp() {
	// StepBackward returns dM_{t-1} = dMp diag(a): dividing by a recovers
	// dMp. Numerically, dMp is the gradient over the state that enters the
	// step after the decay: the same step from the state Mp = M_{t-1} diag(a)
	// with a = 1.
	p := newStepProblem(9, 8, 6, true)
	dMprev, _ := p.backward()
	dMp := make([]float64, len(dMprev))
	for j := range p.Sv {
		for i := range p.Sk {
			dMp[j*p.Sk+i] = dMprev[j*p.Sk+i] / p.X.A[i]
		}
	}
	undecayed := *p
	undecayed.X.A = make([]float64, p.Sk)
	undecayed.G = make([]float64, p.Sk) // a = exp(0) = 1
	undecayed.Mprev = make([]float64, len(p.Mprev))
	for j := range p.Sv {
		for i := range p.Sk {
			undecayed.Mprev[j*p.Sk+i] = p.Mprev[j*p.Sk+i] * p.X.A[i]
		}
	}
	compare("dMp", dMp, numeric(undecayed.Mprev, undecayed.loss))
}

// nb:end

// nb:main check-dg
func checkDg() {
	// KDA: one log gate per key channel, dg_i = sum_j dMp[j][i] Mp[j][i].
	p := newStepProblem(10, 8, 6, true)
	_, g := p.backward()
	compare("dg (KDA)", g.DG, numeric(p.G, p.loss))

	// A scalar gate is one g for every channel: its gradient is the sum of
	// the per-channel ones (what the op stores for a scalar gate).
	p = newStepProblem(11, 8, 6, false)
	_, g = p.backward()
	var sum float64
	for _, x := range g.DG {
		sum += x
	}
	one := []float64{p.G[0]}
	num := numeric(one, func() float64 {
		for i := range p.G {
			p.G[i] = one[0]
		}
		return p.loss()
	})
	compare("dg (scalar)", []float64{sum}, num)
}

// nb:end

// nb:main check-dS_prev
func checkDSPrev() {
	p := newStepProblem(12, 8, 6, true)
	dM, _ := p.backward()
	compare("dS_prev", dM, numeric(p.Mprev, p.loss))
}

// nb:end

// nb:cell chain
// chain is T tokens of one (head, seq): the steps chained from an initial
// state M0, with the loss L = sum_t <gy_t, y_t> + <W, M_{T-1}>.
type chain struct {
	Sk, Sv int
	M0     []float64   // the initial state M_{-1}
	G      [][]float64 // log gates per token (KDA)
	X      []gdn.Token[float64]
	GY     [][]float64 // dL/dy_t
	W      []float64   // dL/dM_{T-1}, the final state's gradient
}

func newChain(seed uint64, T, sk, sv int) *chain {
	c := &chain{Sk: sk, Sv: sv}
	for t := range T {
		p := newStepProblem(seed*1000+uint64(t), sk, sv, true)
		if t == 0 {
			c.M0 = p.Mprev
		}
		c.G = append(c.G, p.G)
		c.X = append(c.X, p.X)
		c.GY = append(c.GY, p.GY)
		c.W = p.W
	}
	return c
}

func (c *chain) gates() {
	for t := range c.X {
		for i, g := range c.G[t] {
			c.X[t].A[i] = math.Exp(g)
		}
	}
}

// states returns M_{-1}, M_0, ..., M_{T-1}.
func (c *chain) states() [][]float64 {
	c.gates()
	S := [][]float64{slices.Clone(c.M0)}
	for t := range c.X {
		M := slices.Clone(S[t])
		gdn.StepForward(M, &c.X[t], nil)
		S = append(S, M)
	}
	return S
}

func (c *chain) loss() float64 {
	c.gates()
	M := slices.Clone(c.M0)
	var L float64
	y := make([]float64, c.Sv)
	for t := range c.X {
		gdn.StepForward(M, &c.X[t], y)
		L += floats.Dot(c.GY[t], y)
	}
	return L + floats.Dot(c.W, M)
}

// backward walks the tokens in reverse with every state kept, and returns
// dM after token 0: the initial state's gradient.
func (c *chain) backward() []float64 {
	S := c.states()
	dM := slices.Clone(c.W)
	g := gdn.NewTokenGrads[float64](c.Sk, c.Sv)
	mp := make([]float64, c.Sk)
	for t := len(c.X) - 1; t >= 0; t-- {
		gdn.StepBackward(dM, S[t], S[t+1], &c.X[t], c.GY[t], g, mp)
	}
	return dM
}

// nb:end

// nb:main check-dstate
func checkDstate() {
	c := newChain(13, 6, 8, 6)
	dstate := c.backward()
	compare("dstate", dstate, numeric(c.M0, c.loss))

	// The op's checkpointed driver, gdn.Backward, on the same six tokens
	// (one head, one sequence, segments of ceil(sqrt(6)) = 3 tokens),
	// returns the same initial-state gradient, bit for bit: it replays the
	// same StepForward and StepBackward calls.
	T, sk, sv := len(c.X), c.Sk, c.Sv
	var q, k, v, g, beta, dy []float64
	for t := range T {
		q = append(q, c.X[t].Q...)
		k = append(k, c.X[t].K...)
		v = append(v, c.X[t].V...)
		g = append(g, c.G[t]...)
		beta = append(beta, c.X[t].Beta)
		dy = append(dy, c.GY[t]...)
	}
	in := gdn.Inputs[float64]{
		Q:     gdn.Contiguous(q, [4]int{sk, 1, T, 1}),
		K:     gdn.Contiguous(k, [4]int{sk, 1, T, 1}),
		V:     gdn.Contiguous(v, [4]int{sv, 1, T, 1}),
		G:     gdn.Contiguous(g, [4]int{sk, 1, T, 1}),
		Beta:  gdn.Contiguous(beta, [4]int{1, 1, T, 1}),
		State: gdn.Contiguous(c.M0, [4]int{sk, sv, 1, 1}),
	}
	grads, err := gdn.Backward(&in, gdn.Contiguous(dy, [4]int{sv, 1, T, 1}), c.W, gdn.Options{})
	if err != nil {
		panic(err)
	}
	same := slices.Equal(grads.DState, dstate)
	fmt.Println("gdn.Backward's dstate equals the chained steps' bit for bit:", same)
	if !same {
		panic("the driver and the chained steps disagree")
	}
}

// nb:end
