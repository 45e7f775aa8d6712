package cells

// nb:cell train-imports
import (
	"fmt"
	"image/color"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/notebooks/nbui"
)

// nb:end

// nb:cell recall-task
// The task: multi-query associative recall. A sequence lists recallPairs
// (key, value) pairs as tokens key, value, key, value, ..., then asks for
// recallQueries of the keys again; at each query the model must name the
// value that followed that key. Keys are tokens 0..recallKeys-1 and values
// recallKeys..recallVocab-1; keys are distinct within a sequence, values
// are drawn freely.
const (
	recallKeys    = 32
	recallVals    = 32
	recallVocab   = recallKeys + recallVals
	recallPairs   = 8
	recallQueries = 8
	recallT       = 2*recallPairs + recallQueries
)

// recallBatch is a batch of sequences: tokens[b][t], and at each query
// position the index of the value to recall (-1 elsewhere).
type recallBatch struct {
	tokens, target [][]int
}

// newRecallBatch draws n sequences from rng.
func newRecallBatch(rng *rand.Rand, n int) recallBatch {
	var b recallBatch
	for range n {
		keys := rng.Perm(recallKeys)[:recallPairs]
		vals := make([]int, recallPairs)
		tok, tgt := make([]int, recallT), make([]int, recallT)
		for p := range recallPairs {
			vals[p] = rng.IntN(recallVals)
			tok[2*p], tok[2*p+1] = keys[p], recallKeys+vals[p]
			tgt[2*p], tgt[2*p+1] = -1, -1
		}
		for i, p := range rng.Perm(recallPairs)[:recallQueries] {
			t := 2*recallPairs + i
			tok[t], tgt[t] = keys[p], vals[p]
		}
		b.tokens = append(b.tokens, tok)
		b.target = append(b.target, tgt)
	}
	return b
}

// nb:end

// nb:cell recall-model
// recallModel is one gated delta-rule layer between an embedding and a
// softmax over the values. Token t's features x_t are the one-hot codes of
// token t and of token t-1 (a fixed shift, the width-2 short convolution
// that Gated DeltaNet puts before its q, k and v), recallIn numbers. From
// them, for one head:
//
//	q = normalize(Wq x), k = normalize(Wk x), v = Wv x
//	beta = sigmoid(wb . x + bb), g = -softplus(wg . x + bg)
//	y = the gated delta rule (gdn.Forward), logits = Wo y + bo
//
// The loss is the mean cross-entropy at the query positions.
type recallModel struct {
	S      int         // head size, S_k = S_v
	params [][]float64 // Wq, Wk, Wv ([S x recallIn]), wb, wg ([recallIn]), bb, bg ([1]), Wo ([recallVals x S]), bo
}

const recallIn = 2 * recallVocab

// The parameters, by index in recallModel.params.
const (
	pWq = iota
	pWk
	pWv
	pWb
	pWg
	pBb
	pBg
	pWo
	pBo
	nParams
)

func newRecallModel(seed uint64, S int) *recallModel {
	rng := rand.New(rand.NewPCG(seed, 7))
	normal := func(n int, sd float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = sd * rng.NormFloat64()
		}
		return x
	}
	m := &recallModel{S: S, params: make([][]float64, nParams)}
	m.params[pWq] = normal(S*recallIn, 1)
	m.params[pWk] = normal(S*recallIn, 1)
	m.params[pWv] = normal(S*recallIn, 1)
	m.params[pWb] = make([]float64, recallIn)
	m.params[pWg] = make([]float64, recallIn)
	m.params[pBb] = []float64{0}  // beta = 0.5
	m.params[pBg] = []float64{-3} // a = exp(-softplus(-3)) = 0.95
	m.params[pWo] = normal(recallVals*S, 1/math.Sqrt(float64(S)))
	m.params[pBo] = make([]float64, recallVals)
	return m
}

// features returns the two active entries of x_t (one-hot codes of token
// t and of token t-1); the second is -1 at t = 0.
func features(tok []int, t int) (int, int) {
	if t == 0 {
		return tok[0], -1
	}
	return tok[t], recallVocab + tok[t-1]
}

// lossAndGrad runs the model on batch b and returns the loss, the
// fraction of queries answered right and, when grads is not nil, adds the
// loss's gradient into grads (shaped like m.params).
func (m *recallModel) lossAndGrad(b recallBatch, grads [][]float64) (loss, acc float64) {
	S, T, B := m.S, recallT, len(b.tokens)
	P := m.params
	// Wx returns row r of W x_t for a one-hot x_t (two active entries).
	Wx := func(W []float64, r, x0, x1 int) float64 {
		s := W[r*recallIn+x0]
		if x1 >= 0 {
			s += W[r*recallIn+x1]
		}
		return s
	}
	// The op's inputs, [S, 1, T, B] and [1, 1, T, B], and what the
	// backward of the projections needs.
	q, k, v := make([]float64, S*T*B), make([]float64, S*T*B), make([]float64, S*T*B)
	qn, kn := make([]float64, T*B), make([]float64, T*B) // |Wq x|, |Wk x|
	g, beta, gpre := make([]float64, T*B), make([]float64, T*B), make([]float64, T*B)
	for bi, tok := range b.tokens {
		for t := range T {
			x0, x1 := features(tok, t)
			row := bi*T + t
			for _, qk := range []struct {
				W, out, norm []float64
			}{{P[pWq], q, qn}, {P[pWk], k, kn}} {
				var n2 float64
				for i := range S {
					z := Wx(qk.W, i, x0, x1)
					qk.out[row*S+i] = z
					n2 += z * z
				}
				n := math.Sqrt(n2) + 1e-6
				qk.norm[row] = n
				for i := range S {
					qk.out[row*S+i] /= n
				}
			}
			for j := range S {
				v[row*S+j] = Wx(P[pWv], j, x0, x1)
			}
			zb := Wx(P[pWb], 0, x0, x1) + P[pBb][0]
			beta[row] = 1 / (1 + math.Exp(-zb))
			gpre[row] = Wx(P[pWg], 0, x0, x1) + P[pBg][0]
			g[row] = -softplus(gpre[row])
		}
	}
	in := &gdn.Inputs[float64]{
		Q: gdn.Contiguous(q, [4]int{S, 1, T, B}), K: gdn.Contiguous(k, [4]int{S, 1, T, B}),
		V: gdn.Contiguous(v, [4]int{S, 1, T, B}), G: gdn.Contiguous(g, [4]int{1, 1, T, B}),
		Beta: gdn.Contiguous(beta, [4]int{1, 1, T, B}),
	}
	fwd, err := gdn.Forward(in, gdn.Options{})
	if err != nil {
		panic(err)
	}
	// The read-out: softmax cross-entropy at the queries, and dL/dy.
	dy := make([]float64, S*T*B)
	nq := float64(B * recallQueries)
	var right int
	logits := make([]float64, recallVals)
	for bi := range B {
		for t, want := range b.target[bi] {
			if want < 0 {
				continue
			}
			row := bi*T + t
			y := fwd.Y[row*S : (row+1)*S]
			best := 0
			for c := range recallVals {
				logits[c] = P[pBo][c] + floats.Dot(P[pWo][c*S:(c+1)*S], y)
				if logits[c] > logits[best] {
					best = c
				}
			}
			if best == want {
				right++
			}
			lse := logSumExp(logits)
			loss += (lse - logits[want]) / nq
			if grads == nil {
				continue
			}
			for c := range recallVals {
				dl := math.Exp(logits[c]-lse) / nq // softmax - onehot, over nq
				if c == want {
					dl -= 1 / nq
				}
				grads[pBo][c] += dl
				for j := range S {
					grads[pWo][c*S+j] += dl * y[j]
					dy[row*S+j] += dl * P[pWo][c*S+j]
				}
			}
		}
	}
	if grads == nil {
		return loss, float64(right) / nq
	}
	// The layer's backward: gdn.Backward, then the projections.
	gr, err := gdn.Backward(in, gdn.Contiguous(dy, [4]int{S, 1, T, B}), nil, gdn.Options{})
	if err != nil {
		panic(err)
	}
	for bi, tok := range b.tokens {
		for t := range T {
			x0, x1 := features(tok, t)
			row := bi*T + t
			addTo := func(W []float64, r int, d float64) {
				W[r*recallIn+x0] += d
				if x1 >= 0 {
					W[r*recallIn+x1] += d
				}
			}
			// normalize: d(z/|z|) = (dn - n (n . dn)) / |z|
			for _, qk := range []struct {
				W, n, dn []float64
				norm     float64
			}{{grads[pWq], q, gr.DQ, qn[row]}, {grads[pWk], k, gr.DK, kn[row]}} {
				n, dn := qk.n[row*S:(row+1)*S], qk.dn[row*S:(row+1)*S]
				c := floats.Dot(n, dn)
				for i := range S {
					addTo(qk.W, i, (dn[i]-n[i]*c)/qk.norm)
				}
			}
			for j := range S {
				addTo(grads[pWv], j, gr.DV[row*S+j])
			}
			db := gr.DBeta[row] * beta[row] * (1 - beta[row])
			addTo(grads[pWb], 0, db)
			grads[pBb][0] += db
			dg := -gr.DG[row] / (1 + math.Exp(-gpre[row])) // g = -softplus(z): dg/dz = -sigmoid(z)
			addTo(grads[pWg], 0, dg)
			grads[pBg][0] += dg
		}
	}
	return loss, float64(right) / nq
}

func softplus(z float64) float64 { return max(z, 0) + math.Log1p(math.Exp(-math.Abs(z))) }

func logSumExp(x []float64) float64 {
	m := x[0]
	for _, v := range x {
		m = max(m, v)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// zeros returns buffers shaped like m's parameters.
func (m *recallModel) zeros() [][]float64 {
	out := make([][]float64, len(m.params))
	for i, p := range m.params {
		out[i] = make([]float64, len(p))
	}
	return out
}

// nb:end

// nb:main recall-gradcheck
func recallGradcheck() {
	// Before training: the whole model's gradient, with gdn.Backward in the
	// middle, against central differences of its loss, for a sample of
	// entries of every parameter.
	m := newRecallModel(1, 16)
	b := newRecallBatch(rand.New(rand.NewPCG(1, 1)), 4)
	grads := m.zeros()
	m.lossAndGrad(b, grads)
	names := []string{"Wq", "Wk", "Wv", "wb", "wg", "bb", "bg", "Wo", "bo"}
	rng := rand.New(rand.NewPCG(2, 2))
	for p, name := range names {
		var worst, scale float64
		for range 8 {
			i := rng.IntN(len(m.params[p]))
			x0, h := m.params[p][i], 1e-5
			m.params[p][i] = x0 + h
			lp, _ := m.lossAndGrad(b, nil)
			m.params[p][i] = x0 - h
			lm, _ := m.lossAndGrad(b, nil)
			m.params[p][i] = x0
			worst = max(worst, math.Abs((lp-lm)/(2*h)-grads[p][i]))
			scale = max(scale, math.Abs(grads[p][i]))
		}
		rel := worst / max(scale, 1e-12)
		fmt.Printf("%-3s max |numeric - analytic| / max |analytic| = %.0e\n", name, rel)
		if rel > 1e-6 {
			panic(name + ": the model's gradient disagrees with finite differences")
		}
	}
}

// nb:end

// nb:cell adam
// adam is Adam (Kingma and Ba) with the usual defaults.
type adam struct {
	lr, b1, b2, eps float64
	step            int
	m, v            [][]float64
}

func (o *adam) update(params, grads [][]float64) {
	if o.m == nil {
		o.m, o.v = make([][]float64, len(params)), make([][]float64, len(params))
		for i, p := range params {
			o.m[i], o.v[i] = make([]float64, len(p)), make([]float64, len(p))
		}
	}
	o.step++
	c1 := 1 - math.Pow(o.b1, float64(o.step))
	c2 := 1 - math.Pow(o.b2, float64(o.step))
	for i, p := range params {
		for j, gr := range grads[i] {
			o.m[i][j] = o.b1*o.m[i][j] + (1-o.b1)*gr
			o.v[i][j] = o.b2*o.v[i][j] + (1-o.b2)*gr*gr
			p[j] -= o.lr * (o.m[i][j] / c1) / (math.Sqrt(o.v[i][j]/c2) + o.eps)
		}
	}
}

// nb:end

// nb:main recall-train
func recallTrain() {
	const steps, batch = 600, 32
	m := newRecallModel(3, 32)
	opt := &adam{lr: 0.01, b1: 0.9, b2: 0.999, eps: 1e-8}
	data := rand.New(rand.NewPCG(4, 4))
	test := newRecallBatch(rand.New(rand.NewPCG(5, 5)), 256) // held-out sequences
	var trainLoss, testLoss plotter.XYs
	for step := 0; step <= steps; step++ {
		if step%50 == 0 {
			l, acc := m.lossAndGrad(test, nil)
			testLoss = append(testLoss, plotter.XY{X: float64(step), Y: l})
			fmt.Printf("step %4d  held-out loss %.3f  recall accuracy %5.1f%%\n", step, l, 100*acc)
		}
		if step == steps {
			break
		}
		grads := m.zeros()
		l, _ := m.lossAndGrad(newRecallBatch(data, batch), grads)
		trainLoss = append(trainLoss, plotter.XY{X: float64(step), Y: l})
		opt.update(m.params, grads)
	}
	// What the layer learned to do with its write strength: beta at each
	// kind of token, averaged over the held-out sequences.
	var sum [3]float64
	var n [3]int
	for _, tok := range test.tokens {
		for t := range recallT {
			x0, x1 := features(tok, t)
			z := m.params[pBb][0] + m.params[pWb][x0]
			if x1 >= 0 {
				z += m.params[pWb][x1]
			}
			kind := 2 // a query
			if t < 2*recallPairs {
				kind = t % 2 // 0: a key, 1: a value
			}
			sum[kind] += 1 / (1 + math.Exp(-z))
			n[kind]++
		}
	}
	fmt.Printf("mean beta: at keys %.2f, at values %.2f, at queries %.2f\n", sum[0]/float64(n[0]), sum[1]/float64(n[1]), sum[2]/float64(n[2]))
	p := plot.New()
	p.Title.Text = "Multi-query associative recall: one gated delta-rule layer, Adam"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "cross-entropy (nats)"
	lt, err := plotter.NewLine(trainLoss)
	if err != nil {
		panic(err)
	}
	lh, err := plotter.NewLine(testLoss)
	if err != nil {
		panic(err)
	}
	lh.Width, lh.Color = vg.Points(2), color.RGBA{R: 200, G: 40, B: 40, A: 255}
	chance, err := plotter.NewLine(plotter.XYs{{X: 0, Y: math.Log(recallVals)}, {X: steps, Y: math.Log(recallVals)}})
	if err != nil {
		panic(err)
	}
	chance.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(plotter.NewGrid(), lt, lh, chance)
	p.Legend.Add("training batch", lt)
	p.Legend.Add("held-out, 256 sequences", lh)
	p.Legend.Add(fmt.Sprintf("chance: ln %d", recallVals), chance)
	p.Legend.Top = true
	p.Legend.YOffs = -vg.Points(90)
	p.Legend.XOffs = -vg.Points(10)
	p.Y.Min, p.Y.Max = 0, 4
	nbui.Plot(p, 6.5*vg.Inch, 4*vg.Inch)
	final, acc := m.lossAndGrad(test, nil)
	if !(final < 0.5*math.Log(recallVals)) || acc < 0.5 {
		panic(fmt.Sprintf("training did not learn the task: held-out loss %.3f, accuracy %.2f", final, acc))
	}
}

// nb:end
