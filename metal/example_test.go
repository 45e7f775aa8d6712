package metal_test

import (
	"fmt"
	"math"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/verify"
)

// The Metal backward against the CPU reference, both in float32, on 3
// value heads that share one q/k head, with q/k/v as row views of one
// fused buffer (the layout of Qwen3.5's delta-net layers).
func ExampleBackend_Backward() {
	b, err := metal.Open("") // the GPU on a Mac, the CPU executor elsewhere
	if err != nil {
		fmt.Println(err)
		return
	}
	p := verify.Build[float32](verify.Case{Family: "example", Sk: 32, Sv: 32, Hk: 1, Rep: 3, T: 9, Seqs: 1,
		Heads: gdn.Interleave, Layout: verify.Fused, State: true, C: 4, Seed: 1})
	packed, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, err := gdn.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	var diff, size float64
	for i, r := range ref.Packed {
		diff = max(diff, math.Abs(float64(packed[i]-r)))
		size = max(size, math.Abs(float64(r)))
	}
	l := ref.Shape.Layout()
	fmt.Println("packed [dq|dk|dv|dg|dbeta|dstate]:", len(packed), "floats; dv at", l.DV, "dstate at", l.DState)
	fmt.Println("max |metal - reference| / max |reference| < 1e-5:", diff/size < 1e-5)
	// dq and dk are 32*1*9 = 288 floats each, dv 32*3*9 = 864, dg and dbeta
	// 3*9 = 27 each, dstate 32*32*3 = 3072.

	// Output:
	// packed [dq|dk|dv|dg|dbeta|dstate]: 4566 floats; dv at 576 dstate at 1494
	// max |metal - reference| / max |reference| < 1e-5: true
}

// Head sizes the kernels do not take are refused before anything runs.
func ExampleBackend_Forward_error() {
	b, err := metal.Open("")
	if err != nil {
		fmt.Println(err)
		return
	}
	p := verify.Build[float32](verify.Case{Family: "example", Sk: 8, Sv: 8, Hk: 1, Rep: 1, T: 2, Seqs: 1, Seed: 1})
	_, _, err = b.Forward(&p.In, p.Opt)
	fmt.Println(err)
	// Output:
	// metal: q: ne[0] (S_k) = 8 is not a head size the kernels take ([16 32 64 128 256])
}

// A training step over several layers on one Backend: each layer's
// forward keeps its A, P and X in a slot of its own, then the backward
// reads them, last layer first, and gives Backward's gradients bit for
// bit, Backward calls between them leaving the other slots as they were.
// (Here each layer's dy is given; in a model it comes from the layer
// above.)
func ExampleBackend_KeepSlots() {
	b, err := metal.Open("")
	if err != nil {
		fmt.Println(err)
		return
	}
	var layers []*verify.Problem[float32]
	for l := range 3 {
		layers = append(layers, verify.Build[float32](verify.Case{Family: "example", Sk: 16, Sv: 16, Hk: 1, Rep: 2, T: 12, Seqs: 1,
			KDA: true, Algo: gdn.Chunk, L: 8, Seed: uint64(10 + l)}))
	}
	// how many layers one Backend keeps (on a Mac, within its GPU's
	// largest buffer); more layers would go on another Backend
	if most, err := b.MaxKeepSlots(&layers[0].In, layers[0].Opt); err != nil || most < len(layers) {
		fmt.Println("slots:", most, err)
		return
	}
	if err := b.KeepSlots(len(layers), &layers[0].In, layers[0].Opt); err != nil {
		fmt.Println(err)
		return
	}
	kept := make([]*metal.Kept, len(layers))
	for l, p := range layers {
		if _, _, kept[l], err = b.ForwardKeep(&p.In, p.Opt); err != nil {
			fmt.Println(err)
			return
		}
	}
	for l := len(layers) - 1; l >= 0; l-- {
		p := layers[l]
		packed, err := b.BackwardKept(kept[l], &p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			fmt.Println(err)
			return
		}
		want, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			fmt.Println(err)
			return
		}
		same := len(packed) == len(want)
		for i := range want {
			same = same && math.Float32bits(packed[i]) == math.Float32bits(want[i])
		}
		fmt.Printf("layer %d: BackwardKept gives Backward's bits: %v\n", l, same)
	}
	// Output:
	// layer 2: BackwardKept gives Backward's bits: true
	// layer 1: BackwardKept gives Backward's bits: true
	// layer 0: BackwardKept gives Backward's bits: true
}
