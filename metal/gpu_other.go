//go:build !darwin || !cgo

package metal

import "fmt"

func openGPU() (engine, error) {
	return nil, fmt.Errorf("%w: Metal runs on Apple GPUs (darwin) only; use the %q kind here", ErrNoGPU, Executor)
}

func scratchLen(engine) int { return 0 }
