package main

import (
	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
)

// openMetalBackend opens package metal's backend: the GPU on Apple silicon,
// the CPU executor of the same kernel source elsewhere ("gpu" or
// "executor" to choose).
func openMetalBackend(kind string) (gdn.Backend, error) {
	b, err := metal.Open(kind)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return b, nil
}
