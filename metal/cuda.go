//go:build linux

package metal

import (
	"fmt"
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// cudaEngine runs the kernels on an NVIDIA GPU: the primary context of
// device 0, one stream, one module compiled by NVRTC.
type cudaEngine struct {
	d       *cuDriver
	dev     int32
	ctx     uintptr
	stream  uintptr
	devName string
	fn      map[string]cudaFunc
	names   []string // the kernels of fn in the order of gdn.metal

	src, dst, scr devBuf     // grown to the largest call and reused
	ev            [2]uintptr // events around a call's dispatches
	live          int64      // device bytes held now
	peak          int64
	lastMS        float64 // the last call's dispatches, by the events
	lastLaunchMS  float64 // the host's time issuing them
}

// cudaFunc is a loaded trampoline and what the compiler gave it.
type cudaFunc struct {
	h          uintptr
	maxThreads int
	regs       int
	local      int // bytes of local memory a thread: spills and arrays not held in registers
	shared     int // bytes of static shared memory a block
}

// nanBits is a quiet NaN: outputs and a new scratch are filled with it, so
// that an element no kernel writes cannot pass for a result.
const nanBits = 0x7fc00000

func openCUDA(src []byte) (engine, error) {
	ks, err := cudaKernels(src)
	if err != nil {
		return nil, err
	}
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// (ErrNoCUDA says "metal: cuda:" already; the result follows it.)
	if r := d.cuInit(0); r != 0 {
		return nil, fmt.Errorf("%w: cuInit: %s", ErrNoCUDA, d.describe(r))
	}
	var n int32
	if r := d.cuDeviceGetCount(&n); r != 0 {
		return nil, fmt.Errorf("%w: cuDeviceGetCount: %s", ErrNoCUDA, d.describe(r))
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: the driver sees no device", ErrNoCUDA)
	}
	e := &cudaEngine{d: d, fn: map[string]cudaFunc{}}
	if err := d.check(d.cuDeviceGet(&e.dev, 0), "cuDeviceGet"); err != nil {
		return nil, err
	}
	name := make([]byte, 256)
	if err := d.check(d.cuDeviceGetName(&name[0], int32(len(name)), e.dev), "cuDeviceGetName"); err != nil {
		return nil, err
	}
	e.devName = cString(&name[0])
	var major, minor int32
	if err := firstError(
		d.check(d.cuDeviceGetAttribute(&major, cuDevAttrCCMajor, e.dev), "cuDeviceGetAttribute"),
		d.check(d.cuDeviceGetAttribute(&minor, cuDevAttrCCMinor, e.dev), "cuDeviceGetAttribute"),
		d.check(d.cuDevicePrimaryCtxRetain(&e.ctx, e.dev), "cuDevicePrimaryCtxRetain"),
		d.check(d.cuCtxSetCurrent(e.ctx), "cuCtxSetCurrent"),
	); err != nil {
		return nil, err
	}
	nv, err := loadNVRTC()
	if err != nil {
		return nil, err
	}
	cubin, err := nvrtcCompile(nv, src, ks, fmt.Sprintf("sm_%d%d", major, minor), e.devName)
	if err != nil {
		return nil, err
	}
	var mod uintptr
	if err := d.check(d.cuModuleLoadData(&mod, unsafe.Pointer(&cubin[0])), "cuModuleLoadData"); err != nil {
		return nil, err
	}
	runtime.KeepAlive(cubin)
	for _, k := range ks {
		var f cudaFunc
		var mt, regs int32
		if err := firstError(
			d.check(d.cuModuleGetFunction(&f.h, mod, k.name), "cuModuleGetFunction("+k.name+")"),
			d.check(d.cuFuncGetAttribute(&mt, cuFuncAttrMaxThreads, f.h), "cuFuncGetAttribute("+k.name+")"),
			d.check(d.cuFuncGetAttribute(&regs, cuFuncAttrNumRegs, f.h), "cuFuncGetAttribute("+k.name+")"),
		); err != nil {
			return nil, err
		}
		f.maxThreads, f.regs = int(mt), int(regs)
		// Reported, not needed to run: -1 where the driver does not say.
		f.local, f.shared = -1, -1
		var local, shared int32
		if d.cuFuncGetAttribute(&local, cuFuncAttrLocalBytes, f.h) == 0 {
			f.local = int(local)
		}
		if d.cuFuncGetAttribute(&shared, cuFuncAttrSharedStatic, f.h) == 0 {
			f.shared = int(shared)
		}
		// As on Apple: a pipeline must take a threadgroup of 8 simdgroups.
		if f.maxThreads < maxSimdgroups*simdWidth {
			return nil, fmt.Errorf("metal: cuda: %s takes at most %d threads per block on %s (%d registers), the kernels need %d",
				k.name, f.maxThreads, e.devName, f.regs, maxSimdgroups*simdWidth)
		}
		e.fn[k.name] = f
		e.names = append(e.names, k.name)
	}
	if err := firstError(
		d.check(d.cuStreamCreate(&e.stream, cuStreamNonBlocking), "cuStreamCreate"),
		d.check(d.cuEventCreate(&e.ev[0], 0), "cuEventCreate"),
		d.check(d.cuEventCreate(&e.ev[1], 0), "cuEventCreate"),
	); err != nil {
		return nil, err
	}
	return e, nil
}

// nvrtcCompile compiles the kernels of src behind the CUDA prelude for
// arch and returns the cubin. A compile error carries NVRTC's log.
func nvrtcCompile(nv *nvrtcLib, src []byte, ks []cudaKernel, arch, dev string) ([]byte, error) {
	check := func(r cuResult, call string) error {
		if r == 0 {
			return nil
		}
		return fmt.Errorf("metal: cuda: %s: %s (%d)", call, nv.nvrtcGetErrorString(r), r)
	}
	tu, hnames, htexts := cudaSources(src, ks)
	_, hdrs := cStrings(htexts)
	_, names := cStrings(hnames)
	var prog uintptr
	if err := check(nv.nvrtcCreateProgram(&prog, tu+"\x00", "gdn_cuda.cu\x00", int32(len(hnames)), unsafe.Pointer(&hdrs[0]), unsafe.Pointer(&names[0])), "nvrtcCreateProgram"); err != nil {
		return nil, err
	}
	defer nv.nvrtcDestroyProgram(&prog)
	opts := cudaOptions(arch)
	_, optp := cStrings(opts)
	r := nv.nvrtcCompileProgram(prog, int32(len(opts)), unsafe.Pointer(&optp[0]))
	runtime.KeepAlive(hdrs)
	runtime.KeepAlive(names)
	runtime.KeepAlive(optp)
	if r != 0 {
		var n uint64
		nv.nvrtcGetProgramLogSize(prog, &n)
		log := make([]byte, n+1)
		nv.nvrtcGetProgramLog(prog, &log[0])
		var maj, mnr int32
		nv.nvrtcVersion(&maj, &mnr)
		return nil, fmt.Errorf("metal: cuda: NVRTC %d.%d compiling gdn.metal for %s (%s, %s) failed: %s:\n%s",
			maj, mnr, dev, arch, strings.Join(opts, " "), nv.nvrtcGetErrorString(r), strings.TrimRight(cString(&log[0]), "\n"))
	}
	var n uint64
	if err := check(nv.nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize"); err != nil {
		return nil, err
	}
	cubin := make([]byte, n)
	if err := check(nv.nvrtcGetCUBIN(prog, &cubin[0]), "nvrtcGetCUBIN"); err != nil {
		return nil, err
	}
	return cubin, nil
}

func (e *cudaEngine) name() string { return "Metal(cuda: " + e.devName + ")" }

func (e *cudaEngine) stats() DeviceStats {
	return DeviceStats{LastKernelTime: e.lastMS, LastLaunchTime: e.lastLaunchMS, PeakBytes: e.peak, ScratchBytes: e.scr.n}
}

func (e *cudaEngine) resetPeak() { e.peak = e.live }

func (e *cudaEngine) kernels() []KernelResources {
	ks := make([]KernelResources, 0, len(e.names))
	for _, name := range e.names {
		f := e.fn[name]
		ks = append(ks, KernelResources{Name: name, Registers: f.regs, LocalBytes: f.local, SharedStatic: f.shared, MaxThreads: f.maxThreads})
	}
	return ks
}

// devBuf is a device buffer of n bytes, grown to the largest call and
// reused.
type devBuf struct {
	p uint64
	n int64
}

// grow makes b at least need bytes; a new buffer is filled with NaN when
// poison is set.
func (e *cudaEngine) grow(b *devBuf, need int64, what string, poison bool) error {
	need = max(need, 16)
	if b.n >= need {
		return nil
	}
	if b.p != 0 {
		// The stream may still read the old buffer.
		if err := e.d.check(e.d.cuStreamSynchronize(e.stream), "cuStreamSynchronize"); err != nil {
			return err
		}
		e.d.cuMemFree(b.p)
		e.live -= b.n
		b.p, b.n = 0, 0
	}
	if err := e.d.check(e.d.cuMemAlloc(&b.p, uint64(need)), fmt.Sprintf("cuMemAlloc(%s, %d bytes)", what, need)); err != nil {
		b.p = 0
		return err
	}
	b.n = need
	e.live += need
	e.peak = max(e.peak, e.live)
	if poison {
		return e.d.check(e.d.cuMemsetD32Async(b.p, nanBits, uint64(need/4), e.stream), "cuMemsetD32Async("+what+")")
	}
	return nil
}

// run uploads the inputs once, launches the dispatches in order on the one
// stream, each with its args as its parameters, reads the outputs back and
// synchronizes once. Its three device buffers (inputs, outputs and the
// scratch) are each grown to the largest call and reused.
func (e *cudaEngine) run(p *plan) ([]float32, error) {
	for _, d := range p.dispatch {
		if err := checkLimits(d); err != nil {
			return nil, err
		}
		f, ok := e.fn[d.kernel]
		if !ok {
			return nil, fmt.Errorf("metal: cuda: the module has no kernel %q", d.kernel)
		}
		if n := d.threads[0] * d.threads[1] * d.threads[2]; n > f.maxThreads {
			return nil, fmt.Errorf("metal: cuda: %s: %d threads per block, it takes at most %d on %s (%d registers)", d.kernel, n, f.maxThreads, e.devName, f.regs)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := e.d
	if err := d.check(d.cuCtxSetCurrent(e.ctx), "cuCtxSetCurrent"); err != nil {
		return nil, err
	}
	if err := firstError(
		e.grow(&e.src, int64(4*len(p.src)), "inputs", false),
		e.grow(&e.dst, int64(4*p.dstLen), "outputs", false),
		e.grow(&e.scr, int64(4*p.scrLen), "scratch", true),
	); err != nil {
		return nil, err
	}
	// A failed call leaves the stream drained.
	defer d.cuStreamSynchronize(e.stream)

	if len(p.src) > 0 {
		if err := d.check(d.cuMemcpyHtoDAsync(e.src.p, unsafe.Pointer(&p.src[0]), uint64(4*len(p.src)), e.stream), "cuMemcpyHtoDAsync(inputs)"); err != nil {
			return nil, err
		}
	}
	if err := firstError(
		// Outputs start as NaN: an element no kernel writes cannot pass.
		d.check(d.cuMemsetD32Async(e.dst.p, nanBits, uint64(p.dstLen), e.stream), "cuMemsetD32Async(outputs)"),
	); err != nil {
		return nil, err
	}
	bufs := []uint64{e.src.p, e.dst.p, e.scr.p}
	params := make([]cudaParams, len(p.dispatch))
	for i, dp := range p.dispatch {
		var err error
		if params[i], err = packParams(p.args, dp.argOff, bufs); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	if err := d.check(d.cuEventRecord(e.ev[0], e.stream), "cuEventRecord"); err != nil {
		return nil, err
	}
	for i, dp := range p.dispatch {
		if dp.grid[0]*dp.grid[1]*dp.grid[2] == 0 {
			continue
		}
		ptrs := params[i].pointers()
		r := d.cuLaunchKernel(e.fn[dp.kernel].h,
			uint32(dp.grid[0]), uint32(dp.grid[1]), uint32(dp.grid[2]),
			uint32(dp.threads[0]), uint32(dp.threads[1]), uint32(dp.threads[2]),
			uint32(dp.shared), e.stream, unsafe.Pointer(&ptrs[0]), nil)
		if r != 0 {
			return nil, d.check(r, fmt.Sprintf("cuLaunchKernel(%s, dispatch %d of %d, grid %v, threads %v)", dp.kernel, i+1, len(p.dispatch), dp.grid, dp.threads))
		}
	}
	if err := d.check(d.cuEventRecord(e.ev[1], e.stream), "cuEventRecord"); err != nil {
		return nil, err
	}
	e.lastLaunchMS = float64(time.Since(t0)) / 1e6
	out := make([]float32, p.dstLen)
	if p.dstLen > 0 {
		if err := d.check(d.cuMemcpyDtoHAsync(unsafe.Pointer(&out[0]), e.dst.p, uint64(4*p.dstLen), e.stream), "cuMemcpyDtoHAsync(outputs)"); err != nil {
			return nil, err
		}
	}
	if err := d.check(d.cuStreamSynchronize(e.stream), "cuStreamSynchronize (the kernels)"); err != nil {
		return nil, err
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(params)
	var ms float32
	if err := d.check(d.cuEventElapsedTime(&ms, e.ev[0], e.ev[1]), "cuEventElapsedTime"); err != nil {
		return nil, err
	}
	e.lastMS = float64(ms)
	return out, nil
}

func firstError(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
