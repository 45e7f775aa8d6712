package metal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// TestCUDAKernels: the trampolines cover every kernel the plans dispatch,
// each calling the right function.
func TestCUDAKernels(t *testing.T) {
	ks, err := cudaKernels(source)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, k := range ks {
		got[k.name] = k.fn
	}
	want := map[string]string{"gdn_bwd_red": "gdn_bwd_red",
		"gdn_chunk_prep": "gdn_chunk_prep<false>", "gdn_chunk_prepb": "gdn_chunk_prep<true>", "gdn_chunk_fwd_vb8": "gdn_chunk_fwd<8,false>", "gdn_chunk_fwd_vb16": "gdn_chunk_fwd<16,false>",
		"gdn_chunk_fwdb_vb8": "gdn_chunk_fwd<8,true>", "gdn_chunk_fwdb_vb16": "gdn_chunk_fwd<16,true>",
		"gdn_chunk_bwd_vb8": "gdn_chunk_bwd<8>", "gdn_chunk_bwd_vb16": "gdn_chunk_bwd<16>",
		"gdn_chunk_dsolve": "gdn_chunk_dsolve", "gdn_chunk_dpairs": "gdn_chunk_dpairs<false>", "gdn_chunk_dpairs_kda": "gdn_chunk_dpairs<true>", "gdn_chunk_red": "gdn_chunk_red"}
	for _, nc := range []int{1, 2, 4, 8} {
		want[fmt.Sprintf("gdn_scan_nc%d", nc)] = fmt.Sprintf("gdn_scan<%d>", nc)
		want[fmt.Sprintf("gdn_bwd_seg_nc%d", nc)] = fmt.Sprintf("gdn_bwd_seg<%d>", nc)
	}
	if len(got) != len(want) {
		t.Errorf("kernels %v, want %v", got, want)
	}
	for n, fn := range want {
		if got[n] != fn {
			t.Errorf("kernel %s calls %q, want %q", n, got[n], fn)
		}
	}
	// Every kernel a plan dispatches has a trampoline.
	c := verify.Case{Family: "x", Sk: 64, Sv: 32, Hk: 1, Rep: 2, T: 5, Seqs: 1, C: 2, Seed: 1}
	p := verify.Build[float32](c)
	chunk := p.Opt
	chunk.Algo = gdn.Chunk
	for _, opt := range []gdn.Options{p.Opt, chunk} {
		for _, bwd := range []bool{false, true} {
			pl, err := newPlan(&p.In, p.DY, p.DStates, opt, bwd)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range pl.dispatch {
				if _, ok := got[d.kernel]; !ok {
					t.Errorf("the plan dispatches %s, which has no trampoline", d.kernel)
				}
			}
		}
	}

	if _, err := cudaKernels([]byte("static inline float f(float x) { return x; }\n")); err == nil || !strings.Contains(err.Error(), "no kernel") {
		t.Errorf("a source without kernels: %v", err)
	}
	twice := []byte("kernel void a(constant int & x [[buffer(0)]]) {}\nkernel void a(constant int & x [[buffer(0)]]) {}\n")
	if _, err := cudaKernels(twice); err == nil || !strings.Contains(err.Error(), `"a" is defined twice`) {
		t.Errorf("a kernel defined twice: %v", err)
	}
}

// TestCUDAProgram: the translation unit includes the prelude and the
// source in its namespace, and has one trampoline per kernel; the clang
// variant closes the host-device pragma, and the source it reads has no
// host_name instantiation left but the same lines.
func TestCUDAProgram(t *testing.T) {
	ks, err := cudaKernels(source)
	if err != nil {
		t.Fatal(err)
	}
	tu := cudaProgram(ks, false)
	for _, want := range []string{
		"#include <metal_stdlib>\n",
		"namespace gdn_msl {\n#include \"kernel.metal\"\n}",
		fmt.Sprintf(`extern "C" __global__ void gdn_scan_nc4(const GDNCU_GRID_CONSTANT gdncu::argblob<%d> args, gdncu::bufs b) { gdncu::invoke<&gdn_msl::gdn_scan<4>>(args, b); }`, argsStride),
		fmt.Sprintf(`extern "C" __global__ void gdn_bwd_red(const GDNCU_GRID_CONSTANT gdncu::argblob<%d> args, gdncu::bufs b) { gdncu::invoke<&gdn_msl::gdn_bwd_red>(args, b); }`, argsStride),
	} {
		if !strings.Contains(tu, want) {
			t.Errorf("the translation unit lacks %q:\n%s", want, tu)
		}
	}
	if n := strings.Count(tu, `extern "C" __global__`); n != len(ks) {
		t.Errorf("%d trampolines for %d kernels", n, len(ks))
	}
	if strings.Contains(tu, "force_cuda_host_device") {
		t.Error("the NVRTC unit has clang's pragma")
	}
	if !strings.Contains(cudaProgram(ks, true), "#pragma clang force_cuda_host_device end\n") {
		t.Error("the clang unit does not close force_cuda_host_device")
	}
	stripped := withoutHostNames(source)
	if bytes.Contains(stripped, []byte("host_name")) {
		t.Error("withoutHostNames left a host_name")
	}
	if a, b := bytes.Count(source, []byte("\n")), bytes.Count(stripped, []byte("\n")); a != b {
		t.Errorf("withoutHostNames: %d lines, the source has %d", b, a)
	}
	if !bytes.Contains(stripped, []byte("kernel void gdn_bwd_red(")) {
		t.Error("withoutHostNames dropped a kernel")
	}
	// The source NVRTC gets has no [[threadgroup(N)]] attribute left (the
	// prelude's threadgroup is nothing) but the same lines.
	src := []byte("kernel void k(\n    threadgroup float * sh [[threadgroup(0)]],\n    uint3 p [[threadgroup_position_in_grid]]) {}\n")
	_, _, hdrs := cudaSources(src, []cudaKernel{{name: "k", fn: "k"}})
	if got := hdrs[1]; strings.Contains(got, "[[threadgroup(") || !strings.Contains(got, "[[threadgroup_position_in_grid]]") || strings.Count(got, "\n") != strings.Count(string(src), "\n") || len(got) != len(src) {
		t.Errorf("the source as NVRTC gets it:\n%s", got)
	}
	if n := len(cudaThreadgroupAttrRE.FindAll(source, -1)); n == 0 {
		t.Error("gdn.metal has no [[threadgroup(N)]] attribute: the pattern no longer finds it")
	}
	// The prelude defines what the trampolines use.
	for _, want := range []string{"struct bufs", "inline void invoke(", "#define threadgroup\n", "#define float4 gdn_msl_float4"} {
		if !bytes.Contains(cudaPrelude, []byte(want)) {
			t.Errorf("the prelude lacks %q", want)
		}
	}
}

// TestCUDAParams: a trampoline's parameters are the dispatch's args, by
// value (a pointer to its argsStride bytes in the plan's args), and the
// buffers in binding order.
func TestCUDAParams(t *testing.T) {
	args := make([]byte, 3*argsStride)
	for i := range args {
		args[i] = byte(i / argsStride)
	}
	p, err := packParams(args, argsStride, []uint64{0xa000, 0xb000, 0xc000})
	if err != nil {
		t.Fatal(err)
	}
	if p.args != unsafe.Pointer(&args[argsStride]) {
		t.Errorf("args at %p, want %p (the second dispatch's)", p.args, &args[argsStride])
	}
	want := [cudaMaxBufs]uint64{0xa000, 0xb000, 0xc000}
	if p.bufs != want {
		t.Errorf("buffers %#x, want %#x", p.bufs, want)
	}
	ptrs := p.pointers()
	if got := unsafe.Slice((*byte)(ptrs[0]), argsStride); got[0] != 1 || got[argsStride-1] != 1 || (*[cudaMaxBufs]uint64)(ptrs[1])[2] != 0xc000 {
		t.Error("the kernelParams pointers do not point at the parameters")
	}
	if unsafe.Sizeof(p.bufs) != 64 {
		t.Errorf("gdncu::bufs is 64 bytes, the Go side %d", unsafe.Sizeof(p.bufs))
	}
	if _, err := packParams(args, 0, make([]uint64, 9)); err == nil {
		t.Error("9 buffers were packed")
	}
	for _, off := range []int{100, -16, 2*argsStride + 16, 3 * argsStride} {
		if _, err := packParams(args, off, nil); err == nil {
			t.Errorf("an args offset of %d in %d bytes was packed", off, len(args))
		}
	}
	// The trampolines take argsStride bytes of args, which holds every
	// kernel's args struct (the prelude's static_assert checks it too).
	if prog := cudaProgram([]cudaKernel{{name: "gdn_chunk_red", fn: "gdn_chunk_red"}}, false); !strings.Contains(prog, fmt.Sprintf("gdncu::argblob<%d> args", argsStride)) {
		t.Errorf("the trampoline does not take argsStride (%d) bytes of args:\n%s", argsStride, prog)
	}
	// Every dispatch's args sit at a multiple of argsStride.
	c := verify.Case{Family: "x", Sk: 32, Sv: 32, Hk: 1, Rep: 1, T: 7, Seqs: 2, C: 3, Seed: 1}
	pr := verify.Build[float32](c)
	pl, err := newPlan(&pr.In, pr.DY, pr.DStates, pr.Opt, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range pl.dispatch {
		if d.argOff != i*argsStride {
			t.Errorf("dispatch %d: args at %d, want %d", i, d.argOff, i*argsStride)
		}
		if _, err := packParams(pl.args, d.argOff, []uint64{1, 2, 3}); err != nil {
			t.Error(err)
		}
	}
	if len(pl.args) != len(pl.dispatch)*argsStride {
		t.Errorf("args buffer %d bytes for %d dispatches", len(pl.args), len(pl.dispatch))
	}
}

// TestCUDALimits: dispatches beyond Apple's limits are refused before
// launch, and every dispatch the plans make fits, at the 27B heads too.
func TestCUDALimits(t *testing.T) {
	ok := dispatch{kernel: "k", grid: [3]int{1, 1, 1}, threads: [3]int{1024, 1, 1}, shared: 32 << 10}
	if err := checkLimits(ok); err != nil {
		t.Errorf("1024 threads and 32 KiB: %v", err)
	}
	for _, tc := range []struct {
		d    dispatch
		want string
	}{
		{dispatch{kernel: "k", grid: [3]int{1, 1, 1}, threads: [3]int{256, 2, 4}, shared: 16}, "2048 threads per threadgroup ([256 2 4]), more than Apple GPUs take (1024)"},
		{dispatch{kernel: "k", grid: [3]int{1, 1, 1}, threads: [3]int{1025, 1, 1}}, "more than Apple GPUs take (1024)"},
		{dispatch{kernel: "k", grid: [3]int{1, 1, 1}, threads: [3]int{32, 1, 1}, shared: 32<<10 + 16}, "32784 bytes of threadgroup memory, more than Apple GPUs take (32768)"},
		{dispatch{kernel: "k", grid: [3]int{1, 70000, 1}, threads: [3]int{32, 1, 1}}, "dimension 1 is outside 0..65535"},
		{dispatch{kernel: "k", grid: [3]int{1, 1, 1}, threads: [3]int{0, 1, 1}}, "dimension 0 is 0"},
	} {
		if err := checkLimits(tc.d); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.d, err, tc.want)
		}
	}
	for _, c := range []verify.Case{
		{Family: "x", Sk: 128, Sv: 128, Hk: 16, Rep: 3, T: 4, Seqs: 1, KDA: true, Seed: 1},
		{Family: "x", Sk: 256, Sv: 256, Hk: 1, Rep: 1, T: 3, Seqs: 1, Seed: 1},
		{Family: "x", Sk: 16, Sv: 256, Hk: 1, Rep: 1, T: 3, Seqs: 1, Seed: 1},
	} {
		p := verify.Build[float32](c)
		for _, bw := range []bool{false, true} {
			pl, err := newPlan(&p.In, p.DY, p.DStates, p.Opt, bw)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range pl.dispatch {
				if err := checkLimits(d); err != nil {
					t.Errorf("%s: %v", c, err)
				}
			}
		}
	}
}
