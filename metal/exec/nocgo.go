//go:build !cgo

package exec

import "errors"

// errNoCgo is what every entry point returns in a build without cgo.
var errNoCgo = errors.New("exec: the CPU executor needs cgo (this binary was built with CGO_ENABLED=0)")

// Module is a compiled kernel source; without cgo there is none.
type Module struct {
	Kernels []string
}

// Compile needs cgo; this build has none.
func Compile(source []byte) (*Module, error) { return nil, errNoCgo }

// Launch needs cgo; this build has none.
func (m *Module) Launch(d Dispatch, s Schedule) error { return errNoCgo }

// Buffer is memory the kernels can read and write.
type Buffer struct {
	f []float32
	n int
}

// NewBuffer allocates n zeroed bytes.
func NewBuffer(n int) (*Buffer, error) { return &Buffer{f: make([]float32, (n+3)/4), n: n}, nil }

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int { return b.n }

// Floats views the buffer as float32s.
func (b *Buffer) Floats() []float32 { return b.f[:b.n/4] }

// Free releases the buffer's memory.
func (b *Buffer) Free() { b.f, b.n = nil, 0 }
