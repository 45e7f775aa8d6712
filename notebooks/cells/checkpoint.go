package cells

// nb:cell ckpt-imports
import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/floats"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/notebooks/nbui"
)

// nb:end

// nb:cell ckpt-problem
// ckptInputs draws T tokens of one head of size S in ggml's layout: q and
// k of unit length, v and the initial state uniform in (-1, 1), beta
// uniform in (0.1, 0.9) and log gates uniform in (glo, ghi). It returns the
// inputs and a dy.
func ckptInputs(seed uint64, S, T int, glo, ghi float64) (*gdn.Inputs[float64], gdn.Tensor[float64]) {
	rng := rand.New(rand.NewPCG(seed, 3))
	uni := func(n int, lo, hi float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = lo + (hi-lo)*rng.Float64()
		}
		return x
	}
	unitRows := func() []float64 {
		x := uni(S*T, -1, 1)
		for t := range T {
			r := x[t*S : (t+1)*S]
			var n float64
			for _, v := range r {
				n += v * v
			}
			for i := range r {
				r[i] /= math.Sqrt(n)
			}
		}
		return x
	}
	in := &gdn.Inputs[float64]{
		Q:     gdn.Contiguous(unitRows(), [4]int{S, 1, T, 1}),
		K:     gdn.Contiguous(unitRows(), [4]int{S, 1, T, 1}),
		V:     gdn.Contiguous(uni(S*T, -1, 1), [4]int{S, 1, T, 1}),
		G:     gdn.Contiguous(uni(T, glo, ghi), [4]int{1, 1, T, 1}),
		Beta:  gdn.Contiguous(uni(T, 0.1, 0.9), [4]int{1, 1, T, 1}),
		State: gdn.Contiguous(uni(S*S, -1, 1), [4]int{S, S, 1, 1}),
	}
	return in, gdn.Contiguous(uni(S*T, -1, 1), [4]int{S, 1, T, 1})
}

// nb:end

// nb:main ckpt-lost
func ckptLost() {
	// With beta |k|^2 = 1 the write forgets: (I - beta k k^T) k = 0, so two
	// states whose decayed states Mp differ by w k^T (any w) give the same
	// M_t, and no backward step can tell which one it came from. With a
	// scalar gate that is M_{t-1} differing by w k^T; with KDA's gate a
	// per key channel, by w (k / a)^T, since Mp = M_{t-1} diag(a).
	const S = 4
	k := []float64{0.5, 0.5, 0.5, 0.5} // |k| = 1
	v := []float64{1, -2, 3, 0.5}
	w := []float64{3, -1, 2, 7}
	rng := rand.New(rand.NewPCG(1, 1))
	A := make([]float64, S*S)
	for i := range A {
		A[i] = rng.Float64()
	}
	// twoStates steps A and A + w c^T through the token with decay a and
	// returns the largest difference of the two M_t.
	twoStates := func(a, c []float64) float64 {
		x := gdn.Token[float64]{Q: k, K: k, V: v, A: a, Beta: 1, Scale: 1}
		MA, MB := slices.Clone(A), slices.Clone(A)
		for j := range S {
			for i := range S {
				MB[j*S+i] += w[j] * c[i]
			}
		}
		gdn.StepForward(MA, &x, nil)
		gdn.StepForward(MB, &x, nil)
		var diff float64
		for i := range MA {
			diff = max(diff, math.Abs(MA[i]-MB[i]))
		}
		return diff
	}
	scalar := []float64{0.8, 0.8, 0.8, 0.8}
	kda := []float64{0.9, 0.5, 0.2, 0.7}
	kOverA := make([]float64, S)
	for i := range k {
		kOverA[i] = k[i] / kda[i]
	}
	sameScalar := twoStates(scalar, k)
	sameKDA := twoStates(kda, kOverA)
	otherKDA := twoStates(kda, k)
	fmt.Printf("|w| = %.1f; largest difference of the two M_t:\n", math.Sqrt(floats.Dot(w, w)))
	fmt.Printf("  scalar gate, M_{t-1} differing by w k^T:      %.0e (rounding)\n", sameScalar)
	fmt.Printf("  KDA gate,    M_{t-1} differing by w (k/a)^T:  %.0e (rounding)\n", sameKDA)
	fmt.Printf("  KDA gate,    M_{t-1} differing by w k^T:      %.1f\n", otherKDA)
	if sameScalar > 1e-12 || sameKDA > 1e-12 || otherKDA < 0.1 {
		panic("the write did not forget exactly the component along k")
	}
}

// nb:end

// nb:main ckpt-invert
func ckptInvert() {
	// Where the inverse exists, it still amplifies rounding. Run T tokens
	// forward, then undo them one by one with
	//   M_{t-1} = (M_t - beta v k^T)(I + beta k k^T / (1 - beta |k|^2)) diag(1/a)
	// (Sherman-Morrison), and compare the recovered state with the one the
	// forward computed, in float64 and in float32.
	const S, T = 16, 64
	for _, gates := range []struct {
		name   string
		lo, hi float64
	}{{"gentle gates g in (-0.1, -0.01)", -0.1, -0.01}, {"strong gates g in (-5, -1)", -5, -1}} {
		in, _ := ckptInputs(2, S, T, gates.lo, gates.hi)
		e64 := undoError[float64](in, S, T)
		e32 := undoError[float32](in, S, T)
		fmt.Printf("%s: max |recovered - true| / max |true| after undoing n tokens\n", gates.name)
		fmt.Printf("  %6s %9s %9s\n", "n", "float64", "float32")
		for n := 1; n <= T; n *= 2 {
			fmt.Printf("  %6d %9.1e %9.1e\n", n, e64[n], e32[n])
		}
	}
}

// nb:end

// nb:cell ckpt-undo
// undoError runs the T tokens of in forward in precision F, keeping every
// state, then undoes them one by one from the last and returns, for each
// n, the error of the state recovered after undoing n tokens, relative to
// the largest entry of the state the forward computed.
func undoError[F gdn.Float](in *gdn.Inputs[float64], S, T int) []float64 {
	conv := func(x []float64) []F {
		out := make([]F, len(x))
		for i, v := range x {
			out[i] = F(v)
		}
		return out
	}
	dot := func(a, b []F) F {
		var s F
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	x := gdn.Token[F]{Q: make([]F, S), K: make([]F, S), V: make([]F, S), A: make([]F, S), Scale: 1}
	token := func(t int) {
		copy(x.K, conv(in.K.Data[t*S:(t+1)*S]))
		copy(x.V, conv(in.V.Data[t*S:(t+1)*S]))
		for i := range x.A {
			x.A[i] = F(math.Exp(in.G.Data[t]))
		}
		x.Beta = F(in.Beta.Data[t])
	}
	M := conv(in.State.Data)
	states := [][]F{slices.Clone(M)} // states[t+1] = M_t
	for t := range T {
		token(t)
		gdn.StepForward(M, &x, nil)
		states = append(states, slices.Clone(M))
	}
	errs := make([]float64, T+1)
	for t := T - 1; t >= 0; t-- {
		token(t)
		c := x.Beta / (1 - x.Beta*dot(x.K, x.K))
		for j := range S {
			row := M[j*S : (j+1)*S]
			for i := range row {
				row[i] -= x.Beta * x.V[j] * x.K[i] // M_t - beta v k^T = Mp (I - beta k k^T)
			}
			r := c * dot(row, x.K)
			for i := range row {
				row[i] = (row[i] + r*x.K[i]) / x.A[i] // times the inverse, then undo the decay
			}
		}
		var worst, scale float64
		for i, v := range states[t] {
			worst = max(worst, math.Abs(float64(M[i]-v)))
			scale = max(scale, math.Abs(float64(v)))
		}
		errs[T-t] = worst / scale
	}
	return errs
}

// nb:end

// nb:main ckpt-bits
func ckptBits() {
	// The checkpointed backward replays the same StepForward calls as the
	// forward, so any segment length C gives the same bits as keeping
	// every state (C = T).
	const S, T = 16, 50
	in, dy := ckptInputs(3, S, T, -1, -0.01)
	all, err := gdn.Backward(in, dy, nil, gdn.Options{KeepAll: true})
	if err != nil {
		panic(err)
	}
	fmt.Printf("T = %d; keep every state: %d states of S_v x S_k\n", T, gdn.ScratchStates(T, T))
	for _, C := range []int{1, 2, 3, 5, 7, 8, 13, 49} {
		g, err := gdn.Backward(in, dy, nil, gdn.Options{Segment: C})
		if err != nil {
			panic(err)
		}
		same := slices.Equal(g.Packed, all.Packed)
		fmt.Printf("C = %2d: %2d states, gradients bit-identical to keep-every-state: %v\n", C, gdn.ScratchStates(T, C), same)
		if !same {
			panic("the checkpointed backward differs from keep-every-state")
		}
	}
}

// nb:end

// nb:main ckpt-cost
func ckptCost() {
	// The 27B hybrid's delta-net layers: S = 128, 48 value heads, T = 8192.
	const S, Hv, T = 128, 48, 8192
	mib := func(b int) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("%6s %6s %8s %14s %14s %14s\n", "C", "n_ck", "states", "MiB per head", "MiB per op", "forward steps")
	for _, C := range []int{1, 8, 32, 64, 91, 128, 512, 2048, T} {
		nck := gdn.Segments(T, C)
		b := gdn.ScratchBytes[float32](S, S, T, C)
		steps := T + (nck-1)*C // pass 1 replays every segment but the last
		fmt.Printf("%6d %6d %8d %14.1f %14.1f %14d\n", C, nck, gdn.ScratchStates(T, C), mib(b), mib(b*Hv), steps)
	}
	// The reference also keeps each value head's dq and dk, S_k x T each,
	// until it sums them over the heads that share a q/k head.
	partial := 2 * S * T * 4
	fmt.Printf("dq/dk partial sums, whatever C: %.1f MiB per head, %.1f MiB per op\n", mib(partial), mib(partial*Hv))
	nbui.Figure("scratch.png")
}

// nb:end
