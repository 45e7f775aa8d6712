// Package verify holds the case matrix and the cross-checks that every
// backend of the gated delta rule shares: finite differences against the
// float64 reference, float32 against float64, checkpointed against
// keep-every-state, and any backend against the CPU reference, with the
// metrics the field uses (test-backend-ops' NMSE and grad-mode error, fla's
// RMS ratio).
package verify

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gdnback/gdnback/gdn"
)

// Range picks the distribution of the inputs.
type Range int

const (
	// Gentle: q, k L2-normalized, v ~ U(-1, 1), g ~ U(-1, -0.01),
	// beta ~ U(0, 1).
	Gentle Range = iota
	// BackendOps: test-backend-ops' ranges: q, k L2-normalized,
	// v ~ U(-0.3, 5), g ~ U(-20, -1e-4), beta ~ U(0, 1).
	BackendOps
)

func (r Range) String() string {
	if r == BackendOps {
		return "backend-ops"
	}
	return "gentle"
}

// QKLayout is how q, k (and v) are laid out in memory.
type QKLayout int

const (
	// Dense: each tensor contiguous in ggml's order.
	Dense QKLayout = iota
	// Fused: q, k and v are row views of one [2*H_k*S_k + H_v*S_v, T, n_seqs]
	// buffer, as Qwen3-Next and Qwen3.5 pass them (offsets 0, H_k*S_k and
	// 2*H_k*S_k).
	Fused
	// Permuted: q, k and v are stored token-major within a sequence
	// ([S, T, H, n_seqs] in memory) and viewed with heads and tokens swapped.
	Permuted
)

func (l QKLayout) String() string {
	switch l {
	case Fused:
		return "fused"
	case Permuted:
		return "permuted"
	}
	return "dense"
}

// Case is one entry of the case matrix: a shape, a layout and a seed.
type Case struct {
	Family    string // the family the case covers, e.g. "head_size"
	Sk, Sv    int
	Hk, Rep   int // q/k heads and v_repeat (H_v = Rep * H_k)
	T         int
	Seqs      int // value sequences
	SeqsQK    int // q/k sequences (0 means Seqs)
	KDA       bool
	Heads     gdn.HeadMap
	Layout    QKLayout
	State     bool // random initial state (else none, i.e. zeros)
	Snapshots int  // K (0 means 1)
	C         int  // segment length (0 means ceil(sqrt(T)))
	Algo      gdn.Algo
	L         int // chunk length of the Chunk algorithm (0 means gdn.DefaultChunkLen)
	Range     Range
	Seed      uint64
}

// Hv is the number of value heads.
func (c Case) Hv() int { return c.Hk * c.Rep }

func (c Case) seqsQK() int {
	if c.SeqsQK == 0 {
		return c.Seqs
	}
	return c.SeqsQK
}

// Params lists the case's parameters in test-backend-ops' manner.
func (c Case) Params() string {
	gate := "scalar"
	if c.KDA {
		gate = "kda"
	}
	state := "zero"
	if c.State {
		state = "random"
	}
	return fmt.Sprintf("sk=%d,sv=%d,hk=%d,hv=%d,T=%d,seqs=%d/%d,gate=%s,heads=%s,qk=%s,state=%s,snap=%d,C=%d,range=%s",
		c.Sk, c.Sv, c.Hk, c.Hv(), c.T, c.seqsQK(), c.Seqs, gate, c.Heads, c.Layout, state,
		max(c.Snapshots, 1), c.Options().SegmentLength(c.T), c.Range) + c.algoParams()
}

// algoParams names the algorithm of a Chunk case and its chunk length;
// Recurrent cases, the default, keep their names without it.
func (c Case) algoParams() string {
	if c.Algo == gdn.Recurrent {
		return ""
	}
	return fmt.Sprintf(",algo=%v,L=%d", c.Algo, c.Options().ChunkLength())
}

// String is the case's name: its family and its parameters.
func (c Case) String() string { return c.Family + ":" + c.Params() }

// Options are the op options the case runs with.
func (c Case) Options() gdn.Options {
	return gdn.Options{Heads: c.Heads, Snapshots: c.Snapshots, Segment: c.C, Algo: c.Algo, ChunkLen: c.L}
}

// Problem is a case's tensors in one precision: the inputs, the upstream
// gradients dy and dStates, and the options.
type Problem[F gdn.Float] struct {
	Case    Case
	In      gdn.Inputs[F]
	DY      gdn.Tensor[F]
	DStates []F
	Opt     gdn.Options
}

// Build makes the case's problem. The values are drawn in float64 from the
// case's seed and rounded to float32, so Build[float32] and Build[float64]
// hold the same numbers and differ only in the arithmetic that runs on them.
//
// Build panics on a case that cannot be laid out: a Fused layout whose q/k
// and v have different n_seqs (SeqsQK set and not Seqs). The cases of
// Matrix and LongMatrix never do.
func Build[F gdn.Float](c Case) *Problem[F] {
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	hv, sqk := c.Hv(), c.seqsQK()
	gw := 1
	if c.KDA {
		gw = c.Sk
	}
	p := &Problem[F]{Case: c, Opt: c.Options()}

	// q, k, v in the case's layout.
	qRows := normalizedRows[F](rng, c.Sk, c.Hk*c.T*sqk)
	kRows := normalizedRows[F](rng, c.Sk, c.Hk*c.T*sqk)
	vlo, vhi := -1.0, 1.0
	if c.Range == BackendOps {
		vlo, vhi = -0.3, 5
	}
	vRows := uniform[F](rng, c.Sv*hv*c.T*c.Seqs, vlo, vhi)
	qkNe := [4]int{c.Sk, c.Hk, c.T, sqk}
	vNe := [4]int{c.Sv, hv, c.T, c.Seqs}
	switch c.Layout {
	case Dense:
		p.In.Q = gdn.Contiguous(qRows, qkNe)
		p.In.K = gdn.Contiguous(kRows, qkNe)
		p.In.V = gdn.Contiguous(vRows, vNe)
	case Fused:
		if sqk != c.Seqs {
			panic("verify: a fused layout needs q/k and v to have the same n_seqs")
		}
		width := 2*c.Hk*c.Sk + hv*c.Sv
		buf := make([]F, width*c.T*c.Seqs)
		view := func(off, s, h int) gdn.Tensor[F] {
			return gdn.Tensor[F]{Data: buf, Ne: [4]int{s, h, c.T, c.Seqs}, Nb: [4]int{1, s, width, width * c.T}, Off: off}
		}
		p.In.Q, p.In.K, p.In.V = view(0, c.Sk, c.Hk), view(c.Hk*c.Sk, c.Sk, c.Hk), view(2*c.Hk*c.Sk, c.Sv, hv)
		scatter(p.In.Q, qRows)
		scatter(p.In.K, kRows)
		scatter(p.In.V, vRows)
	case Permuted:
		perm := func(rows []F, ne [4]int) gdn.Tensor[F] {
			// stored as [S, T, H, n_seqs], viewed as [S, H, T, n_seqs]
			st := gdn.Contiguous(make([]F, len(rows)), [4]int{ne[0], ne[2], ne[1], ne[3]})
			v := gdn.Permute(st, [4]int{0, 2, 1, 3})
			scatter(v, rows)
			return v
		}
		p.In.Q, p.In.K, p.In.V = perm(qRows, qkNe), perm(kRows, qkNe), perm(vRows, vNe)
	}

	glo, ghi := -1.0, -0.01
	if c.Range == BackendOps {
		glo, ghi = -20, -1e-4
	}
	p.In.G = gdn.Contiguous(uniform[F](rng, gw*hv*c.T*c.Seqs, glo, ghi), [4]int{gw, hv, c.T, c.Seqs})
	p.In.Beta = gdn.Contiguous(uniform[F](rng, hv*c.T*c.Seqs, 0, 1), [4]int{1, hv, c.T, c.Seqs})
	if c.State {
		p.In.State = gdn.Contiguous(uniform[F](rng, c.Sk*c.Sv*hv*c.Seqs, -0.5, 0.5), [4]int{c.Sk, c.Sv, hv, c.Seqs})
	}
	p.DY = gdn.Contiguous(uniform[F](rng, c.Sv*hv*c.T*c.Seqs, -1, 1), vNe)
	p.DStates = uniform[F](rng, c.Sk*c.Sv*hv*c.Seqs*max(c.Snapshots, 1), -1, 1)
	return p
}

// uniform draws n values from U(lo, hi), rounded to float32.
func uniform[F gdn.Float](rng *rand.Rand, n int, lo, hi float64) []F {
	out := make([]F, n)
	for i := range out {
		out[i] = F(float32(lo + (hi-lo)*rng.Float64()))
	}
	return out
}

// normalizedRows draws rows of n values from U(-1, 1) and L2-normalizes
// each, rounded to float32.
func normalizedRows[F gdn.Float](rng *rand.Rand, n, rows int) []F {
	out := make([]F, n*rows)
	row := make([]float64, n)
	for r := 0; r < rows; r++ {
		var ss float64
		for i := range row {
			row[i] = 2*rng.Float64() - 1
			ss += row[i] * row[i]
		}
		inv := 1 / math.Sqrt(ss)
		for i := range row {
			out[r*n+i] = F(float32(row[i] * inv))
		}
	}
	return out
}

// scatter writes dense values (ne[0] fastest) through the view t.
func scatter[F gdn.Float](t gdn.Tensor[F], dense []F) {
	n := 0
	for i3 := 0; i3 < t.Ne[3]; i3++ {
		for i2 := 0; i2 < t.Ne[2]; i2++ {
			for i1 := 0; i1 < t.Ne[1]; i1++ {
				for i0 := 0; i0 < t.Ne[0]; i0++ {
					t.Data[t.Off+i0*t.Nb[0]+i1*t.Nb[1]+i2*t.Nb[2]+i3*t.Nb[3]] = dense[n]
					n++
				}
			}
		}
	}
}

// Matrix is the default case matrix: every family at sizes that keep
// `go test ./...` within a few minutes on two cores.
func Matrix() []Case { return matrix(false) }

// LongMatrix is Matrix plus longer sequences and larger heads.
func LongMatrix() []Case { return matrix(true) }

func matrix(long bool) []Case {
	var cs []Case
	seed := uint64(1)
	add := func(c Case) {
		if c.Seqs == 0 {
			c.Seqs = 1
		}
		if c.Hk == 0 {
			c.Hk = 1
		}
		if c.Rep == 0 {
			c.Rep = 1
		}
		c.Seed = seed
		seed++
		cs = append(cs, c)
	}
	// Head sizes, both gates.
	for _, s := range []int{16, 32, 64, 128} {
		for _, kda := range []bool{false, true} {
			add(Case{Family: "head_size", Sk: s, Sv: s, T: 7, C: 3, KDA: kda, State: true})
		}
	}
	// S_k != S_v, both ways.
	add(Case{Family: "sk_ne_sv", Sk: 32, Sv: 16, T: 9, C: 4, State: true})
	add(Case{Family: "sk_ne_sv", Sk: 16, Sv: 32, T: 9, C: 4, KDA: true, State: true})
	// Sequence lengths, with a C that does not divide T (T = 1 and 2 run one
	// segment of their own length; 64 is cut into 13 segments of 5).
	tc := [][2]int{{1, 0}, {2, 0}, {7, 3}, {33, 5}, {64, 5}, {65, 6}, {100, 7}}
	if long {
		tc = append(tc, [2]int{127, 0}, [2]int{256, 0}, [2]int{256, 15})
	}
	for i, x := range tc {
		for _, r := range []Range{Gentle, BackendOps} {
			add(Case{Family: "seq_len", Sk: 16, Sv: 16, T: x[0], C: x[1], KDA: i%2 == 1, State: i%3 != 0, Range: r})
		}
	}
	// v_repeat 1, 2, 3 under both mappings, q/k dense and fused.
	for _, rep := range []int{1, 2, 3} {
		for _, m := range []gdn.HeadMap{gdn.Tile, gdn.Interleave} {
			for _, l := range []QKLayout{Dense, Fused} {
				add(Case{Family: "v_repeat", Sk: 16, Sv: 16, Hk: 2, Rep: rep, T: 9, C: 4, Heads: m, Layout: l, State: true, KDA: rep == 2})
			}
		}
	}
	// The upstream review's gap: value heads over fewer q/k heads, with q/k
	// as strided row views of a fused buffer, at real head sizes.
	for _, s := range []int{32, 64, 128} {
		for _, m := range []gdn.HeadMap{gdn.Tile, gdn.Interleave} {
			add(Case{Family: "broadcast_strided", Sk: s, Sv: s, Hk: 1, Rep: 3, T: 5, C: 2, Heads: m, Layout: Fused, State: true, KDA: s == 64, Range: BackendOps})
		}
	}
	add(Case{Family: "broadcast_strided", Sk: 32, Sv: 32, Hk: 3, Rep: 2, T: 6, C: 4, Heads: gdn.Tile, Layout: Fused, Seqs: 2})
	// Permuted views.
	for _, kda := range []bool{false, true} {
		add(Case{Family: "permuted", Sk: 16, Sv: 16, Hk: 2, Rep: 2, T: 8, C: 3, Heads: gdn.Interleave, Layout: Permuted, State: true, KDA: kda})
	}
	// Several sequences, and q/k shared across sequences.
	add(Case{Family: "n_seqs", Sk: 16, Sv: 16, Hk: 2, T: 6, C: 4, Seqs: 2, State: true})
	add(Case{Family: "n_seqs", Sk: 16, Sv: 16, Hk: 1, Rep: 2, T: 6, C: 4, Seqs: 2, SeqsQK: 1, Heads: gdn.Interleave, State: true, KDA: true})
	add(Case{Family: "n_seqs", Sk: 16, Sv: 16, Hk: 2, Rep: 3, T: 5, Seqs: 2, SeqsQK: 1, Layout: Permuted, Heads: gdn.Tile, Range: BackendOps})
	// Zero and random initial states.
	for _, st := range []bool{false, true} {
		add(Case{Family: "init_state", Sk: 16, Sv: 16, Hk: 2, T: 10, C: 4, State: st, KDA: true})
	}
	// State snapshots 1 to 4.
	for k := 1; k <= 4; k++ {
		add(Case{Family: "snapshots", Sk: 16, Sv: 16, T: 9, C: 4, Snapshots: k, State: k%2 == 0, KDA: k >= 3, Range: Range(k % 2)})
	}
	if long {
		for _, s := range []int{64, 128} {
			add(Case{Family: "long", Sk: s, Sv: s, Hk: 2, Rep: 3, T: 65, C: 0, Heads: gdn.Interleave, Layout: Fused, State: true, KDA: s == 64, Snapshots: 3, Range: BackendOps})
		}
	}
	return cs
}

// WithAlgo returns copies of cs that run algorithm a. For Chunk, L is the
// chunk length; L = 0 gives each case its segment length
// (Options.SegmentLength: ceil(sqrt(T)) or the case's C), so that the
// matrix's cases run several chunks and a final partial one rather than one
// chunk of gdn.DefaultChunkLen.
func WithAlgo(cs []Case, a gdn.Algo, L int) []Case {
	out := make([]Case, len(cs))
	for i, c := range cs {
		c.Algo, c.L = a, 0
		if a == gdn.Chunk {
			c.L = L
			if L == 0 {
				c.L = c.Options().SegmentLength(c.T)
			}
		}
		out[i] = c
	}
	return out
}

// Filter returns the cases whose name (Case.String) keep accepts.
func Filter(cs []Case, keep func(name string) bool) []Case {
	var out []Case
	for _, c := range cs {
		if keep(c.String()) {
			out = append(out, c)
		}
	}
	return out
}
