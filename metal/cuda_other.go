//go:build !linux

package metal

import "fmt"

func openCUDA(src []byte) (engine, error) {
	return nil, fmt.Errorf("%w: the CUDA runner loads libcuda.so.1, on Linux only", ErrNoCUDA)
}
