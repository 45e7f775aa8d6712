//go:build darwin && cgo

package metal

/*
#cgo LDFLAGS: -framework Metal -framework Foundation -framework CoreGraphics
// MTLCreateSystemDefaultDevice returns id<MTLDevice>, a retained object
// pointer; darwinkit v0.5.0 does not wrap it.
extern void* MTLCreateSystemDefaultDevice(void);
static void* gdn_default_device(void) { return MTLCreateSystemDefaultDevice(); }
*/
import "C"

import (
	"fmt"
	"math"
	"sort"
	"unsafe"

	"github.com/progrium/darwinkit/macos/foundation"
	mtl "github.com/progrium/darwinkit/macos/metal"
	"github.com/progrium/darwinkit/objc"
)

// gpu runs the kernels on the system's default Metal device.
type gpu struct {
	dev       mtl.DeviceObject
	queue     mtl.CommandQueueObject
	pipelines map[string]mtl.ComputePipelineStateObject
	scr       mtl.BufferObject
	scrLen    int
}

// nsError returns the description of the NSError at p, or "" for none.
func nsError(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	return foundation.ErrorFrom(p).LocalizedDescription()
}

// openGPU compiles Source on the default device and builds every pipeline
// once. A compile error carries the Metal compiler's log.
func openGPU() (engine, error) {
	p := C.gdn_default_device()
	if p == nil {
		return nil, fmt.Errorf("%w: MTLCreateSystemDefaultDevice returned nil", ErrNoGPU)
	}
	g := &gpu{dev: mtl.DeviceObject{Object: objc.ObjectFrom(unsafe.Pointer(p))}, pipelines: map[string]mtl.ComputePipelineStateObject{}}
	var err error
	objc.WithAutoreleasePool(func() { err = g.build() })
	if err != nil {
		return nil, err
	}
	return g, nil
}

func (g *gpu) build() error {
	var errp unsafe.Pointer
	opts := mtl.NewCompileOptions()
	// IEEE exp and division, as the reference (fast math trades accuracy).
	opts.SetFastMathEnabled(false)
	lib := g.dev.NewLibraryWithSourceOptionsError(string(source), opts, unsafe.Pointer(&errp))
	if lib.IsNil() {
		return fmt.Errorf("metal: compiling gdn.metal on %s failed:\n%s", g.dev.Name(), nsError(errp))
	}
	names, err := kernelNames(source)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		fn := lib.NewFunctionWithName(name)
		if fn.IsNil() {
			return fmt.Errorf("metal: gdn.metal has no function %q", name)
		}
		errp = nil
		ps := g.dev.NewComputePipelineStateWithFunctionError(fn, unsafe.Pointer(&errp))
		if ps.IsNil() {
			return fmt.Errorf("metal: building the pipeline of %s failed:\n%s", name, nsError(errp))
		}
		if m := int(ps.MaxTotalThreadsPerThreadgroup()); m < maxSimdgroups*simdWidth {
			return fmt.Errorf("metal: the pipeline of %s takes at most %d threads per threadgroup, the kernels need %d", name, m, maxSimdgroups*simdWidth)
		}
		g.pipelines[name] = ps
	}
	g.queue = g.dev.NewCommandQueue()
	if g.queue.IsNil() {
		return fmt.Errorf("metal: %s gave no command queue", g.dev.Name())
	}
	return nil
}

func (g *gpu) name() string { return "Metal" }

var _ bufferLimiter = (*gpu)(nil)

// maxBuffer is the device's largest buffer in bytes (maxBufferLength).
func (g *gpu) maxBuffer() int { return int(min(g.dev.MaxBufferLength(), math.MaxInt)) }

// scratchLen is the GPU scratch's size in bytes.
func scratchLen(e engine) int {
	if g, ok := e.(*gpu); ok {
		return g.scrLen
	}
	return 0
}

func (g *gpu) run(p *plan) (out []float32, err error) {
	objc.WithAutoreleasePool(func() { out, err = g.runPool(p) })
	return out, err
}

func (g *gpu) newBuffer(data unsafe.Pointer, n int) (mtl.BufferObject, error) {
	n = max(n, 16)
	var b mtl.BufferObject
	if data != nil {
		b = g.dev.NewBufferWithBytesLengthOptions(data, uint(n), mtl.ResourceStorageModeShared)
	} else {
		b = g.dev.NewBufferWithLengthOptions(uint(n), mtl.ResourceStorageModeShared)
	}
	if b.IsNil() {
		return b, fmt.Errorf("metal: cannot allocate a buffer of %d bytes on %s", n, g.dev.Name())
	}
	return b, nil
}

func (g *gpu) runPool(p *plan) ([]float32, error) {
	srcBytes := 4 * len(p.src)
	var srcPtr unsafe.Pointer
	if len(p.src) > 0 {
		srcPtr = unsafe.Pointer(&p.src[0])
	}
	src, err := g.newBuffer(srcPtr, srcBytes)
	if err != nil {
		return nil, err
	}
	defer src.Release()
	dst, err := g.newBuffer(nil, 4*p.dstLen)
	if err != nil {
		return nil, err
	}
	defer dst.Release()
	args, err := g.newBuffer(unsafe.Pointer(&p.args[0]), len(p.args))
	if err != nil {
		return nil, err
	}
	defer args.Release()
	// The scratch: one buffer, grown to the largest call, kept.
	if need := 4 * max(p.scrLen, 1); g.scr.IsNil() || g.scrLen < need {
		if !g.scr.IsNil() {
			g.scr.Release()
		}
		if g.scr, err = g.newBuffer(nil, need); err != nil {
			g.scrLen = 0
			return nil, err
		}
		g.scrLen = need
	}

	cb := g.queue.CommandBuffer()
	enc := cb.ComputeCommandEncoder()
	for _, d := range p.dispatch {
		ps, ok := g.pipelines[d.kernel]
		if !ok {
			return nil, fmt.Errorf("metal: no pipeline for %s", d.kernel)
		}
		enc.SetComputePipelineState(ps)
		enc.SetBufferOffsetAtIndex_(args, uint(d.argOff), 0)
		enc.SetBufferOffsetAtIndex_(src, 0, 1)
		enc.SetBufferOffsetAtIndex_(dst, 0, 2)
		enc.SetBufferOffsetAtIndex_(g.scr, 0, 3)
		enc.SetThreadgroupMemoryLengthAtIndex(uint(d.shared), 0)
		enc.DispatchThreadgroupsThreadsPerThreadgroup(
			mtl.Size{Width: uint64(d.grid[0]), Height: uint64(d.grid[1]), Depth: uint64(d.grid[2])},
			mtl.Size{Width: uint64(d.threads[0]), Height: uint64(d.threads[1]), Depth: uint64(d.threads[2])})
	}
	mtl.CommandEncoderObject{Object: enc.Object}.EndEncoding()
	cb.Commit()
	cb.WaitUntilCompleted()
	if st := cb.Status(); st != mtl.CommandBufferStatusCompleted {
		msg := "no error object"
		if e := cb.Error(); !e.IsNil() {
			msg = e.LocalizedDescription()
		}
		return nil, fmt.Errorf("metal: the command buffer ended with status %d: %s", st, msg)
	}
	out := unsafe.Slice((*float32)(dst.Contents()), p.dstLen)
	return append([]float32(nil), out...), nil
}
