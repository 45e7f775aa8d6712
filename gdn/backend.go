package gdn

// Backend is an implementation of the op in float32 with the reference's
// layouts: this package's CPU reference, the Metal kernels on the GPU or on
// the CPU executor, and any other runner of the same op. The verification
// harness and the gdn command reach every implementation through it.
//
// Forward returns y [S_v, H_v, T, n_seqs] and the state slots
// [S_k, S_v, H_v, n_seqs, snapshots], as Forward does; Backward returns the
// packed [dq|dk|dv|dg|dbeta|dstate] (Shape.Layout), as Backward's
// Grads.Packed, which NewGrads splits. Neither modifies its inputs, and
// each validates them as Inputs.Shape does, naming the tensor and the
// dimension at fault.
type Backend interface {
	// Name names the backend in reports, e.g. "CPU" or "Metal(executor)".
	Name() string
	// Supports returns nil if the backend runs calls of shape s with
	// options opt, or an error saying what it does not take.
	Supports(s Shape, opt Options) error
	// ScratchBytes is the backward's scratch in bytes per (head, seq) for
	// a call of shape s with options opt (0 for a call it does not take).
	ScratchBytes(s Shape, opt Options) int
	Forward(in *Inputs[float32], opt Options) (y, states []float32, err error)
	Backward(in *Inputs[float32], dy Tensor[float32], dStates []float32, opt Options) (packed []float32, err error)
}

// CPU is this package's reference in float32 as a Backend: Forward and
// Backward on as many goroutines as opt.Threads allows.
type CPU struct{}

// Name is "CPU".
func (CPU) Name() string { return "CPU" }

// Supports returns nil: the reference takes every shape that Inputs.Shape
// accepts.
func (CPU) Supports(Shape, Options) error { return nil }

// ScratchBytes is ScratchBytes[float32] at s's head sizes and T, and opt's
// segment length; for the Chunk algorithm, ChunkScratchBytes[float32] at
// opt's chunk length.
func (CPU) ScratchBytes(s Shape, opt Options) int {
	if opt.Algo == Chunk {
		return ChunkScratchBytes[float32](s, opt.ChunkLength())
	}
	return ScratchBytes[float32](s.Sk, s.Sv, s.T, opt.SegmentLength(s.T))
}

// Forward is Forward's y and States.
func (CPU) Forward(in *Inputs[float32], opt Options) ([]float32, []float32, error) {
	r, err := Forward(in, opt)
	if err != nil {
		return nil, nil, err
	}
	return r.Y, r.States, nil
}

// Backward is Backward's packed buffer.
func (CPU) Backward(in *Inputs[float32], dy Tensor[float32], dStates []float32, opt Options) ([]float32, error) {
	g, err := Backward(in, dy, dStates, opt)
	if err != nil {
		return nil, err
	}
	return g.Packed, nil
}
