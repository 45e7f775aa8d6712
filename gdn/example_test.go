package gdn_test

import (
	"fmt"
	"math"

	"github.com/gdnback/gdnback/gdn"
)

// One head of size 1 over two tokens, small enough to follow by hand:
//
//	t = 0: a = e^0 = 1, u = 0, d = 0.5 (2 - 0) = 1, M = 1, y = 1*1 = 1
//	t = 1: a = 0.5, Mp = 0.5, u = 0.5, d = 1 (1.5 - 0.5) = 1, M = 1.5, y = 1.5*2 = 3
//
// With dy = (1, 1) and no state gradient, L = y_0 + y_1. At t = 1, dM = q_1 = 2,
// dd = dM k = 2, dbeta_1 = dd (v - u) = 2 * 1 = 2, du = -beta dd = -2 and
// dMp = dM + du k = 0: with beta_1 |k|^2 = 1 the new state forgets the old one
// along k, so M_0 reaches L through y_0 alone. At t = 0, dM = q_0 = 1,
// dd = 1 and dbeta_0 = 1 * (2 - 0) = 2; dq_t = M_t: 1 and 1.5.
func ExampleBackward() {
	ne := [4]int{1, 1, 2, 1} // [S, H, T, n_seqs]
	in := &gdn.Inputs[float64]{
		Q:    gdn.Contiguous([]float64{1, 2}, ne),
		K:    gdn.Contiguous([]float64{1, 1}, ne),
		V:    gdn.Contiguous([]float64{2, 1.5}, ne),
		G:    gdn.Contiguous([]float64{0, math.Log(0.5)}, ne),
		Beta: gdn.Contiguous([]float64{0.5, 1}, ne),
	}
	opt := gdn.Options{Scale: 1}
	f, err := gdn.Forward(in, opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("y:", f.Y, "final state:", f.States)

	g, err := gdn.Backward(in, gdn.Contiguous([]float64{1, 1}, ne), nil, opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("dq:", g.DQ, "dbeta:", g.DBeta)
	l := g.Shape.Layout()
	fmt.Println("packed offsets:", l.DQ, l.DK, l.DV, l.DG, l.DBeta, l.DState, "of", l.Total)
	// Output:
	// y: [1 3] final state: [1.5]
	// dq: [1 1.5] dbeta: [2 2]
	// packed offsets: 0 2 4 6 8 10 of 11
}

// A shape error names the tensor and the dimension.
func ExampleForward_error() {
	in := &gdn.Inputs[float32]{
		Q:    gdn.Contiguous(make([]float32, 3*2*4), [4]int{3, 2, 4, 1}),
		K:    gdn.Contiguous(make([]float32, 3*2*4), [4]int{3, 2, 4, 1}),
		V:    gdn.Contiguous(make([]float32, 3*3*4), [4]int{3, 3, 4, 1}),
		G:    gdn.Contiguous(make([]float32, 3*4), [4]int{1, 3, 4, 1}),
		Beta: gdn.Contiguous(make([]float32, 3*4), [4]int{1, 3, 4, 1}),
	}
	_, err := gdn.Forward(in, gdn.Options{})
	fmt.Println(err)
	// Output:
	// gdn: v: ne[1] (H_v) = 3 is not a multiple of q/k's ne[1] (H_k) = 2
}
