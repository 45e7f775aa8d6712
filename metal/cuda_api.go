//go:build linux

package metal

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuResult is a CUDA driver API status (CUresult); nvrtcResult likewise.
type cuResult int32

// cuDriver holds the CUDA driver API functions the runner calls, loaded
// from libcuda.so.1 at run time.
type cuDriver struct {
	cuGetErrorName           func(r cuResult, s **byte) cuResult
	cuGetErrorString         func(r cuResult, s **byte) cuResult
	cuInit                   func(flags uint32) cuResult
	cuDriverGetVersion       func(v *int32) cuResult
	cuDeviceGetCount         func(n *int32) cuResult
	cuDeviceGet              func(d *int32, ordinal int32) cuResult
	cuDeviceGetName          func(name *byte, n int32, d int32) cuResult
	cuDeviceGetAttribute     func(v *int32, attr int32, d int32) cuResult
	cuDevicePrimaryCtxRetain func(ctx *uintptr, d int32) cuResult
	cuCtxSetCurrent          func(ctx uintptr) cuResult
	cuModuleLoadData         func(mod *uintptr, image unsafe.Pointer) cuResult
	cuModuleGetFunction      func(f *uintptr, mod uintptr, name string) cuResult
	cuFuncGetAttribute       func(v *int32, attr int32, f uintptr) cuResult
	cuMemAlloc               func(p *uint64, n uint64) cuResult
	cuMemFree                func(p uint64) cuResult
	cuMemGetInfo             func(free, total *uint64) cuResult
	cuMemcpyHtoDAsync        func(dst uint64, src unsafe.Pointer, n uint64, s uintptr) cuResult
	cuMemcpyDtoHAsync        func(dst unsafe.Pointer, src uint64, n uint64, s uintptr) cuResult
	cuMemsetD32Async         func(dst uint64, v uint32, n uint64, s uintptr) cuResult
	cuStreamCreate           func(s *uintptr, flags uint32) cuResult
	cuStreamSynchronize      func(s uintptr) cuResult
	cuEventCreate            func(e *uintptr, flags uint32) cuResult
	cuEventRecord            func(e, s uintptr) cuResult
	cuEventElapsedTime       func(ms *float32, start, end uintptr) cuResult
	cuLaunchKernel           func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, s uintptr, params, extra unsafe.Pointer) cuResult
}

// nvrtcLib holds the NVRTC functions the runner calls.
type nvrtcLib struct {
	nvrtcVersion           func(major, minor *int32) cuResult
	nvrtcGetErrorString    func(r cuResult) string
	nvrtcCreateProgram     func(p *uintptr, src, name string, nh int32, headers, names unsafe.Pointer) cuResult
	nvrtcCompileProgram    func(p uintptr, nopt int32, opts unsafe.Pointer) cuResult
	nvrtcGetProgramLogSize func(p uintptr, n *uint64) cuResult
	nvrtcGetProgramLog     func(p uintptr, log *byte) cuResult
	nvrtcGetCUBINSize      func(p uintptr, n *uint64) cuResult
	nvrtcGetCUBIN          func(p uintptr, cubin *byte) cuResult
	nvrtcDestroyProgram    func(p *uintptr) cuResult
}

// Device attributes and function attributes (cuda.h).
const (
	cuDevAttrMaxThreadsPerBlock = 1
	cuDevAttrCCMajor            = 75
	cuDevAttrCCMinor            = 76
	cuFuncAttrMaxThreads        = 0
	cuFuncAttrSharedStatic      = 1
	cuFuncAttrLocalBytes        = 3
	cuFuncAttrNumRegs           = 4
	cuStreamNonBlocking         = 1
)

// libcudaNames and libnvrtcNames are tried in order; $GDN_LIBCUDA and
// $GDN_LIBNVRTC, when set, are tried first.
var (
	libcudaNames  = []string{"libcuda.so.1", "libcuda.so"}
	libnvrtcNames = []string{
		"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
		"/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12",
	}
)

// dlopenFirst opens the first library of names that loads; where none
// does, the error is the first name's.
func dlopenFirst(env string, names []string) (uintptr, string, error) {
	if p := os.Getenv(env); p != "" {
		names = append([]string{p}, names...)
	}
	var first error
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		if first == nil {
			first = err
		}
	}
	return 0, "", first
}

// bind sets each function field of lib (a pointer to a struct of func
// fields) to the symbol of the same name in the library h, trying the
// _v2 symbol first where the API has one.
func bind(h uintptr, lib string, fields map[string]any) error {
	for name, fp := range fields {
		var sym uintptr
		var err error
		for _, n := range []string{name + "_v2", name} {
			if sym, err = purego.Dlsym(h, n); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("%s has no %s: %w", lib, name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return nil
}

// loadDriver loads libcuda.so.1. Where it is missing the error wraps
// ErrNoCUDA.
func loadDriver() (*cuDriver, error) {
	h, name, err := dlopenFirst("GDN_LIBCUDA", libcudaNames)
	if err != nil {
		return nil, fmt.Errorf("%w: no NVIDIA driver (libcuda.so.1 does not load: %v)", ErrNoCUDA, err)
	}
	d := &cuDriver{}
	err = bind(h, name, map[string]any{
		"cuGetErrorName": &d.cuGetErrorName, "cuGetErrorString": &d.cuGetErrorString,
		"cuInit": &d.cuInit, "cuDriverGetVersion": &d.cuDriverGetVersion,
		"cuDeviceGetCount": &d.cuDeviceGetCount, "cuDeviceGet": &d.cuDeviceGet,
		"cuDeviceGetName": &d.cuDeviceGetName, "cuDeviceGetAttribute": &d.cuDeviceGetAttribute,
		"cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain, "cuCtxSetCurrent": &d.cuCtxSetCurrent,
		"cuModuleLoadData": &d.cuModuleLoadData, "cuModuleGetFunction": &d.cuModuleGetFunction,
		"cuFuncGetAttribute": &d.cuFuncGetAttribute,
		"cuMemAlloc":         &d.cuMemAlloc, "cuMemFree": &d.cuMemFree, "cuMemGetInfo": &d.cuMemGetInfo,
		"cuMemcpyHtoDAsync": &d.cuMemcpyHtoDAsync, "cuMemcpyDtoHAsync": &d.cuMemcpyDtoHAsync,
		"cuMemsetD32Async": &d.cuMemsetD32Async,
		"cuStreamCreate":   &d.cuStreamCreate, "cuStreamSynchronize": &d.cuStreamSynchronize,
		"cuEventCreate": &d.cuEventCreate, "cuEventRecord": &d.cuEventRecord,
		"cuEventElapsedTime": &d.cuEventElapsedTime, "cuLaunchKernel": &d.cuLaunchKernel,
	})
	if err != nil {
		return nil, fmt.Errorf("metal: cuda: %w", err)
	}
	return d, nil
}

// loadNVRTC loads NVRTC, the run-time compiler of the CUDA toolkit.
func loadNVRTC() (*nvrtcLib, error) {
	h, name, err := dlopenFirst("GDN_LIBNVRTC", libnvrtcNames)
	if err != nil {
		return nil, fmt.Errorf("%w: no NVRTC (libnvrtc.so does not load; set $GDN_LIBNVRTC to its path): %v", ErrNoCUDA, err)
	}
	n := &nvrtcLib{}
	err = bind(h, name, map[string]any{
		"nvrtcVersion": &n.nvrtcVersion, "nvrtcGetErrorString": &n.nvrtcGetErrorString,
		"nvrtcCreateProgram": &n.nvrtcCreateProgram, "nvrtcCompileProgram": &n.nvrtcCompileProgram,
		"nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize, "nvrtcGetProgramLog": &n.nvrtcGetProgramLog,
		"nvrtcGetCUBINSize": &n.nvrtcGetCUBINSize, "nvrtcGetCUBIN": &n.nvrtcGetCUBIN,
		"nvrtcDestroyProgram": &n.nvrtcDestroyProgram,
	})
	if err != nil {
		return nil, fmt.Errorf("metal: cuda: %w", err)
	}
	if err := n.checkVersion(name); err != nil {
		return nil, err
	}
	return n, nil
}

// minNVRTCMajor is the oldest NVRTC major version the runner takes. NVRTC
// 11.8 (Debian 12's nvidia-cuda-toolkit) faults inside
// nvrtcCompileProgram on gdn's program, which would take the process down
// with it (the generated trampolines' gdncu::invoke template; the kernels
// called directly compile); the runner is checked with NVRTC 13.0.
const minNVRTCMajor = 12

// checkVersion refuses, as ErrNoCUDA, an NVRTC older than minNVRTCMajor,
// before any program reaches it; name is the library's.
func (n *nvrtcLib) checkVersion(name string) error {
	var maj, mnr int32
	if r := n.nvrtcVersion(&maj, &mnr); r != 0 {
		return fmt.Errorf("metal: cuda: %s: nvrtcVersion failed (%d)", name, r)
	}
	if maj < minNVRTCMajor {
		return fmt.Errorf("%w: %s is NVRTC %d.%d, which crashes compiling the kernels; the runner needs NVRTC %d or later (set $GDN_LIBNVRTC to its libnvrtc.so)",
			ErrNoCUDA, name, maj, mnr, minNVRTCMajor)
	}
	return nil
}

// check turns a driver status into an error naming the call.
func (d *cuDriver) check(r cuResult, call string) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("metal: cuda: %s: %s", call, d.describe(r))
}

// describe is a nonzero result's name, number and the driver's words for
// it.
func (d *cuDriver) describe(r cuResult) string {
	var name, desc *byte
	d.cuGetErrorName(r, &name)
	d.cuGetErrorString(r, &desc)
	return fmt.Sprintf("%s (%d): %s", cString(name), r, cString(desc))
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return "?"
	}
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// cStrings returns NUL-terminated copies of ss and an array of pointers to
// them, for a char** argument; keep both alive during the call.
func cStrings(ss []string) ([][]byte, []*byte) {
	bs := make([][]byte, len(ss))
	ps := make([]*byte, len(ss)+1)
	for i, s := range ss {
		bs[i] = append([]byte(s), 0)
		ps[i] = &bs[i][0]
	}
	return bs, ps
}
