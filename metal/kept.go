package metal

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"unsafe"

	"github.com/gdnback/gdnback/gdn"
)

// The chunk kernels' backward forms again what its forward formed: ggml's
// op takes the inputs and recomputes the rest. Of that, each chunk's A, P
// and X (the pair products k_r Γ_rs k_s and q_r Γ_rs k_s, and the solve of
// I + A diag(beta)) depend on q, k, g and beta alone, and take most of the
// backward's prep. ForwardKeep and BackwardKept are the pair that forms
// them once: the forward leaves them in the Backend's scratch, the backward
// that follows reads them there. Both hold them in place of the areas'
// own, so the scratch is no longer than the backward's alone (with the
// value heads in one group; in groups, longer by the other groups'
// matrices); the gradients are the bits Backward gives (the same lines form A, P and X
// in both preps).

// ErrKept is wrapped by BackwardKept's error when its Kept does not name
// the A, P and X the Backend holds, or its inputs are not the forward's,
// and by ForwardKeep's when the slots of KeepSlots do not take its
// matrices.
var ErrKept = errors.New("metal: kept")

// Kept names the A, P and X a Backend's ForwardKeep left in its scratch,
// for one BackwardKept. Without KeepSlots any other call on the Backend
// (Forward, Backward, ForwardKeep or BackwardKept) ends it: the scratch is
// shared. With them, see KeepSlots.
type Kept struct {
	b        *Backend
	call     uint64
	slot     int
	shape    gdn.Shape
	heads    gdn.HeadMap
	chunkLen int
	seed     maphash.Seed
	sums     [4]uint64 // q, k, g, beta
}

// KeepSlots makes room in the Backend's scratch for the A, P and X of n
// ForwardKeep calls at once, each no larger than a call of in and opt
// would keep (ChunkKeptBytes at in's shape and opt's chunk length: 288
// MiB at the 27B shape, T 8192), so that a training step can run each
// layer's ForwardKeep in its forward and each layer's BackwardKept in its
// backward, last layer first, on one Backend. The scratch is then the n
// slots and the areas of in's Backward (ChunkScratchBytes times
// ChunkScratchPairs), held from the next call on; every call of the chunk
// kernels puts its areas after the slots.
//
// ForwardKeep takes a free slot (an error wrapping ErrKept when none is),
// BackwardKept frees its own. A Kept then holds across other calls of the
// chunk kernels (Forward, Backward, the other slots' pairs), but a call of
// the recurrent kernels (their scratch starts where the slots are), a call
// longer than in's (the scratch grows, and a grown scratch is a new one),
// a call that fails, and KeepSlots itself end every Kept; a call refused
// before it runs (a buffer past a Mac GPU's largest) leaves them. n = 0 restores
// the default: one call's matrices, which any other call ends.
//
// KeepSlots validates in as Forward does; it is an error when the chunk
// kernels do not take in's shape, and when the slots and the areas are
// more floats than the kernels' 32-bit indices reach, or on a Mac more
// bytes than the GPU's largest buffer (maxBufferLength): keep fewer slots,
// or the layers on more Backends.
func (b *Backend) KeepSlots(n int, in *gdn.Inputs[float32], opt gdn.Options) error {
	if !b.open() {
		return ErrNotOpen
	}
	if n < 0 {
		return fmt.Errorf("metal: KeepSlots: n = %d, want 0 or more slots", n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var ks keepSlots
	if n > 0 {
		room, areas, err := b.keepRoom(in, opt)
		if err != nil {
			return fmt.Errorf("metal: KeepSlots: %w", err)
		}
		if most, bound := b.slotsFit(room, areas); n > most {
			return fmt.Errorf("metal: KeepSlots: %d slots of %d bytes and the backward's areas (%d bytes) take %d bytes, more than %s: keep at most %d slots, and the other layers on another Backend",
				n, 4*room, 4*areas, 4*(int64(n)*int64(room)+int64(areas)), bound, most)
		}
		ks = keepSlots{held: make([]uint64, n), room: room, least: n*room + areas}
	}
	b.slots = ks
	return nil
}

// MaxKeepSlots is the most slots KeepSlots(n, in, opt) takes on this
// Backend: metal.MaxKeepSlots at in's shape and opt's chunk length, or
// fewer on a Mac whose GPU caps a buffer below the kernels' 32-bit
// indices (maxBufferLength; the scratch is one buffer). The error is
// KeepSlots': in or opt the chunk kernels do not take, or ErrNotOpen.
func (b *Backend) MaxKeepSlots(in *gdn.Inputs[float32], opt gdn.Options) (int, error) {
	if !b.open() {
		return 0, ErrNotOpen
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	room, areas, err := b.keepRoom(in, opt)
	if err != nil {
		return 0, fmt.Errorf("metal: MaxKeepSlots: %w", err)
	}
	n, _ := b.slotsFit(room, areas)
	return n, nil
}

// keepRoom validates in and opt for KeepSlots and returns keepLayout's
// floats of a slot and of the areas after the slots.
func (b *Backend) keepRoom(in *gdn.Inputs[float32], opt gdn.Options) (room, areas int, err error) {
	s, err := in.Shape(opt)
	if err != nil {
		return 0, 0, err
	}
	if err := checkChunk(s, opt); err != nil {
		return 0, 0, err
	}
	room, areas = keepLayout(s, chunkGeomFor(s, opt), b.split)
	return room, areas, nil
}

// slotsFit is the most slots of room floats that fit before areas floats
// in b's scratch, and what bounds them: the kernels' 32-bit indices, or
// on a Mac the GPU's largest buffer if that is less.
func (b *Backend) slotsFit(room, areas int) (most int, bound string) {
	most, bound = indexSlots(room, areas), fmt.Sprintf("the kernels' 32-bit indices reach (%d floats)", maxIndex)
	if l, ok := b.eng.(bufferLimiter); ok {
		lim := l.maxBuffer()
		if m := max(0, lim/4-areas) / room; m < most {
			most, bound = m, fmt.Sprintf("the device's largest buffer (maxBufferLength, %d bytes)", lim)
		}
	}
	return most, bound
}

// MaxKeepSlots is the most slots KeepSlots takes for calls of shape s
// with chunk length L: the slots (ChunkKeptBytes each) and the areas of
// s's backward share the kernels' 32-bit indices (at the 27B shape, 20 at
// T 8192, 21 with KDA's smaller areas; 49 at T 4096). 0 where
// ChunkScratchBytes is 0.
func MaxKeepSlots(s gdn.Shape, L int) int {
	if checkChunk(s, gdn.Options{Algo: gdn.Chunk, ChunkLen: L}) != nil {
		return 0
	}
	return indexSlots(keepLayout(s, chunkGeomFor(s, gdn.Options{ChunkLen: L}), chunkSplit{}))
}

// indexSlots is the most slots of room floats before areas floats that
// the kernels' 32-bit indices reach.
func indexSlots(room, areas int) int { return max(0, maxIndex-areas) / room }

// keepLayout is the floats of a slot of KeepSlots for calls at s and g,
// and of the areas that follow the slots: those of s's backward, kept or
// not (Backward's hold A, P and X), so that neither grows the scratch.
// force is as newChunkPlan's.
func keepLayout(s gdn.Shape, g chunkGeom, force chunkSplit) (room, areas int) {
	_, kept := chunkKeptGroups(s, g, force)
	_, plain := chunkGroups(s, g, chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, true), force)
	return chunkKeptLen(s, g), max(kept, plain)
}

// ForwardKeep is Forward for the Chunk algorithm (opt.Algo must be
// gdn.Chunk) that also keeps each chunk's A, P and X in the Backend's
// scratch for the BackwardKept that follows, with the same q, k, g, beta
// and options. y and the states are Forward's, bit for bit. It runs the
// backward's head groups (see ChunkScratchLimit; one group at the 27B
// shape) and holds the backward's scratch (with KeepSlots, in a slot of
// its own); the inputs are read, not modified, and hashed so that
// BackwardKept can check them.
func (b *Backend) ForwardKeep(in *gdn.Inputs[float32], opt gdn.Options) (y, states []float32, k *Kept, err error) {
	if !b.open() {
		return nil, nil, nil, ErrNotOpen
	}
	if opt.Algo != gdn.Chunk {
		return nil, nil, nil, fmt.Errorf("metal: ForwardKeep: algo %v: only the chunk kernels keep A, P and X", opt.Algo)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	slot := 0 // without KeepSlots, the one place, which this call takes whatever it held
	if b.slots.room > 0 {
		if slot = slices.Index(b.slots.held, 0); slot < 0 {
			return nil, nil, nil, fmt.Errorf("%w: ForwardKeep: the %d slots of KeepSlots all hold matrices no BackwardKept has read", ErrKept, len(b.slots.held))
		}
	} else if len(b.slots.held) == 0 {
		b.slots.held = make([]uint64, 1)
	}
	p, err := newChunkPlan(in, gdn.Tensor[float32]{}, nil, opt, false, b.split, b.slots.at(keepForward, slot))
	if err != nil {
		return nil, nil, nil, err
	}
	if n := chunkKeptLen(p.shape, chunkGeomFor(p.shape, opt)); b.slots.room > 0 && n > b.slots.room {
		return nil, nil, nil, fmt.Errorf("%w: ForwardKeep: A, P and X of T %d, H_v %d, n_seqs %d take %d floats, more than a slot of KeepSlots holds (%d): keep slots for the largest call",
			ErrKept, p.shape.T, p.shape.Hv, p.shape.Seqs, n, b.slots.room)
	}
	k = &Kept{b: b, slot: slot, shape: p.shape, heads: opt.Heads, chunkLen: chunkGeomFor(p.shape, opt).L, seed: maphash.MakeSeed()}
	k.sums = keptSums(k.seed, in)
	out, err := b.run(p)
	if err != nil {
		return nil, nil, nil, err
	}
	b.slots.held[slot] = b.calls
	k.call = b.calls
	n := p.shape.YLen()
	return out[:n:n], out[n:], k, nil
}

// BackwardKept is Backward for the Chunk algorithm that reads the A, P and
// X its ForwardKeep k left instead of forming them. in and opt must be the
// forward's: the same shape, q, k, g and beta (checked by hash), head map,
// chunk length and snapshots; v, the initial state, dy, dStates and the
// scale may differ. The packed gradients are Backward's, bit for bit. It
// overwrites the kept matrices, so k serves once (with KeepSlots, its slot
// is then free); an error wrapping ErrKept says why k does not serve
// (another call since ended it, another Backend, other inputs), and then
// nothing ran.
func (b *Backend) BackwardKept(k *Kept, in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options) ([]float32, error) {
	if !b.open() {
		return nil, ErrNotOpen
	}
	if opt.Algo != gdn.Chunk {
		return nil, fmt.Errorf("metal: BackwardKept: algo %v: only the chunk kernels keep A, P and X", opt.Algo)
	}
	if k == nil || k.b != b {
		return nil, fmt.Errorf("%w: BackwardKept: the Kept is not of this Backend's ForwardKeep", ErrKept)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if k.slot >= len(b.slots.held) || b.slots.held[k.slot] != k.call {
		return nil, fmt.Errorf("%w: BackwardKept: another call since this ForwardKeep ended its A, P and X (see KeepSlots), or this Kept served once", ErrKept)
	}
	p, err := newChunkPlan(in, dy, dStates, opt, true, b.split, b.slots.at(keepBackward, k.slot))
	if err != nil {
		return nil, err
	}
	if p.shape != k.shape {
		return nil, fmt.Errorf("%w: BackwardKept: shape %+v, the forward's %+v", ErrKept, p.shape, k.shape)
	}
	if opt.Heads != k.heads {
		return nil, fmt.Errorf("%w: BackwardKept: head map %v, the forward's %v", ErrKept, opt.Heads, k.heads)
	}
	if L := chunkGeomFor(p.shape, opt).L; L != k.chunkLen {
		return nil, fmt.Errorf("%w: BackwardKept: chunk length %d, the forward's %d", ErrKept, L, k.chunkLen)
	}
	sums := keptSums(k.seed, in)
	for i, name := range [4]string{"q", "k", "g", "beta"} { // keptSums' order
		if sums[i] != k.sums[i] {
			return nil, fmt.Errorf("%w: BackwardKept: %s is not the forward's (A, P and X are of its q, k, g and beta)", ErrKept, name)
		}
	}
	out, err := b.run(p)
	if err != nil {
		return nil, err
	}
	b.slots.held[k.slot] = 0
	return out, nil
}

// keptSums hashes the elements each of q, k, g and beta views (their
// values and places in the view, not the rest of their Data), with seed.
func keptSums(seed maphash.Seed, in *gdn.Inputs[float32]) [4]uint64 {
	var out [4]uint64
	for i, t := range [4]gdn.Tensor[float32]{in.Q, in.K, in.G, in.Beta} {
		var h maphash.Hash
		h.SetSeed(seed)
		var buf [4]byte
		for i3 := range t.Ne[3] {
			for i2 := range t.Ne[2] {
				for i1 := range t.Ne[1] {
					at := t.Off + i1*t.Nb[1] + i2*t.Nb[2] + i3*t.Nb[3]
					if t.Nb[0] == 1 {
						// a contiguous row: its bytes as they are (little-endian
						// on every machine the kernels run on, as buf below)
						row := t.Data[at : at+t.Ne[0]]
						h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(row))), 4*len(row)))
						continue
					}
					for i0 := range t.Ne[0] {
						v := math.Float32bits(t.Data[at+i0*t.Nb[0]])
						buf[0], buf[1], buf[2], buf[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
						h.Write(buf[:])
					}
				}
			}
		}
		out[i] = h.Sum64()
	}
	return out
}
