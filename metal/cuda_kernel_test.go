//go:build linux

package metal_test

import (
	"errors"
	"flag"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/verify"
)

var cudaLong = flag.Bool("cuda.long", false, "TestCUDAMatrix: the long case matrix")

// TestCUDAMatrix runs the CUDA backend on every case of the matrix
// (-cuda.long: the long matrix) with the limits every backend meets: NMSE
// against the float64 reference, grad mode against finite differences,
// reruns bit-identical. Every output and a new scratch start as NaN, so an
// element no kernel writes fails. It skips where there is no NVIDIA GPU.
func TestCUDAMatrix(t *testing.T) {
	b, err := metal.Open(metal.CUDA)
	if errors.Is(err, metal.ErrNoCUDA) {
		t.Skipf("no NVIDIA GPU here (%v); the CUDA runner's GPU-free logic has its own tests", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cases := verify.Matrix()
	if *cudaLong {
		cases = verify.LongMatrix()
	}
	runMatrix(t, b, cases)
}

// TestCUDAChunkMatrix runs the chunk kernels on the CUDA backend on every
// case of the matrix with Algo = Chunk (each case at its segment length as
// chunk length), with TestCUDAMatrix's limits. It skips where there is no
// NVIDIA GPU.
func TestCUDAChunkMatrix(t *testing.T) {
	b, err := metal.Open(metal.CUDA)
	if errors.Is(err, metal.ErrNoCUDA) {
		t.Skipf("no NVIDIA GPU here (%v); the executor runs the chunk kernels in TestMetalChunkMatrix", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cases := verify.Matrix()
	if *cudaLong {
		cases = verify.LongMatrix()
	}
	runMatrix(t, b, verify.WithAlgo(cases, gdn.Chunk, 0))
}
