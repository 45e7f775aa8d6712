package figures

import (
	"errors"
	"fmt"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
)

// Backends are the backends that the verification matrix figure and the
// verification notebook cover: the CPU reference, the Metal kernels through
// the CPU executor (the same on every machine, so the committed figure
// does not depend on where it was made), and the Metal kernels on the GPU
// where there is one (a Mac, whose figure then gains that column). It
// returns an error when the executor cannot open (no cgo, or no C++20
// compiler): the figure must not silently lose a backend.
func Backends() ([]gdn.Backend, error) {
	bs := []gdn.Backend{gdn.CPU{}}
	ex, err := metal.Open(metal.Executor)
	if err != nil {
		return nil, fmt.Errorf("figures: the Metal executor: %w", err)
	}
	bs = append(bs, ex)
	gpu, err := metal.Open(metal.GPU)
	switch {
	case err == nil:
		bs = append(bs, gpu)
	case !errors.Is(err, metal.ErrNoGPU):
		return nil, fmt.Errorf("figures: the Metal GPU: %w", err)
	}
	return bs, nil
}
