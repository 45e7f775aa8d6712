package verify

import (
	"fmt"
	"math/rand/v2"

	"gonum.org/v1/gonum/diff/fd"

	"github.com/gdnback/gdnback/gdn"
)

// The finite-difference formulas. Central differences carry two errors:
// truncation, O(h^2) (O(h^4) for the four-point stencil), and rounding,
// about eps*|L|/h. At gonum's default step 6e-6 the rounding part is
// 2e-11*|L|, which swamps gradients that the gates have shrunk: with
// g ~ U(-20, -1e-4) the initial state's gradient can be 1e-8 of the loss.
// Two facts keep the check sharp:
//   - L is affine in q, v and the initial state (y is linear in q and in M;
//     M_t is affine in v_t and in M_{t-1}), so their central differences have
//     no truncation error and a step of 1 leaves only rounding, eps*|L|.
//   - for k, g and beta, the four-point stencil (the one test-backend-ops
//     uses when it wants precision) allows a step of 1e-3 for the same
//     truncation error.
var (
	// AffineFormula is the central difference with step 1, for inputs the
	// loss is affine in.
	AffineFormula = fd.Formula{Stencil: []fd.Point{{Loc: -1, Coeff: -0.5}, {Loc: 1, Coeff: 0.5}}, Derivative: 1, Step: 1}
	// FourPointFormula is (f(x-2h) - 8f(x-h) + 8f(x+h) - f(x+2h)) / 12h, h = 1e-3.
	FourPointFormula = fd.Formula{Stencil: []fd.Point{
		{Loc: -2, Coeff: 1.0 / 12}, {Loc: -1, Coeff: -8.0 / 12}, {Loc: 1, Coeff: 8.0 / 12}, {Loc: 2, Coeff: -1.0 / 12},
	}, Derivative: 1, Step: 1e-3}
)

// fdBudget bounds the work of one case's finite differences, in multiply-adds
// of the forward (three per state element and token).
const fdBudget = 3e8

// InputGrad is the finite-difference check of one input tensor: the
// coordinates checked, their numeric and analytic gradients, and the largest
// analytic entry of the whole tensor.
type InputGrad struct {
	Name    string
	Coords  []int     // dense indices, in the input's logical shape
	Numeric []float64 // central differences of the loss
	Exact   []float64 // the float64 backward's gradient at Coords
	Scale   float64   // max |gradient| over the whole tensor
	Size    int       // the tensor's element count
}

// RelErr is the worst |numeric - analytic| over the checked coordinates,
// relative to the largest entry of the analytic gradient.
func (g InputGrad) RelErr() float64 { return MaxRelErr(g.Numeric, g.Exact, g.Scale) }

// Loss is the scalar whose gradient the checks take:
// L = sum(y * dy) + sum(states * dStates), fla's reference loss, extended to
// every snapshot slot. Its gradients are exactly what Backward returns for
// the upstream gradients dy and dStates.
func Loss(p *Problem[float64]) (float64, error) {
	r, err := gdn.Forward(&p.In, p.Opt)
	if err != nil {
		return 0, err
	}
	dy := p.DY.Dense()
	var L float64
	for i, y := range r.Y {
		L += y * dy[i]
	}
	for i, s := range r.States {
		L += s * p.DStates[i]
	}
	return L, nil
}

// FiniteDifferences checks every input of the case (q, k, v, g, beta and the
// initial state; a zero state when the case has none) by central differences
// of Loss, computed by gonum's fd.Gradient in float64 (AffineFormula or
// FourPointFormula). Small tensors are
// checked at every coordinate; for large cases a fixed, seeded sample of
// coordinates per tensor (always including the first and last) keeps the
// cost within a budget.
func FiniteDifferences(c Case) ([]InputGrad, error) {
	p := buildFD(c)
	g, err := gdn.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		return nil, err
	}
	return finiteDifferences(p, g)
}

// buildFD is Build[float64] with a zero initial state where the case has
// none: the gradient of the initial state exists even when the case passes
// none, and the finite differences check it at zero. A zero state gives
// the same outputs and gradients, bit for bit, as none.
func buildFD(c Case) *Problem[float64] {
	p := Build[float64](c)
	if p.In.State.Data == nil {
		p.In.State = gdn.Contiguous(make([]float64, c.Sk*c.Sv*c.Hv()*c.Seqs), [4]int{c.Sk, c.Sv, c.Hv(), c.Seqs})
	}
	return p
}

// finiteDifferences is FiniteDifferences of p (from buildFD), whose float64
// backward is g.
func finiteDifferences(p *Problem[float64], g *gdn.Grads[float64]) ([]InputGrad, error) {
	c := p.Case
	cost := float64(3 * c.T * c.Hv() * c.Seqs * c.Sk * c.Sv)
	perTensor := max(24, int(fdBudget/(4*cost*6)))
	rng := rand.New(rand.NewPCG(c.Seed, 17))

	inputs := []struct {
		name   string
		t      gdn.Tensor[float64]
		exact  []float64
		affine bool
	}{
		{"q", p.In.Q, g.DQ, true}, {"k", p.In.K, g.DK, false}, {"v", p.In.V, g.DV, true},
		{"g", p.In.G, g.DG, false}, {"beta", p.In.Beta, g.DBeta, false}, {"state", p.In.State, g.DState, true},
	}
	out := make([]InputGrad, 0, len(inputs))
	for _, in := range inputs {
		n := len(in.exact)
		coords := sample(rng, n, perTensor)
		idx := make([]int, len(coords)) // where each coordinate lives in Data
		x0 := make([]float64, len(coords))
		for k, c := range coords {
			idx[k] = dataIndex(in.t, c)
			x0[k] = in.t.Data[idx[k]]
		}
		var ferr error
		f := func(x []float64) float64 {
			for k, i := range idx {
				in.t.Data[i] = x[k]
			}
			L, err := Loss(p)
			if err != nil && ferr == nil {
				ferr = err
			}
			return L
		}
		formula := FourPointFormula
		if in.affine {
			formula = AffineFormula
		}
		num := fd.Gradient(nil, f, x0, &fd.Settings{Formula: formula})
		for k, i := range idx {
			in.t.Data[i] = x0[k]
		}
		if ferr != nil {
			return nil, fmt.Errorf("verify: %s: %w", in.name, ferr)
		}
		ex := make([]float64, len(coords))
		for k, c := range coords {
			ex[k] = in.exact[c]
		}
		out = append(out, InputGrad{Name: in.name, Coords: coords, Numeric: num, Exact: ex, Scale: maxAbs(in.exact), Size: n})
	}
	return out, nil
}

// sample returns every index below n when n <= k, else k distinct indices
// in increasing order, the first and last among them.
func sample(rng *rand.Rand, n, k int) []int {
	if n <= k {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	picked := map[int]bool{0: true, n - 1: true}
	for len(picked) < k {
		picked[rng.IntN(n)] = true
	}
	out := make([]int, 0, k)
	for i := 0; i < n; i++ {
		if picked[i] {
			out = append(out, i)
		}
	}
	return out
}

// dataIndex maps a dense index of t's logical shape to its index in t.Data.
func dataIndex[F gdn.Float](t gdn.Tensor[F], dense int) int {
	i0 := dense % t.Ne[0]
	dense /= t.Ne[0]
	i1 := dense % t.Ne[1]
	dense /= t.Ne[1]
	i2 := dense % t.Ne[2]
	i3 := dense / t.Ne[2]
	return t.Off + i0*t.Nb[0] + i1*t.Nb[1] + i2*t.Nb[2] + i3*t.Nb[3]
}
