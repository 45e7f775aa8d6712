package cells

// nb:cell heads-imports
import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/floats"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// nb:end

// nb:cell heads-problem
// headsInputs draws one sequence of T tokens with hk q/k heads and hv value
// heads of size S, in ggml's layout, gate width gw (1, or S for KDA):
// q and k of unit length, the rest uniform. It returns the inputs and a dy.
func headsInputs(seed uint64, S, hk, hv, T, gw int) (*gdn.Inputs[float64], gdn.Tensor[float64]) {
	rng := rand.New(rand.NewPCG(seed, 5))
	uni := func(n int, lo, hi float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = lo + (hi-lo)*rng.Float64()
		}
		return x
	}
	unitRows := func(rows int) []float64 {
		x := uni(S*rows, -1, 1)
		for r := range rows {
			row := x[r*S : (r+1)*S]
			n := math.Sqrt(floats.Dot(row, row))
			for i := range row {
				row[i] /= n
			}
		}
		return x
	}
	in := &gdn.Inputs[float64]{
		Q:     gdn.Contiguous(unitRows(hk*T), [4]int{S, hk, T, 1}),
		K:     gdn.Contiguous(unitRows(hk*T), [4]int{S, hk, T, 1}),
		V:     gdn.Contiguous(uni(S*hv*T, -1, 1), [4]int{S, hv, T, 1}),
		G:     gdn.Contiguous(uni(gw*hv*T, -1, -0.01), [4]int{gw, hv, T, 1}),
		Beta:  gdn.Contiguous(uni(hv*T, 0.1, 0.9), [4]int{1, hv, T, 1}),
		State: gdn.Contiguous(uni(S*S*hv, -1, 1), [4]int{S, S, hv, 1}),
	}
	return in, gdn.Contiguous(uni(S*hv*T, -1, 1), [4]int{S, hv, T, 1})
}

// oneHead is value head h of in (with its dy) as an op of its own: one
// value head reading q/k head hq.
func oneHead(in *gdn.Inputs[float64], dy gdn.Tensor[float64], h, hq int) (*gdn.Inputs[float64], gdn.Tensor[float64]) {
	pick := func(t gdn.Tensor[float64], i int) gdn.Tensor[float64] {
		t.Off += i * t.Nb[1] // the head dimension, ne[1]
		t.Ne[1] = 1
		return t
	}
	st := in.State // [S_k, S_v, H_v, n_seqs]: the head dimension is ne[2]
	st.Off += h * st.Nb[2]
	st.Ne[2] = 1
	return &gdn.Inputs[float64]{
		Q: pick(in.Q, hq), K: pick(in.K, hq), V: pick(in.V, h), G: pick(in.G, h), Beta: pick(in.Beta, h),
		State: st,
	}, pick(dy, h)
}

// nb:end

// nb:main heads-sum
func headsSum() {
	// H_k = 2 q/k heads shared by H_v = 6 value heads (r = 3), under both
	// mappings. The op's dq and dk of each q/k head must be the sum, in
	// increasing order of value head, of the dq and dk that each of its
	// value heads computes alone.
	const S, hk, hv, T = 8, 2, 6, 9
	r := hv / hk
	in, dy := headsInputs(1, S, hk, hv, T, 1)
	for _, m := range []gdn.HeadMap{gdn.Tile, gdn.Interleave} {
		g, err := gdn.Backward(in, dy, nil, gdn.Options{Heads: m})
		if err != nil {
			panic(err)
		}
		dq := make([]float64, S*hk*T) // [S, H_k, T]
		dk := make([]float64, S*hk*T)
		readers := make([][]int, hk)
		for h := range hv {
			hq := h % hk // tile
			if m == gdn.Interleave {
				hq = h / r
			}
			readers[hq] = append(readers[hq], h)
			in1, dy1 := oneHead(in, dy, h, hq)
			g1, err := gdn.Backward(in1, dy1, nil, gdn.Options{})
			if err != nil {
				panic(err)
			}
			for t := range T {
				for i := range S {
					dq[(t*hk+hq)*S+i] += g1.DQ[t*S+i]
					dk[(t*hk+hq)*S+i] += g1.DK[t*S+i]
				}
			}
		}
		same := slices.Equal(dq, g.DQ) && slices.Equal(dk, g.DK)
		fmt.Printf("%-10v q/k head 0 is read by value heads %v, q/k head 1 by %v; dq and dk are the sums, bit for bit: %v\n", m, readers[0], readers[1], same)
		if !same {
			panic("dq or dk is not the sum over the value heads")
		}
	}
	// The mapping matters: the same inputs under the two mappings.
	gt, _ := gdn.Backward(in, dy, nil, gdn.Options{Heads: gdn.Tile})
	gi, _ := gdn.Backward(in, dy, nil, gdn.Options{Heads: gdn.Interleave})
	fmt.Printf("tile against interleave: RMS(dq_tile - dq_interleave) / RMS(dq_tile) = %.2f\n", verify.RMSRatio(gt.DQ, gi.DQ))
}

// nb:end

// nb:main heads-fd
func headsFD() {
	// The broadcast against finite differences: the verification matrix's
	// own check (verify.FiniteDifferences, float64) on 6 value heads over 2
	// q/k heads, with q, k and v as row views of one fused buffer, under
	// both mappings.
	for _, m := range []gdn.HeadMap{gdn.Tile, gdn.Interleave} {
		c := verify.Case{Family: "broadcast", Sk: 16, Sv: 16, Hk: 2, Rep: 3, T: 5, Seqs: 1, Heads: m, Layout: verify.Fused, State: true, Seed: 9}
		grads, err := verify.FiniteDifferences(c)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-10v", m)
		for _, g := range grads {
			fmt.Printf("  %s %.0e", g.Name, g.RelErr())
			if g.RelErr() > verify.MaxFDRelErr {
				panic(g.Name + ": the gradient disagrees with finite differences")
			}
		}
		fmt.Println()
	}
}

// nb:end

// nb:main gates-kda
func gatesKDA() {
	// A KDA gate whose S_k channels all hold the same value is a scalar
	// gate: the forward is the same arithmetic, so every gradient but dg is
	// bit-identical, and the scalar gate's dg is the sum over the channels
	// of KDA's.
	const S, T = 8, 7
	in, dy := headsInputs(2, S, 1, 1, T, 1)
	kda := *in
	wide := make([]float64, S*T)
	for t := range T {
		for i := range S {
			wide[t*S+i] = in.G.Data[t]
		}
	}
	kda.G = gdn.Contiguous(wide, [4]int{S, 1, T, 1})
	gs, err := gdn.Backward(in, dy, nil, gdn.Options{})
	if err != nil {
		panic(err)
	}
	gk, err := gdn.Backward(&kda, dy, nil, gdn.Options{})
	if err != nil {
		panic(err)
	}
	same := slices.Equal(gs.DQ, gk.DQ) && slices.Equal(gs.DK, gk.DK) && slices.Equal(gs.DV, gk.DV) &&
		slices.Equal(gs.DBeta, gk.DBeta) && slices.Equal(gs.DState, gk.DState)
	fmt.Println("dq, dk, dv, dbeta, dstate bit-identical:", same)
	var worst float64
	for t := range T {
		var sum float64
		for i := range S {
			sum += gk.DG[t*S+i]
		}
		worst = max(worst, math.Abs(sum-gs.DG[t]))
		fmt.Printf("t = %d: scalar dg = %+.6f, KDA's dg summed over channels = %+.6f\n", t, gs.DG[t], sum)
	}
	if !same || worst != 0 {
		panic("the scalar gate is not KDA with equal channels")
	}
}

// nb:end
