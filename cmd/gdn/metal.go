package main

import (
	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/verify"
)

// The Metal backend: the GPU on Apple silicon, the CPU executor of the same
// kernel source elsewhere (-backend metal:gpu or metal:executor to choose).
func init() {
	openMetal = func(kind string) (verify.Backend, error) {
		b, err := metal.Open(kind)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	metalScratchBytes = metal.ScratchBytes
}
