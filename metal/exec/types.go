// Package exec runs Metal Shading Language compute kernels on the CPU.
//
// Compile takes the bytes of a .metal file, as the Metal driver does, and
// compiles them as C++20 behind a prelude (the include directory of this
// package, whose <metal_stdlib> defines MSL's qualifiers, vector types,
// math, simd_* collectives, barriers and device atomics) into a shared
// object that it loads. Launch runs a grid of threadgroups with one OS
// thread per GPU thread.
//
// Only one thread of a threadgroup runs at a time: it holds a baton until it
// reaches a synchronisation point (threadgroup_barrier, simdgroup_barrier, a
// simd_* collective) or returns, and then hands it to the next ready thread
// that the Schedule picks: in ascending thread order, descending, or in a
// seeded random order. Between two synchronisation points the threads of a
// group thus run one after another in an order the schedule fixes. A kernel
// whose results depend on that order has a missing barrier or a data race,
// and running it under several schedules and comparing the results bit for
// bit finds it. A barrier that not every thread reaches, or lanes of a
// simdgroup that call different collectives, leave no thread ready: Launch
// reports the deadlock (which threads wait where) instead of hanging.
//
// The prelude approach is not tied to Metal: another prelude that defines
// the same names (CUDA's, say) could run the same kernel source.
//
// Compile needs a C++20 compiler at run time: $CXX, else c++, g++ or
// clang++ from PATH. Compiled modules are cached on disk by a hash of the
// source, the prelude, the compiler and its flags.
package exec

import (
	"fmt"
	"strings"
)

// Policy orders the threads of a threadgroup between synchronisation points,
// and the threadgroups of a grid.
type Policy int

const (
	// Ascending runs ready threads in increasing thread index.
	Ascending Policy = iota
	// Descending runs ready threads in decreasing thread index.
	Descending
	// Random runs ready threads in an order drawn from Schedule.Seed.
	Random
)

func (p Policy) String() string {
	switch p {
	case Ascending:
		return "ascending"
	case Descending:
		return "descending"
	case Random:
		return "random"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Schedule says how Launch orders threads and threadgroups.
type Schedule struct {
	Policy Policy
	// Seed draws the Random order; other policies ignore it.
	Seed uint64
	// Workers is the number of threadgroups run at once; 0 means
	// GOMAXPROCS, at most DefaultMaxWorkers. Each worker keeps a pool of
	// one OS thread per GPU thread (up to 1024), so the bound keeps a
	// many-core machine from holding tens of thousands of threads.
	Workers int
}

// DefaultMaxWorkers bounds the threadgroups run at once when
// Schedule.Workers is 0.
const DefaultMaxWorkers = 8

func (s Schedule) String() string {
	if s.Policy == Random {
		return fmt.Sprintf("random(seed %d)", s.Seed)
	}
	return s.Policy.String()
}

// CompileError is a compilation that failed; Log is the compiler's output
// and Status how the compiler ended ("exit status 1", or "signal: killed"
// for a compiler stopped from outside, which leaves no log).
type CompileError struct {
	Compiler string
	Status   string
	Log      string
}

func (e *CompileError) Error() string {
	log := strings.TrimSpace(e.Log)
	if log == "" {
		log = "(the compiler wrote nothing)"
	}
	return fmt.Sprintf("exec: compiling the kernel source with %s failed (%s):\n%s", e.Compiler, e.Status, log)
}

// Dispatch is one grid launch.
type Dispatch struct {
	Kernel string
	// Args are the bytes of the kernel's first parameter, its args struct
	// (a constant buffer on Metal); their length must be the struct's size.
	Args []byte
	// Buffers are bound in order to the kernel's device buffer parameters.
	Buffers []*Buffer
	// Grid is the number of threadgroups, Threads the threads in each.
	Grid, Threads [3]int
	// Shared is the threadgroup memory in bytes, filled with NaN before
	// each threadgroup runs.
	Shared int
}
