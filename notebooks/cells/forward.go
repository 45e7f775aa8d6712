package cells

// nb:cell forward-imports
import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/floats"

	"github.com/gdnback/gdnback/gdn"
)

// nb:end

// nb:cell forward-problem
// tokenProblem is one token of one (head, seq) and the state before it,
// M_{t-1}.
type tokenProblem struct {
	Sk, Sv int
	Mprev  []float64 // M_{t-1}, S_v x S_k row-major: M[j][i] = Mprev[j*Sk+i]
	G      []float64 // the log gate, one per key channel (a scalar gate repeats one value)
	X      gdn.Token[float64]
}

// newTokenProblem draws a problem from seed: q and k of unit length, the
// rest uniform.
func newTokenProblem(seed uint64, sk, sv int, kda bool) *tokenProblem {
	return drawTokenProblem(rand.New(rand.NewPCG(seed, 2024)), sk, sv, kda)
}

func drawTokenProblem(rng *rand.Rand, sk, sv int, kda bool) *tokenProblem {
	unit := func(n int) []float64 {
		x := uniform(rng, n, -1, 1)
		norm := math.Sqrt(floats.Dot(x, x))
		for i := range x {
			x[i] /= norm
		}
		return x
	}
	p := &tokenProblem{Sk: sk, Sv: sv}
	p.Mprev = uniform(rng, sv*sk, -1, 1)
	p.G = uniform(rng, sk, -1, -0.05)
	if !kda {
		for i := range p.G {
			p.G[i] = p.G[0]
		}
	}
	p.X = gdn.Token[float64]{
		Q: unit(sk), K: unit(sk), V: uniform(rng, sv, -1, 1), A: make([]float64, sk),
		Beta: 0.2 + 0.6*rng.Float64(), Scale: gdn.Options{}.ScaleFor(sk),
	}
	return p
}

// uniform draws n numbers uniform in [lo, hi).
func uniform(rng *rand.Rand, n int, lo, hi float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = lo + (hi-lo)*rng.Float64()
	}
	return x
}

// gate sets a = exp(g), as the op does from its log-gate input.
func (p *tokenProblem) gate() {
	for i, g := range p.G {
		p.X.A[i] = math.Exp(g)
	}
}

// nb:end

// nb:main forward-naive
func forwardNaive() {
	// StepForward works one row at a time. Here is the same step written
	// with whole matrices, straight from the math, for comparison.
	p := newTokenProblem(1, 8, 6, true)
	p.gate()
	sk, sv, x := p.Sk, p.Sv, p.X
	Mp := make([]float64, sv*sk) // Mp = M diag(a)
	for j := range sv {
		for i := range sk {
			Mp[j*sk+i] = p.Mprev[j*sk+i] * x.A[i]
		}
	}
	want := make([]float64, sv*sk) // M_t = Mp + d k^T
	y := make([]float64, sv)       // y = scale M_t q
	for j := range sv {
		u := floats.Dot(Mp[j*sk:(j+1)*sk], x.K) // u = Mp k
		d := x.Beta * (x.V[j] - u)              // d = beta (v - u)
		for i := range sk {
			want[j*sk+i] = Mp[j*sk+i] + d*x.K[i]
		}
		y[j] = x.Scale * floats.Dot(want[j*sk:(j+1)*sk], x.Q)
	}
	got := slices.Clone(p.Mprev)
	gotY := make([]float64, sv)
	gdn.StepForward(got, &x, gotY)
	var dM, dY float64
	for i := range want {
		dM = max(dM, math.Abs(got[i]-want[i]))
	}
	for j := range y {
		dY = max(dY, math.Abs(gotY[j]-y[j]))
	}
	fmt.Printf("StepForward against the matrix form: max |dM_t| = %.0e, max |dy| = %.0e\n", dM, dY)
	if dM > 1e-14 || dY > 1e-14 {
		panic("StepForward disagrees with the matrix form")
	}
}

// nb:end

// nb:main forward-recall
func forwardRecall() {
	// The delta rule as a memory: with beta = 1, no decay and keys of unit
	// length, writing (k, v) makes M k = v exactly, whatever M held: the
	// step first reads what M recalls for k (u = M k) and then writes only
	// the correction d = v - u. Write 4 pairs with orthonormal keys, read
	// each back with q = k:
	const sk, sv = 4, 3
	M := make([]float64, sv*sk)
	ones := []float64{1, 1, 1, 1}
	vals := [][]float64{{1, 2, 3}, {-1, 0, 1}, {0.5, 0.5, 0.5}, {3, 2, 1}}
	key := func(i int) []float64 { k := make([]float64, sk); k[i] = 1; return k }
	for i, v := range vals {
		gdn.StepForward(M, &gdn.Token[float64]{Q: key(i), K: key(i), V: v, A: ones, Beta: 1, Scale: 1}, nil)
	}
	// Overwrite key 2's value: the old value is replaced, not added to.
	gdn.StepForward(M, &gdn.Token[float64]{Q: key(2), K: key(2), V: []float64{9, 9, 9}, A: ones, Beta: 1, Scale: 1}, nil)
	for i := range vals {
		y := make([]float64, sv)
		// A read: beta = 0 writes nothing, and y = M q.
		gdn.StepForward(M, &gdn.Token[float64]{Q: key(i), K: key(i), V: make([]float64, sv), A: ones, Beta: 0, Scale: 1}, y)
		fmt.Printf("key %d recalls %v\n", i, y)
	}
}

// nb:end
