package gdn

import "testing"

// One token of one head at S = 128, single-threaded: the inner cost that the
// whole-op benchmarks multiply. No entry of k or v is zero: a state entry that
// only decays reaches float32 subnormals within a few hundred steps, and
// subnormal arithmetic is tens of times slower on x86, which would measure the
// processor's slow path rather than the code.
func benchToken() (*Token[float32], []float32, []float32, []float32) {
	const s = 128
	x := &Token[float32]{Q: make([]float32, s), K: make([]float32, s), V: make([]float32, s), A: make([]float32, s), Beta: 0.5, Scale: 0.1}
	for i := range s {
		x.Q[i], x.K[i], x.V[i], x.A[i] = 0.01*float32(i%7), 0.02*float32(i%5+1), float32(1+i%3), 0.9
	}
	M := make([]float32, s*s)
	for i := range M {
		M[i] = float32(i%11) * 0.01
	}
	return x, M, make([]float32, s*s), make([]float32, s)
}

func BenchmarkStepForward(b *testing.B) {
	x, M, _, y := benchToken()
	for b.Loop() {
		StepForward(M, x, y)
	}
}

func BenchmarkStepBackward(b *testing.B) {
	x, M, dM, gy := benchToken()
	Mt := append([]float32(nil), M...)
	StepForward(Mt, x, nil)
	g := NewTokenGrads[float32](128, 128)
	mp := make([]float32, 128)
	for b.Loop() {
		StepBackward(dM, M, Mt, x, gy, g, mp)
	}
}
