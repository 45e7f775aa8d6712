package gdn

import (
	"errors"
	"fmt"
	"math"
	"runtime"
)

// HeadMap says which q/k head a value head reads when H_v = r * H_k.
type HeadMap int

const (
	// Tile: value head h reads q/k head h mod H_k (ggml today).
	Tile HeadMap = iota
	// Interleave: value head h reads q/k head h / r (fla, Hugging Face).
	Interleave
)

func (m HeadMap) String() string {
	switch m {
	case Tile:
		return "tile"
	case Interleave:
		return "interleave"
	}
	return fmt.Sprintf("HeadMap(%d)", int(m))
}

// ParseHeadMap reads "tile" or "interleave".
func ParseHeadMap(s string) (HeadMap, error) {
	switch s {
	case "tile":
		return Tile, nil
	case "interleave":
		return Interleave, nil
	}
	return 0, fmt.Errorf("gdn: head map %q: want tile or interleave", s)
}

// Inputs are the tensors of the op, as views in ggml's layout:
//
//	Q, K   [S_k, H_k, T, n_seqs_qk]
//	V      [S_v, H_v, T, n_seqs]
//	G      [1 or S_k, H_v, T, n_seqs]   log gate: one per head, or per key channel (KDA)
//	Beta   [1, H_v, T, n_seqs]
//	State  [S_k, S_v, H_v, n_seqs]      initial state M: row j (value index) holds S_k
//	                                    key columns; a nil State.Data means zeros
//
// H_v must be a multiple of H_k and n_seqs a multiple of n_seqs_qk; value
// sequence s reads q/k sequence s / (n_seqs / n_seqs_qk).
type Inputs[F Float] struct {
	Q, K, V, G, Beta Tensor[F]
	State            Tensor[F]
}

// Options are the op's parameters. The zero value is ggml's default: scale
// 1/sqrt(S_k), tiled heads, one state output (the final state), segment
// length ceil(sqrt(T)), GOMAXPROCS workers.
type Options struct {
	// Scale multiplies every output y; 0 means 1/sqrt(S_k). It must be
	// finite: a NaN or infinite scale is an error, not a NaN output.
	Scale float64
	// Heads maps value heads to q/k heads when H_v > H_k.
	Heads HeadMap
	// Snapshots is the number of state slots the forward returns: slot 0
	// is the final state, slot s the state s tokens before the end. 0 means 1.
	// It must not exceed T.
	Snapshots int
	// Segment is the checkpoint segment length C of the backward; 0 means
	// ceil(sqrt(T)). A C of T or more keeps every state.
	Segment int
	// KeepAll keeps every state instead of checkpointing (C = T). It gives
	// results bit-identical to any Segment.
	KeepAll bool
	// Threads bounds the number of (head, seq) pairs run at once; 0 means
	// GOMAXPROCS. Results do not depend on it.
	Threads int
	// Algo picks the algorithm: Recurrent (the zero value, the definition)
	// or Chunk, the chunkwise (WY) form.
	Algo Algo
	// ChunkLen is the chunk length L of the Chunk algorithm; 0 means 64.
	// Any L >= 1 works; L = 1 is the recurrence.
	ChunkLen int
}

// Shape holds the sizes of one call, read off its inputs.
type Shape struct {
	Sk, Sv    int // key and value head sizes
	Hk, Hv    int // q/k heads and value heads
	T         int // tokens per sequence
	Seqs      int // value sequences (n_seqs)
	SeqsQK    int // q/k sequences (n_seqs_qk), dividing Seqs
	GateWidth int // 1 (scalar gate) or Sk (KDA)
	Snapshots int // state slots the forward returns, at least 1
}

// KDA reports whether the gate is per key channel.
func (s Shape) KDA() bool { return s.GateWidth != 1 }

// Check reports whether s is a shape that Inputs.Shape can return: every
// size at least 1, H_v a multiple of H_k, Seqs a multiple of SeqsQK, the
// gate width 1 or S_k, Snapshots 1 to T, and every output small enough to
// index. The sizing functions (ChunkScratchBytes here, metal's) take a
// Shape that callers may build by hand; they give 0 for one that Check
// refuses. The error names the field at fault.
func (s Shape) Check() error {
	for _, f := range []struct {
		name string
		n    int
	}{{"S_k", s.Sk}, {"S_v", s.Sv}, {"H_k", s.Hk}, {"H_v", s.Hv}, {"T", s.T},
		{"n_seqs", s.Seqs}, {"n_seqs of q/k", s.SeqsQK}, {"gate width", s.GateWidth}} {
		if f.n < 1 || f.n > maxElems {
			return fmt.Errorf("gdn: shape: %s = %d, want 1 to 2^40", f.name, f.n)
		}
	}
	if s.Hv%s.Hk != 0 {
		return fmt.Errorf("gdn: shape: H_v = %d is not a multiple of H_k = %d", s.Hv, s.Hk)
	}
	if s.Seqs%s.SeqsQK != 0 {
		return fmt.Errorf("gdn: shape: n_seqs = %d is not a multiple of q/k's n_seqs = %d", s.Seqs, s.SeqsQK)
	}
	if s.GateWidth != 1 && s.GateWidth != s.Sk {
		return fmt.Errorf("gdn: shape: gate width = %d, want 1 (scalar gate) or S_k = %d (KDA)", s.GateWidth, s.Sk)
	}
	if s.Snapshots < 1 || s.Snapshots > s.T {
		return fmt.Errorf("gdn: shape: snapshots = %d, want 1 to T = %d", s.Snapshots, s.T)
	}
	return s.checkSizes()
}

// checkSizes reports an output or scratch size of s past 2^40 elements.
func (s Shape) checkSizes() error {
	for _, sz := range [][]int{
		{s.Sv, s.Hv, s.T, s.Seqs},
		{s.Sk, s.Hv, s.T, s.Seqs},
		{s.Sk, s.Sv, s.Hv, s.Seqs, s.Snapshots},
		{s.Sk, s.Sv, s.T + 3},
	} {
		if _, ok := mulSizes(sz...); !ok {
			return fmt.Errorf("gdn: shape %+v is too large (an output would exceed 2^40 elements)", s)
		}
	}
	return nil
}

// StateLen is the number of elements in one state slot: S_v * S_k per
// (head, seq), for every value head and sequence.
func (s Shape) StateLen() int { return s.Sk * s.Sv * s.Hv * s.Seqs }

// YLen is the number of elements of y, [S_v, H_v, T, n_seqs].
func (s Shape) YLen() int { return s.Sv * s.Hv * s.T * s.Seqs }

// StatesLen is the number of elements of the state outputs: Snapshots
// slots of StateLen, slot-major ([S_k, S_v, H_v, n_seqs, snapshots], the
// slot slowest).
func (s Shape) StatesLen() int { return s.StateLen() * s.Snapshots }

// qkHead returns the q/k head and sequence that value head h of sequence seq reads.
func (s Shape) qkHead(h, seq int, m HeadMap) (hq, sq int) {
	r := s.Hv / s.Hk
	if m == Interleave {
		hq = h / r
	} else {
		hq = h % s.Hk
	}
	return hq, seq / (s.Seqs / s.SeqsQK)
}

// SegmentLength returns the checkpoint segment length C that opt gives for T
// tokens: ceil(sqrt(T)) by default, T when keeping every state, never more
// than T.
func (opt Options) SegmentLength(T int) int {
	c := opt.Segment
	if opt.KeepAll || c >= T {
		return T
	}
	if c == 0 {
		c = int(math.Ceil(math.Sqrt(float64(T))))
	}
	return min(c, T)
}

// Segments is the number of checkpoint segments of C tokens that T tokens
// make, ceil(T/C), computed without overflow; T < 1 gives 0. It panics if
// C < 1, a programmer's error (Options.SegmentLength never gives one).
func Segments(T, C int) int {
	if C < 1 {
		panic(fmt.Sprintf("gdn: Segments: segment length C = %d, want at least 1", C))
	}
	if T < 1 {
		return 0
	}
	return (T-1)/C + 1
}

// ScaleFor returns the scale opt gives for key size sk: opt.Scale, or
// 1/sqrt(S_k) when that is 0.
func (opt Options) ScaleFor(sk int) float64 {
	if opt.Scale == 0 {
		return 1 / math.Sqrt(float64(sk))
	}
	return opt.Scale
}

func (opt Options) threads(items int) int {
	n := opt.Threads
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return max(1, min(n, items))
}

// Shape validates the inputs against each other and against opt and returns
// their sizes. Every error names the tensor and the dimension at fault.
func (in *Inputs[F]) Shape(opt Options) (Shape, error) {
	if in == nil {
		return Shape{}, errors.New("gdn: inputs are nil")
	}
	var s Shape
	qkDims := dimNames{"S_k", "H_k", "T", "n_seqs"}
	if err := checkView("q", in.Q, [4]int{-1, -1, -1, -1}, qkDims); err != nil {
		return s, fmt.Errorf("gdn: %w", err)
	}
	s.Sk, s.Hk, s.T, s.SeqsQK = in.Q.Ne[0], in.Q.Ne[1], in.Q.Ne[2], in.Q.Ne[3]
	if err := checkView("k", in.K, in.Q.Ne, qkDims); err != nil {
		return s, fmt.Errorf("gdn: %w (k must have q's shape)", err)
	}
	vDims := dimNames{"S_v", "H_v", "T", "n_seqs"}
	if err := checkView("v", in.V, [4]int{-1, -1, s.T, -1}, vDims); err != nil {
		return s, fmt.Errorf("gdn: %w", err)
	}
	s.Sv, s.Hv, s.Seqs = in.V.Ne[0], in.V.Ne[1], in.V.Ne[3]
	if s.Hv%s.Hk != 0 {
		return s, fmt.Errorf("gdn: v: ne[1] (H_v) = %d is not a multiple of q/k's ne[1] (H_k) = %d", s.Hv, s.Hk)
	}
	if s.Seqs%s.SeqsQK != 0 {
		return s, fmt.Errorf("gdn: v: ne[3] (n_seqs) = %d is not a multiple of q/k's ne[3] (n_seqs) = %d", s.Seqs, s.SeqsQK)
	}
	gw := in.G.Ne[0]
	if gw != 1 && gw != s.Sk {
		return s, fmt.Errorf("gdn: g: ne[0] (gate width) = %d, want 1 (scalar gate) or S_k = %d (KDA)", gw, s.Sk)
	}
	s.GateWidth = gw
	if err := checkView("g", in.G, [4]int{gw, s.Hv, s.T, s.Seqs}, dimNames{"gate width", "H_v", "T", "n_seqs"}); err != nil {
		return s, fmt.Errorf("gdn: %w", err)
	}
	if err := checkView("beta", in.Beta, [4]int{1, s.Hv, s.T, s.Seqs}, dimNames{"1", "H_v", "T", "n_seqs"}); err != nil {
		return s, fmt.Errorf("gdn: %w", err)
	}
	if in.State.Data != nil {
		if err := checkView("state", in.State, [4]int{s.Sk, s.Sv, s.Hv, s.Seqs}, dimNames{"S_k", "S_v", "H_v", "n_seqs"}); err != nil {
			return s, fmt.Errorf("gdn: %w", err)
		}
	}
	s.Snapshots = opt.Snapshots
	if s.Snapshots == 0 {
		s.Snapshots = 1
	}
	if s.Snapshots < 0 || s.Snapshots > s.T {
		return s, fmt.Errorf("gdn: snapshots: %d, want 1 to T = %d", opt.Snapshots, s.T)
	}
	if opt.Segment < 0 {
		return s, fmt.Errorf("gdn: segment length C = %d, want at least 1 (or 0 for ceil(sqrt(T)))", opt.Segment)
	}
	if opt.Algo != Recurrent && opt.Algo != Chunk {
		return s, fmt.Errorf("gdn: algo: unknown algorithm %d", int(opt.Algo))
	}
	if opt.ChunkLen < 0 {
		return s, fmt.Errorf("gdn: chunk length L = %d, want at least 1 (or 0 for %d)", opt.ChunkLen, DefaultChunkLen)
	}
	if math.IsNaN(opt.Scale) || math.IsInf(opt.Scale, 0) {
		return s, fmt.Errorf("gdn: scale: %g, want a finite number (or 0 for 1/sqrt(S_k))", opt.Scale)
	}
	if opt.Heads != Tile && opt.Heads != Interleave {
		return s, fmt.Errorf("gdn: heads: unknown head map %d", int(opt.Heads))
	}
	// Every output and scratch size must be representable.
	if err := s.checkSizes(); err != nil {
		return s, err
	}
	return s, nil
}
