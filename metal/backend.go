package metal

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal/exec"
)

// source is the kernel source, gdn.metal: the GPU compiles it at run time,
// and the CPU executor compiles the very same bytes.
//
//go:embed gdn.metal
var source []byte

// Source returns a copy of the kernel source, gdn.metal, as the GPU and the
// executor compile it (to run a variant through OpenExecutorSource, say).
func Source() []byte { return slices.Clone(source) }

// Kinds of backend Open accepts.
const (
	// Auto is the GPU where there is one (Apple silicon), else the CPU
	// executor. "" means Auto too.
	Auto = "auto"
	// GPU is the Metal device, through darwinkit; only on darwin.
	GPU = "gpu"
	// Executor is the CPU executor of the same kernel source, on every OS.
	Executor = "executor"
)

// ErrNoGPU is returned by Open(GPU) where there is no Metal device.
var ErrNoGPU = errors.New("metal: no Metal device")

// ErrNotOpen is returned by the methods of a Backend that Open did not make.
var ErrNotOpen = errors.New("metal: the Backend is not open (make it with metal.Open)")

// ErrUnknownKind is wrapped by Open's error for a kind it does not know.
var ErrUnknownKind = errors.New("metal: unknown kind")

// engine runs a plan's dispatches on one device.
type engine interface {
	name() string
	// run copies src into a device buffer, makes the scratch at least
	// scrLen floats (one buffer, kept and reused), runs the dispatches in
	// order and returns dstLen floats of output.
	run(p *plan) ([]float32, error)
}

// bufferLimiter is an engine whose device caps the bytes of one buffer
// (Metal's maxBufferLength, which depends on the Mac's memory); Backend
// refuses a call, and KeepSlots slots, past it before anything runs. The
// executor and CUDA have no such cap below the kernels' 32-bit indices.
type bufferLimiter interface {
	maxBuffer() int
}

// Backend runs the kernels of gdn.metal on one device, the GPU or the CPU
// executor. It owns the scratch of the backward: one buffer, grown to the
// largest call and reused by every later call (layers run one after
// another, so one scratch serves a whole model). A Backend is safe for
// concurrent use; calls run one at a time.
//
// Backend implements gdn.Backend. Make one with Open: the zero value (and
// a nil *Backend) is not open, and its methods return ErrNotOpen (Name
// says "Metal(not open)").
type Backend struct {
	mu   sync.Mutex
	eng  engine
	kind string
	// split's non-zero fields replace the chunk kernels' choice of head
	// groups and walk blocks (chunkSplitFor), for tests of the groups and
	// blocks a small call would not choose.
	split chunkSplit
	// calls counts the calls run; slots the kept matrices' places.
	calls uint64
	slots keepSlots
	// scrMax is the longest scratch a call ran with: the engines grow
	// theirs to the longest call, and a grown scratch is a new one.
	scrMax int
}

// keepSlots is where a Backend keeps ForwardKeep's A, P and X. held[i] is
// the call count at the ForwardKeep whose matrices slot i holds (0: none).
// Without KeepSlots (room 0) there is one slot, at the scratch's start,
// sized by each call and ended by any other call; with them, len(held)
// slots of room floats, which the chunk calls' areas follow (a call's
// scratch is at least least floats).
type keepSlots struct {
	held        []uint64
	room, least int
}

// at is where a chunk call of mode goes, its matrices in slot (a
// keepForward or keepBackward call).
func (k *keepSlots) at(mode keepMode, slot int) keepAt {
	return keepAt{mode: mode, slot: slot * k.room, room: k.room, areas: len(k.held) * k.room, least: k.least}
}

// Open returns the backend of the given kind: Auto (or ""), GPU,
// Executor or CUDA (which Auto never chooses). Opening compiles the kernel
// source and builds its pipelines once; a compile error carries the
// compiler's log.
func Open(kind string) (*Backend, error) {
	switch kind {
	case "", Auto:
		if e, err := openGPU(); err == nil {
			return &Backend{eng: e, kind: GPU}, nil
		} else if !errors.Is(err, ErrNoGPU) {
			return nil, err
		}
		return Open(Executor)
	case GPU:
		e, err := openGPU()
		if err != nil {
			return nil, err
		}
		return &Backend{eng: e, kind: GPU}, nil
	case Executor:
		e, err := openExecutor(source)
		if err != nil {
			return nil, err
		}
		return &Backend{eng: e, kind: Executor}, nil
	case CUDA:
		e, err := openCUDA(source)
		if err != nil {
			return nil, err
		}
		return &Backend{eng: e, kind: CUDA}, nil
	}
	return nil, fmt.Errorf("%w %q: want %q, %q, %q or %q", ErrUnknownKind, kind, Auto, GPU, Executor, CUDA)
}

// OpenExecutorSource returns a CPU executor backend of other kernel source
// (a variant of Source, to test the executor's checks on it).
func OpenExecutorSource(src []byte) (*Backend, error) {
	e, err := openExecutor(src)
	if err != nil {
		return nil, err
	}
	return &Backend{eng: e, kind: Executor}, nil
}

// open reports whether Open made b.
func (b *Backend) open() bool { return b != nil && b.eng != nil }

// Kind is GPU, Executor or CUDA ("" when not open).
func (b *Backend) Kind() string {
	if !b.open() {
		return ""
	}
	return b.kind
}

// Name is "Metal" on the GPU, "Metal(executor)" on the CPU executor and
// "Metal(cuda: DEVICE)" on an NVIDIA GPU.
func (b *Backend) Name() string {
	if !b.open() {
		return "Metal(not open)"
	}
	return b.eng.name()
}

// SetSchedule sets the executor's thread order for later calls (see
// exec.Schedule). On the GPU, which has its own order, it returns an error.
func (b *Backend) SetSchedule(s exec.Schedule) error {
	if !b.open() {
		return ErrNotOpen
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.eng.(*executor)
	if !ok {
		return fmt.Errorf("metal: the %s backend has no schedule to set", b.kind)
	}
	e.sched = s
	return nil
}

// ScratchLen is the size in bytes of the scratch the backend holds now.
func (b *Backend) ScratchLen() int {
	if !b.open() {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := b.eng.(type) {
	case *executor:
		if e.scr != nil {
			return e.scr.Len()
		}
	case statsEngine:
		return int(e.stats().ScratchBytes)
	default:
		return scratchLen(e)
	}
	return 0
}

// Forward runs the forward: y [S_v, H_v, T, n_seqs] and the state slots
// [S_k, S_v, H_v, n_seqs, snapshots], as gdn.Forward returns them. Inputs
// are validated before anything is dispatched; every error names the
// tensor and the dimension at fault.
func (b *Backend) Forward(in *gdn.Inputs[float32], opt gdn.Options) (y, states []float32, err error) {
	if !b.open() {
		return nil, nil, ErrNotOpen
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.plan(in, gdn.Tensor[float32]{}, nil, opt, false)
	if err != nil {
		return nil, nil, err
	}
	out, err := b.run(p)
	if err != nil {
		return nil, nil, err
	}
	n := p.shape.YLen()
	return out[:n:n], out[n:], nil
}

// Backward runs the backward and returns the packed
// [dq|dk|dv|dg|dbeta|dstate] (gdn.Layout), as gdn.Backward's Packed. The
// gradients are bit-identical from run to run: no float atomics, and every
// sum (over rows, row blocks, and the value heads and sequences that share
// a q/k head) runs in a fixed order.
func (b *Backend) Backward(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options) ([]float32, error) {
	if !b.open() {
		return nil, ErrNotOpen
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.plan(in, dy, dStates, opt, true)
	if err != nil {
		return nil, err
	}
	return b.run(p)
}

// plan lays out a Forward or Backward call, with b.mu held: a chunk
// call's areas after the slots of KeepSlots.
func (b *Backend) plan(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options, backward bool) (*plan, error) {
	if opt.Algo == gdn.Chunk {
		return newChunkPlan(in, dy, dStates, opt, backward, b.split, b.slots.at(keepNone, 0))
	}
	return newPlan(in, dy, dStates, opt, backward)
}

// run runs p on the engine, with b.mu held. Every call counts, so that a
// Kept names the A, P and X of one ForwardKeep. A call that writes where
// the slots are (any call without KeepSlots, a recurrent call), one that
// grows the scratch, and one that fails end every Kept.
func (b *Backend) run(p *plan) ([]float32, error) {
	if l, ok := b.eng.(bufferLimiter); ok {
		// (refused before it runs, the call leaves the scratch and the
		// Kepts as they were)
		if err := p.checkDevice(l.maxBuffer()); err != nil {
			return nil, err
		}
	}
	b.calls++
	if !p.spares || p.scrLen > b.scrMax {
		clear(b.slots.held)
	}
	out, err := b.eng.run(p)
	if err != nil {
		// (a failed call may have left the engine a scratch of any size)
		clear(b.slots.held)
		b.scrMax = 0
		return nil, err
	}
	b.scrMax = max(b.scrMax, p.scrLen)
	return out, nil
}

// Supports returns nil if the kernels take s's head sizes (see Supported)
// and, for the Chunk algorithm, opt's chunk length (at most MaxChunkLen),
// or ErrNotOpen.
func (b *Backend) Supports(s gdn.Shape, opt gdn.Options) error {
	if !b.open() {
		return ErrNotOpen
	}
	if opt.Algo == gdn.Chunk {
		return checkChunk(s, opt)
	}
	return Supported(s.Sk, s.Sv)
}

// ScratchPairs is the number of (head, seq) pairs whose scratch a call
// holds at once: H_v*n_seqs, or for the Chunk algorithm ChunkScratchPairs
// at opt's chunk length (a group's, where the value heads run in groups).
func (b *Backend) ScratchPairs(s gdn.Shape, opt gdn.Options) int {
	if opt.Algo == gdn.Chunk {
		return ChunkScratchPairs(s, opt.ChunkLength())
	}
	return s.Hv * s.Seqs
}

// ScratchBytes is ScratchBytes at s's head sizes and T, and opt's segment
// length; for the Chunk algorithm, ChunkScratchBytes at opt's chunk
// length.
func (b *Backend) ScratchBytes(s gdn.Shape, opt gdn.Options) int {
	if opt.Algo == gdn.Chunk {
		return ChunkScratchBytes(s, opt.ChunkLength())
	}
	return ScratchBytes(s.Sk, s.Sv, s.T, opt.SegmentLength(s.T))
}
