package exec

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const sumSource = `#include <metal_stdlib>
using namespace metal;

struct sum_args { int n; };

// Each threadgroup sums its threads' values through threadgroup memory.
kernel void tg_sum(
        constant sum_args & args [[buffer(0)]],
        device const float * src [[buffer(1)]],
        device       float * dst [[buffer(2)]],
        threadgroup  float * sh  [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const int i = tpitg.x, n = ntg.x;
    float v = src[tgpig.x*n + i];
    float s = simd_sum(v);
    if (tiisg == 0) sh[sgitg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup); // (barrier:sum)
    if (i == 0) {
        float acc = 0.0f;
        for (int k = 0; k < (n + 31)/32; ++k) acc += sh[k];
        dst[tgpig.x] = acc;
    }
}
`

func runSum(t *testing.T, src string, s Schedule) ([]float32, error) {
	t.Helper()
	m, err := Compile([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := NewBuffer(4 * 256)
	out, _ := NewBuffer(4 * 2)
	for i := range in.Floats() {
		in.Floats()[i] = float32(i%7) * 0.25
	}
	args := binary.LittleEndian.AppendUint32(nil, 128)
	err = m.Launch(Dispatch{Kernel: "tg_sum", Args: args, Buffers: []*Buffer{in, out}, Grid: [3]int{2, 1, 1}, Threads: [3]int{128, 1, 1}, Shared: 16}, s)
	return append([]float32(nil), out.Floats()...), err
}

func TestLaunch(t *testing.T) {
	got, err := runSum(t, sumSource, Schedule{})
	if err != nil {
		t.Fatal(err)
	}
	var want [2]float32
	for i := 0; i < 256; i++ {
		want[i/128] += float32(i%7) * 0.25
	}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestDeadlockReported(t *testing.T) {
	src := strings.Replace(sumSource, "threadgroup_barrier(mem_flags::mem_threadgroup); // (barrier:sum)",
		"if (i < 64) threadgroup_barrier(mem_flags::mem_threadgroup);", 1)
	_, err := runSum(t, src, Schedule{})
	if err == nil || !strings.Contains(err.Error(), "deadlock") {
		t.Fatalf("got %v, want a deadlock report", err)
	}
	t.Log(err)
}

func TestMissingBarrierChangesResults(t *testing.T) {
	src := strings.Replace(sumSource, "threadgroup_barrier(mem_flags::mem_threadgroup); // (barrier:sum)", "", 1)
	a, err := runSum(t, src, Schedule{Policy: Ascending})
	if err != nil {
		t.Fatal(err)
	}
	d, err := runSum(t, src, Schedule{Policy: Descending})
	if err != nil {
		t.Fatal(err)
	}
	if a[0] == d[0] && a[1] == d[1] {
		t.Fatalf("a missing barrier gave %v under both schedules", a)
	}
	t.Logf("ascending %v, descending %v", a, d)
}

// TestCompileErrorCarriesLog: kernel source that does not compile is an
// error that carries the compiler's log, naming the line at fault, as a
// Metal compile error carries the Metal compiler's.
func TestCompileErrorCarriesLog(t *testing.T) {
	bad := strings.Replace(sumSource, "float s = simd_sum(v);", "float s = simd_sum(v) + undeclared_name;", 1)
	_, err := Compile([]byte(bad))
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("Compile of a broken kernel: %v (%T), want a *CompileError", err, err)
	}
	if !strings.Contains(ce.Log, "undeclared_name") || !strings.Contains(err.Error(), "undeclared_name") {
		t.Errorf("the error does not carry the compiler's log:\n%v", err)
	}
	if !strings.Contains(ce.Log, "kernel.metal:") {
		t.Errorf("the log does not name the kernel source's line:\n%s", ce.Log)
	}
}

// TestCompileErrorNamesStatus: a compiler stopped by a signal writes no
// log; the error still says how it ended.
func TestCompileErrorNamesStatus(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in compiler is a shell script")
	}
	cxx := filepath.Join(t.TempDir(), "killed-cxx")
	if err := os.WriteFile(cxx, []byte("#!/bin/sh\nkill -KILL $$\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CXX", cxx)
	_, err := Compile([]byte(sumSource))
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("Compile with a compiler that is killed: %v (%T), want a *CompileError", err, err)
	}
	if ce.Compiler != cxx || !strings.Contains(ce.Status, "killed") || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("the error does not say the compiler was killed: %q (compiler %q, status %q)", err, ce.Compiler, ce.Status)
	}
	if ce.Log != "" || !strings.Contains(err.Error(), "wrote nothing") {
		t.Errorf("log %q, error %q: want an empty log, said so", ce.Log, err)
	}
}

const atomicSource = `#include <metal_stdlib>
using namespace metal;

struct count_args { int n; };

// Every thread of every threadgroup counts itself, adds its index as a
// float, and raises a maximum to its threadgroup's index.
kernel void tg_count(
        constant count_args & args [[buffer(0)]],
        device atomic_uint  * ctr  [[buffer(1)]],
        device atomic_float * fsum [[buffer(2)]],
        threadgroup  float  * sh   [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    atomic_fetch_add_explicit(ctr, 1u, memory_order_relaxed);
    atomic_fetch_max_explicit(ctr + 1, tgpig.x, memory_order_relaxed);
    atomic_fetch_add_explicit(fsum, float(tpitg.x), memory_order_relaxed);
}
`

// TestDeviceAtomics: the prelude's device atomics are real atomics across
// threadgroups that run at once (the float sums are of small integers, so
// exact in any order).
func TestDeviceAtomics(t *testing.T) {
	m, err := Compile([]byte(atomicSource))
	if err != nil {
		t.Fatal(err)
	}
	const groups, threads = 16, 64
	for _, s := range []Schedule{{Policy: Ascending}, {Policy: Descending}, {Policy: Random, Seed: 3}} {
		ctr, _ := NewBuffer(8)
		fsum, _ := NewBuffer(4)
		args := binary.LittleEndian.AppendUint32(nil, 0)
		if err := m.Launch(Dispatch{Kernel: "tg_count", Args: args, Buffers: []*Buffer{ctr, fsum}, Grid: [3]int{groups, 1, 1}, Threads: [3]int{threads, 1, 1}, Shared: 16}, s); err != nil {
			t.Fatal(err)
		}
		f := ctr.Floats()
		count, maxGroup := math.Float32bits(f[0]), math.Float32bits(f[1])
		if count != groups*threads || maxGroup != groups-1 || fsum.Floats()[0] != groups*threads*(threads-1)/2 {
			t.Errorf("schedule %+v: count %d (want %d), max %d (want %d), float sum %g (want %d)",
				s, count, groups*threads, maxGroup, groups-1, fsum.Floats()[0], groups*threads*(threads-1)/2)
		}
	}
}

const tileSource = `#include <metal_stdlib>
using namespace metal;

struct tile_args { int off, ld, soff, sld, tg, tr; };

// One simdgroup copies the 8x8 tile at src + off (row stride ld; from
// threadgroup memory with tg, after the first 256 values are copied
// there; transposed both ways with tr) to dst + soff (row stride sld).
kernel void tile_copy(
        constant tile_args & args [[buffer(0)]],
        device const float * src [[buffer(1)]],
        device       float * dst [[buffer(2)]],
        threadgroup  float * sh  [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    for (int e = tiisg; e < 256; e += 32) sh[e] = src[e];
    threadgroup_barrier(mem_flags::mem_threadgroup); // (barrier:tile)
    simdgroup_float8x8 m;
    if (args.tg) {
        simdgroup_load(m, sh + args.off, args.ld, ulong2(0, 0), args.tr != 0);
    } else {
        simdgroup_load(m, src + args.off, args.ld, ulong2(0, 0), args.tr != 0);
    }
    simdgroup_store(m, dst + args.soff, args.sld, ulong2(0, 0), args.tr != 0);
}
`

// TestTilePairs: the executor's simdgroup_load and simdgroup_store refuse
// a tile that the CUDA prelude's 8-byte accesses could not move (a start
// not 8-byte aligned, an odd row stride), naming the call, from device
// and from threadgroup memory; a tile that they can move is copied whole.
func TestTilePairs(t *testing.T) {
	m, err := Compile([]byte(tileSource))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                       string
		off, ld, soff, sld, tg, tr int
		want                       string // "" for a copy
	}{
		{"aligned", 2, 10, 4, 12, 0, 0, ""},
		{"aligned threadgroup transposed", 6, 16, 0, 8, 1, 1, ""},
		{"load address", 1, 10, 0, 8, 0, 0, "simdgroup_load: a tile at an address not 8-byte aligned"},
		{"load stride", 0, 9, 0, 8, 0, 0, "simdgroup_load: a tile at an odd row stride (9)"},
		{"threadgroup load", 3, 9, 0, 8, 1, 1, "simdgroup_load: a tile at an address not 8-byte aligned and an odd row stride (9)"},
		{"store address", 0, 8, 5, 8, 0, 0, "simdgroup_store: a tile at an address not 8-byte aligned"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, _ := NewBuffer(4 * 256)
			out, _ := NewBuffer(4 * 256)
			defer in.Free()
			defer out.Free()
			for i := range in.Floats() {
				in.Floats()[i] = float32(i) + 0.5
			}
			var args []byte
			for _, v := range []int{c.off, c.ld, c.soff, c.sld, c.tg, c.tr} {
				args = binary.LittleEndian.AppendUint32(args, uint32(v))
			}
			err := m.Launch(Dispatch{Kernel: "tile_copy", Args: args, Buffers: []*Buffer{in, out},
				Grid: [3]int{1, 1, 1}, Threads: [3]int{32, 1, 1}, Shared: 4 * 256}, Schedule{})
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got %v, want an error with %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for r := 0; r < 8; r++ {
				for k := 0; k < 8; k++ {
					// element (r, k) of the tile read; with tr, read from (k, r) and
					// written to (k, r) again.
					src, dst := c.off+r*c.ld+k, c.soff+r*c.sld+k
					if c.tr != 0 {
						src, dst = c.off+k*c.ld+r, c.soff+k*c.sld+r
					}
					if got, want := out.Floats()[dst], in.Floats()[src]; got != want {
						t.Fatalf("element (%d, %d): got %v, want %v", r, k, got, want)
					}
				}
			}
		})
	}
}
