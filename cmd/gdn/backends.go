package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
)

// openMetal opens the Metal backend of the given kind ("" for the default:
// the GPU on Apple silicon, the CPU executor of the same kernel source
// elsewhere). It is a variable so that tests can stand in a fake.
var openMetal = openMetalBackend

// errUnknownBackend is wrapped by backendsFor's error for a name it does
// not know (a usage error, unlike a backend that fails to open).
var errUnknownBackend = errors.New("unknown backend")

// metalScratchBytes is the Metal backward's scratch in bytes per (head,
// seq), for the memory planner (which has no backend open); nil leaves
// Metal out of the plan.
var metalScratchBytes = metal.ScratchBytes

// metalChunkScratchBytes is the Metal chunk kernels' backward scratch in
// bytes per (head, seq) at chunk length L, for the planner; nil leaves it
// out.
var metalChunkScratchBytes = metal.ChunkScratchBytes

// metalChunkScratchPairs is the number of (head, seq) pairs whose chunk
// scratch one call holds at once (the value heads of a group, where they
// run in groups), for the planner; nil means all of them.
var metalChunkScratchPairs = metal.ChunkScratchPairs

// metalChunkKeptBytes is the A, P and X of one ForwardKeep call in bytes,
// and metalMaxKeepSlots the most of them one Backend keeps at once
// (KeepSlots), for the planner; nil leaves them out.
var (
	metalChunkKeptBytes = metal.ChunkKeptBytes
	metalMaxKeepSlots   = metal.MaxKeepSlots
)

// scratchPairs is the number of (head, seq) pairs whose scratch backend b
// holds at once for a call of shape s: its ScratchPairs where it has one,
// else every pair.
func scratchPairs(b gdn.Backend, s gdn.Shape, opt gdn.Options) int {
	if sp, ok := b.(interface {
		ScratchPairs(gdn.Shape, gdn.Options) int
	}); ok {
		return sp.ScratchPairs(s, opt)
	}
	return s.Hv * s.Seqs
}

// metalHeadSizes are the head sizes the Metal kernels take, for the
// planner's note when a shape has others.
var metalHeadSizes = metal.HeadSizes

// unknownName is the error of a backend kind that does not exist: it reads
// as err and is errUnknownBackend too (a usage error).
type unknownName struct{ err error }

func (u unknownName) Error() string   { return u.err.Error() }
func (u unknownName) Unwrap() []error { return []error{u.err, errUnknownBackend} }

// backendNames lists what -backend accepts, for help texts.
const backendNames = "cpu, metal (or metal:KIND), all"

// backendsFor returns the backends that name selects: "cpu", "metal",
// "metal:KIND" or "all" (every backend built into this binary, metal:cuda
// included; one that cannot open is left out with a note on stderr). Its
// error wraps errUnknownBackend for a name or kind it does not know (a usage
// error, exit status 2); any other error is the backend failing to open
// (exit status 1).
func backendsFor(name string, stderr io.Writer) ([]gdn.Backend, error) {
	switch {
	case name == "cpu":
		return []gdn.Backend{gdn.CPU{}}, nil
	case name == "metal" || strings.HasPrefix(name, "metal:"):
		kind := strings.TrimPrefix(strings.TrimPrefix(name, "metal"), ":")
		b, err := openMetal(kind)
		if errors.Is(err, metal.ErrUnknownKind) {
			return nil, fmt.Errorf("-backend %s: %w", name, unknownName{err})
		}
		if err != nil {
			return nil, fmt.Errorf("-backend %s: %w", name, err)
		}
		return []gdn.Backend{b}, nil
	case name == "all":
		bs := []gdn.Backend{gdn.CPU{}}
		if b, err := openMetal(""); err != nil {
			fmt.Fprintf(stderr, "note: Metal left out: %v\n", err)
		} else {
			bs = append(bs, b)
		}
		if b, err := openMetal(metal.CUDA); err != nil {
			fmt.Fprintf(stderr, "note: metal:cuda left out: %v\n", err)
		} else {
			bs = append(bs, b)
		}
		return bs, nil
	}
	return nil, fmt.Errorf("-backend %q: %w: want one of %s", name, errUnknownBackend, backendNames)
}
