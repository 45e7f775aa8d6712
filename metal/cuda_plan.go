package metal

import (
	"errors"
	"fmt"
	"unsafe"
)

// CUDA is the kind of backend that runs gdn.metal on an NVIDIA GPU: the
// source compiled at run time by NVRTC behind the CUDA prelude
// (metal/cuda/include/metal_stdlib), through libcuda.so.1 and NVRTC loaded
// at run time (no cgo, no toolkit at build time). Linux only.
const CUDA = "cuda"

// ErrNoCUDA is returned by Open(CUDA) where there is no NVIDIA driver,
// no NVIDIA GPU or no NVRTC.
var ErrNoCUDA = errors.New("metal: cuda: no NVIDIA GPU to run on")

// Apple's limits, which the CUDA runner holds every dispatch to (an H200
// allows more) so that what runs there also fits an Apple GPU.
const (
	appleMaxThreads = 1024
	appleMaxShared  = maxShared
)

// cudaMaxBufs is how many buffers a trampoline takes (gdncu::bufs).
const cudaMaxBufs = 8

// checkLimits refuses a dispatch beyond Apple's limits (1024 threads and
// 32 KiB of threadgroup memory per threadgroup) or beyond a CUDA grid.
func checkLimits(d dispatch) error {
	n := 1
	for i, t := range d.threads {
		if t < 1 {
			return fmt.Errorf("metal: cuda: %s: threads per threadgroup %v: dimension %d is %d", d.kernel, d.threads, i, t)
		}
		n *= t
	}
	if n > appleMaxThreads {
		return fmt.Errorf("metal: cuda: %s: %d threads per threadgroup (%v), more than Apple GPUs take (%d)", d.kernel, n, d.threads, appleMaxThreads)
	}
	if d.shared < 0 || d.shared > appleMaxShared {
		return fmt.Errorf("metal: cuda: %s: %d bytes of threadgroup memory, more than Apple GPUs take (%d)", d.kernel, d.shared, appleMaxShared)
	}
	limit := [3]int{1<<31 - 1, 65535, 65535}
	for i, g := range d.grid {
		if g < 0 || g > limit[i] {
			return fmt.Errorf("metal: cuda: %s: grid %v: dimension %d is outside 0..%d", d.kernel, d.grid, i, limit[i])
		}
	}
	return nil
}

// cudaParams is the parameter block of a trampoline,
//
//	kernel(const __grid_constant__ gdncu::argblob<argsStride> args, gdncu::bufs b)
//
// the dispatch's args by value (argsStride bytes of the plan's args, which
// cuLaunchKernel copies into the launch's parameters) and the buffers by
// value. Taken by value, the args live where a kernel's parameters do (the
// constant bank), as Metal's constant buffer: every read of a field is an
// operand of the instruction that uses it, which no store to the scratch
// can make stale, where through a device pointer each read was a global
// load the compiler repeated after the kernel's stores (it cannot tell the
// args from the scratch).
type cudaParams struct {
	args unsafe.Pointer // argsStride bytes: the dispatch's args
	bufs [cudaMaxBufs]uint64
}

// packParams returns the parameters of the dispatch whose args are at
// argOff in args, the plan's (argsStride bytes a dispatch). The parameters
// point into args, which must stay unchanged until the launch.
func packParams(args []byte, argOff int, bufs []uint64) (cudaParams, error) {
	var p cudaParams
	if len(bufs) > cudaMaxBufs {
		return p, fmt.Errorf("metal: cuda: %d buffers, a trampoline takes at most %d", len(bufs), cudaMaxBufs)
	}
	if argOff < 0 || argOff%16 != 0 || argOff+argsStride > len(args) {
		return p, fmt.Errorf("metal: cuda: args offset %d: not a multiple of 16, or without %d bytes after it in the plan's %d", argOff, argsStride, len(args))
	}
	p.args = unsafe.Pointer(&args[argOff])
	copy(p.bufs[:], bufs)
	return p, nil
}

// pointers returns the kernelParams array of cuLaunchKernel for p: one
// pointer per parameter, to its value.
func (p *cudaParams) pointers() [2]unsafe.Pointer {
	return [2]unsafe.Pointer{p.args, unsafe.Pointer(&p.bufs)}
}

// DeviceStats is what the CUDA backend measured: the GPU time of the last
// call's dispatches (CUDA events around them, on the one stream), the
// host's time issuing them, and the most device memory the backend has
// held at once (its inputs, outputs and scratch buffers, each grown
// to the largest call and kept) since the last ResetPeak.
type DeviceStats struct {
	LastKernelTime float64 // milliseconds
	LastLaunchTime float64 // milliseconds the host spent issuing those dispatches
	PeakBytes      int64
	ScratchBytes   int64
}

// DeviceStats returns the CUDA backend's measurements; ok is false for the
// other kinds.
func (b *Backend) DeviceStats() (s DeviceStats, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.eng.(statsEngine)
	if !ok {
		return s, false
	}
	return e.stats(), true
}

// ResetPeak restarts the peak device memory count at what the backend
// holds now (the scratch).
func (b *Backend) ResetPeak() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.eng.(statsEngine); ok {
		e.resetPeak()
	}
}

// KernelResources is what the CUDA driver reports of one compiled kernel
// (cuFuncGetAttribute): registers a thread, local memory a thread (the
// compiler's spills and the arrays it did not keep in registers; 0 when
// everything a thread holds is in registers), static shared memory a
// block, and the most threads a block may have with those registers.
// LocalBytes and SharedStatic are -1 where the driver did not say.
type KernelResources struct {
	Name         string
	Registers    int
	LocalBytes   int
	SharedStatic int
	MaxThreads   int
}

// KernelResources returns the CUDA backend's kernels as NVRTC compiled
// them for its GPU, in the order of gdn.metal; ok is false for the other
// kinds. A kernel whose LocalBytes is not 0 reads and writes part of
// what it holds through the cache, where an Apple GPU's compiler may
// well decide otherwise: a lead on the proxy's speed, not a property of
// the MSL.
func (b *Backend) KernelResources() (ks []KernelResources, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.eng.(statsEngine)
	if !ok {
		return nil, false
	}
	return e.kernels(), true
}

// statsEngine is an engine that measures on the device.
type statsEngine interface {
	stats() DeviceStats
	resetPeak()
	kernels() []KernelResources
}

// cudaOptions are NVRTC's options for arch (sm_90, say): IEEE arithmetic
// with no contraction beyond the source's fma calls, device functions by
// default (the kernel source carries no CUDA attributes), line info for
// compute-sanitizer's reports.
func cudaOptions(arch string) []string {
	return []string{"--std=c++17", "-default-device", "--fmad=false", "-arch=" + arch, "-lineinfo", "-w"}
}
