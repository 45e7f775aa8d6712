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
	// states that differ by w k^T (any w) give the same M_t, and no
	// backward step can tell which one it came from.
	const S = 4
	k := []float64{0.5, 0.5, 0.5, 0.5} // |k| = 1
	v := []float64{1, -2, 3, 0.5}
	ones := []float64{1, 1, 1, 1}
	x := gdn.Token[float64]{Q: k, K: k, V: v, A: ones, Beta: 1, Scale: 1}
	rng := rand.New(rand.NewPCG(1, 1))
	A := make([]float64, S*S)
	for i := range A {
		A[i] = rng.Float64()
	}
	B := slices.Clone(A)
	w := []float64{3, -1, 2, 7}
	for j := range S {
		for i := range S {
			B[j*S+i] += w[j] * k[i] // B = A + w k^T
		}
	}
	gdn.StepForward(A, &x, nil)
	gdn.StepForward(B, &x, nil)
	var diff float64
	for i := range A {
		diff = max(diff, math.Abs(A[i]-B[i]))
	}
	fmt.Printf("M_{t-1} differ by w k^T with |w| = %.1f; the two M_t differ by at most %.0e (rounding)\n", math.Sqrt(floats.Dot(w, w)), diff)
	if diff > 1e-12 {
		panic("the write did not forget the component along k")
	}
}

// nb:end

// nb:main ckpt-invert
func ckptInvert() {
	// Where the inverse exists, it still amplifies rounding. Run T tokens
	// forward in float64, then undo them one by one with
	//   M_{t-1} = (M_t - beta v k^T)(I + beta k k^T / (1 - beta |k|^2)) diag(1/a)
	// (Sherman-Morrison), and compare the recovered initial state with the
	// true one.
	const S, T = 16, 64
	for _, gates := range []struct {
		name   string
		lo, hi float64
	}{{"gentle gates g in (-0.1, -0.01)", -0.1, -0.01}, {"strong gates g in (-5, -1)", -5, -1}} {
		in, _ := ckptInputs(2, S, T, gates.lo, gates.hi)
		M := slices.Clone(in.State.Data)
		x := gdn.Token[float64]{Q: make([]float64, S), K: make([]float64, S), V: make([]float64, S), A: make([]float64, S), Scale: 1}
		token := func(t int) {
			copy(x.Q, in.Q.Data[t*S:]) // q is not needed, but the token is whole
			copy(x.K, in.K.Data[t*S:(t+1)*S])
			copy(x.V, in.V.Data[t*S:(t+1)*S])
			for i := range x.A {
				x.A[i] = math.Exp(in.G.Data[t])
			}
			x.Beta = in.Beta.Data[t]
		}
		states := [][]float64{slices.Clone(M)} // states[t+1] = M_t
		for t := range T {
			token(t)
			gdn.StepForward(M, &x, nil)
			states = append(states, slices.Clone(M))
		}
		fmt.Printf("%s: max |recovered - true| / max |true| after undoing n tokens\n", gates.name)
		for t := T - 1; t >= 0; t-- {
			token(t)
			c := x.Beta / (1 - x.Beta*floats.Dot(x.K, x.K))
			for j := range S {
				row := M[j*S : (j+1)*S]
				for i := range row {
					row[i] -= x.Beta * x.V[j] * x.K[i] // M_t - beta v k^T = Mp (I - beta k k^T)
				}
				r := c * floats.Dot(row, x.K)
				for i := range row {
					row[i] = (row[i] + r*x.K[i]) / x.A[i] // times the inverse, then undo the decay
				}
			}
			if n := T - t; n&(n-1) == 0 { // n a power of two
				var worst, scale float64
				for i, v := range states[t] {
					worst = max(worst, math.Abs(M[i]-v))
					scale = max(scale, math.Abs(v))
				}
				fmt.Printf("  n = %2d: %.1e\n", n, worst/scale)
			}
		}
	}
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
	nbui.Figure("scratch.png")
}

// nb:end
