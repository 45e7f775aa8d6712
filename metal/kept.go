package metal

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
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
// the A, P and X the Backend holds, or its inputs are not the forward's.
var ErrKept = errors.New("metal: kept")

// Kept names the A, P and X a Backend's ForwardKeep left in its scratch,
// for one BackwardKept. Any other call on the Backend (Forward, Backward,
// ForwardKeep or BackwardKept) ends it: the scratch is shared.
type Kept struct {
	b        *Backend
	call     uint64
	shape    gdn.Shape
	heads    gdn.HeadMap
	chunkLen int
	seed     maphash.Seed
	sums     [4]uint64 // q, k, g, beta
}

// ForwardKeep is Forward for the Chunk algorithm (opt.Algo must be
// gdn.Chunk) that also keeps each chunk's A, P and X in the Backend's
// scratch for the BackwardKept that follows, with the same q, k, g, beta
// and options. y and the states are Forward's, bit for bit. It runs the
// backward's head groups (see ChunkScratchLimit; one group at the 27B
// shape) and holds the backward's scratch; the inputs are read, not
// modified, and hashed so that BackwardKept can check them.
func (b *Backend) ForwardKeep(in *gdn.Inputs[float32], opt gdn.Options) (y, states []float32, k *Kept, err error) {
	if !b.open() {
		return nil, nil, nil, ErrNotOpen
	}
	if opt.Algo != gdn.Chunk {
		return nil, nil, nil, fmt.Errorf("metal: ForwardKeep: algo %v: only the chunk kernels keep A, P and X", opt.Algo)
	}
	p, err := newChunkPlan(in, gdn.Tensor[float32]{}, nil, opt, false, b.split, keepForward)
	if err != nil {
		return nil, nil, nil, err
	}
	k = &Kept{b: b, shape: p.shape, heads: opt.Heads, chunkLen: chunkGeomFor(p.shape, opt).L, seed: maphash.MakeSeed()}
	k.sums = keptSums(k.seed, in)
	b.mu.Lock()
	out, err := b.run(p)
	if err == nil {
		b.kept = b.calls
		k.call = b.calls
	}
	b.mu.Unlock()
	if err != nil {
		return nil, nil, nil, err
	}
	n := p.shape.YLen()
	return out[:n:n], out[n:], k, nil
}

// BackwardKept is Backward for the Chunk algorithm that reads the A, P and
// X its ForwardKeep k left instead of forming them. in and opt must be the
// forward's: the same shape, q, k, g and beta (checked by hash), head map,
// chunk length and snapshots; v, the initial state, dy, dStates and the
// scale may differ. The packed gradients are Backward's, bit for bit. It
// overwrites the kept matrices, so k serves once; an error wrapping
// ErrKept says why k does not serve (another call since, another Backend,
// other inputs), and then nothing ran.
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
	p, err := newChunkPlan(in, dy, dStates, opt, true, b.split, keepBackward)
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
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kept == 0 || b.kept != k.call {
		return nil, fmt.Errorf("%w: BackwardKept: the Backend ran another call since this ForwardKeep (or this Kept served once): its A, P and X are gone", ErrKept)
	}
	return b.run(p)
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
