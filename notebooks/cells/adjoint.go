package cells

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/floats"

	"github.com/gdnback/gdnback/gdn"
)

// nb:main adjoint
func adjoint() {
	// The carried gradient in one line: with Mbar = W + scale gy q^T,
	//   dL/dM_{t-1} = Mbar (I - beta k k^T) diag(a),
	// written with whole matrices, against StepBackward and against finite
	// differences.
	p := newStepProblem(14, 8, 6, true)
	sk, sv, x := p.Sk, p.Sv, &p.X
	dMprev, _ := p.backward() // StepBackward; p.backward sets a = exp(g)
	Mbar := slices.Clone(p.W)
	for j := range sv {
		for i := range sk {
			Mbar[j*sk+i] += x.Scale * p.GY[j] * x.Q[i]
		}
	}
	// adjointStep returns Mbar (I - beta k k^T) diag(a).
	adjointStep := func(Mbar []float64, x *gdn.Token[float64]) []float64 {
		out := make([]float64, len(Mbar))
		for j := range sv {
			row := Mbar[j*sk : (j+1)*sk]
			rk := floats.Dot(row, x.K) // (Mbar k)_j
			for i := range sk {
				out[j*sk+i] = (row[i] - x.Beta*rk*x.K[i]) * x.A[i]
			}
		}
		return out
	}
	oneLine := adjointStep(Mbar, x)
	var vsStep float64
	for i := range oneLine {
		vsStep = max(vsStep, math.Abs(oneLine[i]-dMprev[i]))
	}
	fmt.Printf("Mbar (I - beta k k^T) diag(a) against StepBackward's dM_{t-1}: max difference %.0e\n", vsStep)
	if vsStep > 1e-14 {
		panic("the adjoint form disagrees with StepBackward")
	}
	compare("adjoint", oneLine, numeric(p.Mprev, p.loss))

	// A write that forgets: with beta |k|^2 = 1 the forward loses the part
	// of M_{t-1} along w (k/a)^T (page 3), and the gradient has no part
	// along it either: dL/dM_{t-1} (k/a) = Mbar (I - k k^T) k = 0.
	x.Beta = 1 / floats.Dot(x.K, x.K)
	forgot := adjointStep(Mbar, x)
	kOverA := make([]float64, sk)
	for i := range kOverA {
		kOverA[i] = x.K[i] / x.A[i]
	}
	var along float64
	for j := range sv {
		along = max(along, math.Abs(floats.Dot(forgot[j*sk:(j+1)*sk], kOverA)))
	}
	fmt.Printf("beta |k|^2 = 1: max_j |(dL/dM_{t-1} (k/a))_j| = %.0e, against max |Mbar| = %.1f\n", along, floats.Norm(Mbar, math.Inf(1)))
	if along > 1e-14 {
		panic("the gradient has a part along the forgotten direction")
	}

	// With a scalar gate, dg = <dL/dM_{t-1}, M_{t-1}>_F (exercise 3).
	s := newStepProblem(15, 8, 6, false)
	dM, g := s.backward()
	dg := floats.Sum(g.DG)
	overlap := floats.Dot(dM, s.Mprev)
	fmt.Printf("scalar gate: dg = %.12f, <dL/dM_{t-1}, M_{t-1}> = %.12f\n", dg, overlap)
	if math.Abs(dg-overlap) > 1e-14 {
		panic("dg is not the overlap of the state and its gradient")
	}
}

// nb:end

// nb:cell break-copy
// stepBackwardCopy is gdn.StepBackward written out in one function, each
// term inline, so that a reader can change a term and watch its check
// fail. bug selects a change: "" for none, or one of
//
//	"dMp before dk": the dMp update dM += du k^T runs before dk reads dM
//	"dg after dS_prev": dg reads dM after it was scaled by a
//	"dq from M_{t-1}": dq reads the state before the token's write
func stepBackwardCopy(dM, Mprev, Mt []float64, x *gdn.Token[float64], gy []float64, g *gdn.TokenGrads[float64], bug string) {
	sk := len(x.K)
	mp := make([]float64, sk)
	clear(g.DQ)
	clear(g.DK)
	clear(g.DG)
	g.DBeta = 0
	for j := range x.V {
		dMj := dM[j*sk : (j+1)*sk]
		read := Mt[j*sk : (j+1)*sk]
		if bug == "dq from M_{t-1}" {
			read = Mprev[j*sk : (j+1)*sk]
		}
		c := x.Scale * gy[j]
		for i := range dMj {
			dMj[i] += c * x.Q[i]   // dM: dM[j] += scale gy_j q
			g.DQ[i] += c * read[i] // dq += scale gy_j M_t[j]
		}
		var u float64
		for i := range mp {
			mp[i] = Mprev[j*sk+i] * x.A[i] // Mp[j] = M_{t-1}[j] .* a
			u += mp[i] * x.K[i]            // u_j = Mp[j] . k
		}
		d := x.Beta * (x.V[j] - u)
		dd := floats.Dot(dMj, x.K) // dd_j = dM[j] . k
		du := -x.Beta * dd         // du_j = -beta dd_j
		g.DV[j] = x.Beta * dd      // dv_j = beta dd_j
		g.DBeta += dd * (x.V[j] - u)
		g.DD[j], g.DU[j] = dd, du
		dMp := func() { // dMp[j] = dM[j] + du_j k
			for i := range dMj {
				dMj[i] += du * x.K[i]
			}
		}
		if bug == "dMp before dk" {
			dMp()
		}
		for i := range g.DK { // dk += dM[j] d_j + Mp[j] du_j
			g.DK[i] += dMj[i]*d + mp[i]*du
		}
		if bug != "dMp before dk" {
			dMp()
		}
		if bug == "dg after dS_prev" {
			for i := range dMj {
				dMj[i] *= x.A[i]
			}
		}
		for i := range g.DG { // dg_i += dMp[j][i] Mp[j][i]
			g.DG[i] += dMj[i] * mp[i]
		}
		if bug != "dg after dS_prev" {
			for i := range dMj { // dM_{t-1}[j] = dMp[j] .* a
				dMj[i] *= x.A[i]
			}
		}
	}
}

// relErr is compare's measure without its verdict: the largest difference
// relative to the largest analytic entry.
func relErr(analytic, numeric []float64) float64 {
	var worst, scale float64
	for i := range analytic {
		worst = max(worst, math.Abs(analytic[i]-numeric[i]))
		scale = max(scale, math.Abs(analytic[i]))
	}
	return worst / scale
}

// nb:end

// nb:main break-it
func breakIt() {
	// The finite differences of L over every input, once: they do not
	// depend on the backward.
	p := newStepProblem(8, 8, 6, true)
	num := map[string][]float64{
		"dq": numeric(p.X.Q, p.loss), "dk": numeric(p.X.K, p.loss), "dv": numeric(p.X.V, p.loss),
		"dg": numeric(p.G, p.loss), "dS_prev": numeric(p.Mprev, p.loss),
	}
	beta := []float64{p.X.Beta}
	num["dbeta"] = numeric(beta, func() float64 { p.X.Beta = beta[0]; return p.loss() })
	p.X.Beta = beta[0]
	terms := []string{"dq", "dk", "dv", "dbeta", "dg", "dS_prev"}

	// run returns the copy's gradients with the given bug.
	run := func(bug string) map[string][]float64 {
		p.gate()
		Mt := slices.Clone(p.Mprev)
		gdn.StepForward(Mt, &p.X, nil)
		dM := slices.Clone(p.W)
		g := gdn.NewTokenGrads[float64](p.Sk, p.Sv)
		stepBackwardCopy(dM, p.Mprev, Mt, &p.X, p.GY, g, bug)
		return map[string][]float64{"dq": g.DQ, "dk": g.DK, "dv": g.DV, "dbeta": {g.DBeta}, "dg": g.DG, "dS_prev": dM, "du": g.DU}
	}
	fmt.Printf("%-18s", "copy of the step")
	for _, t := range terms {
		fmt.Printf(" %9s", t)
	}
	fmt.Println()
	for _, bug := range []string{"", "dMp before dk", "dg after dS_prev", "dq from M_{t-1}"} {
		got := run(bug)
		name := bug
		if name == "" {
			name = "as in gdn"
		}
		fmt.Printf("%-18s", name)
		failed := 0
		for _, t := range terms {
			e := relErr(got[t], num[t])
			mark := " "
			if e > 1e-7 {
				mark = "*"
				failed++
			}
			fmt.Printf(" %8.0e%s", e, mark)
		}
		fmt.Println()
		if (bug == "") != (failed == 0) || failed > 1 {
			panic("the checks did not catch exactly the broken term")
		}
	}
	fmt.Println("(* above 1e-7: the finite-difference check fails)")

	// The ordering bug adds (du . d) k to dk, as page 2 says.
	good, bad := run(""), run("dMp before dk")
	var dud float64 // du . d, with d = beta (v - Mp k)
	for j := range p.X.V {
		var u float64
		for i := range p.X.K {
			u += p.Mprev[j*p.Sk+i] * p.X.A[i] * p.X.K[i]
		}
		dud += good["du"][j] * p.X.Beta * (p.X.V[j] - u)
	}
	var off float64
	for i, k := range p.X.K {
		off = max(off, math.Abs(bad["dk"][i]-good["dk"][i]-dud*k))
	}
	fmt.Printf("dk with dMp first - dk = (du . d) k, du . d = %.3f: max difference %.0e\n", dud, off)
	if off > 1e-14 {
		panic("the ordering bug is not (du . d) k")
	}
}

// nb:end
