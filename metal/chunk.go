package metal

import (
	"fmt"

	"github.com/gdnback/gdnback/gdn"
)

// The chunkwise (WY) kernels of gdn.metal (gdn_chunk_prep, gdn_chunk_fwd,
// gdn_chunk_bwd, gdn_chunk_dpairs, gdn_chunk_red): gdn's Chunk algorithm
// on the device.

// chunkArgs mirrors gdn_chunk_args in gdn.metal, field for field.
type chunkArgs struct {
	Sk, Sv, Hk, Hv, T, Seqs, SeqsQK, Gw int32
	Rep, SeqRep, Interleave, Snapshots  int32
	Scale                               float32
	L, Lp                               int32
	Nc                                  int32
	Nce, E                              int32
	Vb, Nvb                             int32
	Q, K, V, G, Beta, State, DY         view
	HasState                            int32
	DStatesOff                          int32
	YOff, SnapOff                       int32
	DqOff, DkOff, DvOff, DgOff          int32
	DbetaOff, DstateOff                 int32
	Pp, Bwd                             int32
}

// MaxChunkLen is the longest chunk the chunk kernels take (GDN_LMAX in
// gdn.metal): a chunk's rows of the state walk stay in threadgroup memory.
const MaxChunkLen = 64

// chunkRows is vb in gdn.metal: the value rows of the state that one
// threadgroup of the state walk (gdn_chunk_fwd, gdn_chunk_bwd) holds.
const chunkRows = 16

// chunkGeom is the chunking of a call: L = min(ChunkLength, T) and Lp, L
// rounded up to 8 (the kernels' matrices are whole 8x8 tiles); the first
// nce chunks are L tokens of [0, e), and each of the tokens after e a
// chunk of its own (the snapshot tokens), nc chunks in all, as gdn's.
type chunkGeom struct {
	L, Lp, nc, nce, e int
}

func chunkGeomFor(s gdn.Shape, opt gdn.Options) chunkGeom {
	L := max(1, min(opt.ChunkLength(), s.T))
	e := s.T - max(s.Snapshots, 1) + 1
	nce := (e + L - 1) / L
	return chunkGeom{L: L, Lp: (L + 7) &^ 7, nc: nce + s.T - e, nce: nce, e: e}
}

// chunkAreaElems is the elements of one chunk's area of the scratch
// (gdn_ca in gdn.metal), with Lp = L rounded up to 8: six [Lp][S_k] (k, q,
// kd, qd, kl, -W'), two [Lp][S_v] (v then du; U' then v - u), three
// [Lp][Lp] (A, P, R), beta [Lp], lam [S_k] and the decays [Lp][gw]; the
// backward's areas add c [Lp][S_v], the state before the chunk and dL/dM
// after it [S_v][S_k], and each state block's share of dbeta and dlam
// [S_v/16][Lp + S_k].
func chunkAreaElems(sk, sv, gw, Lp int, backward bool) int {
	n := 6*Lp*sk + 2*Lp*sv + 3*Lp*Lp + Lp + sk + Lp*gw
	if backward {
		n += Lp*sv + 2*sk*sv + (sv/chunkRows)*(Lp+sk)
	}
	return n
}

// chunkShared is the threadgroup memory in bytes of the state walk: a
// block of 16 rows of M (or dM) and two [Lp][16] blocks of rows, their
// rows padded by chunkPadK and chunkPadV elements (GDN_PADK and GDN_PADV
// in gdn.metal).
func chunkShared(sk, Lp int) int {
	return 4 * (chunkRows*(sk+chunkPadK) + 2*Lp*(chunkRows+chunkPadV))
}

// chunkPadK and chunkPadV are GDN_PADK and GDN_PADV in gdn.metal.
const chunkPadK, chunkPadV = 4, 8

// ChunkScratchBytes is the scratch in bytes of the chunk kernels'
// backward for one (head, seq) pair of a call of shape s (head sizes, T,
// gate width, snapshots) with chunk length L (0 means
// gdn.DefaultChunkLen; L is at most T):
//
//	4 * nc * W
//
// an area of W elements for each of the nc = gdn.ChunkCount chunks, every
// matrix padded to Lp = L rounded up to 8 rows (see chunkAreaElems):
//
//	W = 6*Lp*S_k + 3*Lp*S_v + 3*Lp^2 + Lp + S_k + Lp*gw + 2*S_k*S_v + (S_v/16)*(Lp + S_k)
//
// The pair's dq and dk end in its areas, and a last dispatch sums them
// over the value heads and sequences that share a q/k head. The forward
// takes nc areas of 6*Lp*S_k + 2*Lp*S_v + 3*Lp^2 + Lp + S_k + Lp*gw. A
// call needs H_v*n_seqs times this in one buffer, which the Backend owns
// and reuses. Head sizes the kernels do not take, and chunks longer than
// MaxChunkLen, give 0.
func ChunkScratchBytes(s gdn.Shape, L int) int {
	if checkChunk(s, gdn.Options{Algo: gdn.Chunk, ChunkLen: L}) != nil {
		return 0
	}
	g := chunkGeomFor(s, gdn.Options{ChunkLen: L})
	return 4 * g.nc * chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, true)
}

// checkChunk refuses what the chunk kernels do not take: head sizes (see
// Supported) and chunks longer than MaxChunkLen.
func checkChunk(s gdn.Shape, opt gdn.Options) error {
	if err := Supported(s.Sk, s.Sv); err != nil {
		return err
	}
	if s.T < 1 {
		return fmt.Errorf("metal: T = %d, want at least 1", s.T)
	}
	if L := min(opt.ChunkLength(), s.T); L > MaxChunkLen {
		return fmt.Errorf("metal: ChunkLen %d: the chunk kernels take chunks of at most %d tokens", L, MaxChunkLen)
	}
	return nil
}

// newChunkPlan lays out a call of the chunk kernels; the inputs are
// validated as newPlan validates them.
func newChunkPlan(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options, backward bool) (*plan, error) {
	s, cv, err := prepare(in, dy, dStates, opt, backward)
	if err != nil {
		return nil, err
	}
	if err := checkChunk(s, opt); err != nil {
		return nil, err
	}
	g := chunkGeomFor(s, opt)
	pairs := s.Hv * s.Seqs
	a := chunkArgs{
		Sk: int32(s.Sk), Sv: int32(s.Sv), Hk: int32(s.Hk), Hv: int32(s.Hv), T: int32(s.T),
		Seqs: int32(s.Seqs), SeqsQK: int32(s.SeqsQK), Gw: int32(s.GateWidth),
		Rep: int32(s.Hv / s.Hk), SeqRep: int32(s.Seqs / s.SeqsQK), Snapshots: int32(s.Snapshots),
		Scale: float32(opt.ScaleFor(s.Sk)),
		L:     int32(g.L), Lp: int32(g.Lp), Nc: int32(g.nc), Nce: int32(g.nce), E: int32(g.e),
		Vb: chunkRows, Nvb: int32(s.Sv / chunkRows),
	}
	if opt.Heads == gdn.Interleave {
		a.Interleave = 1
	}
	a.Q, a.K, a.V, a.G, a.Beta, a.State, a.DY = cv.q, cv.k, cv.v, cv.g, cv.beta, cv.state, cv.dy
	a.HasState, a.DStatesOff = cv.hasState, cv.dStatesOff
	p := &plan{shape: s, src: cv.src}

	pp := chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, backward)
	a.Pp = int32(pp)
	p.scrLen = pairs * g.nc * pp
	if backward {
		a.Bwd = 1
		lay := s.Layout()
		p.dstLen = lay.Total
		a.DqOff, a.DkOff, a.DvOff = int32(lay.DQ), int32(lay.DK), int32(lay.DV)
		a.DgOff, a.DbetaOff, a.DstateOff = int32(lay.DG), int32(lay.DBeta), int32(lay.DState)
	} else {
		p.dstLen = s.YLen() + s.StatesLen()
		a.YOff, a.SnapOff = 0, int32(s.YLen())
	}
	if err := p.checkIndices(); err != nil {
		return nil, err
	}

	threads := [3]int{maxSimdgroups * simdWidth, 1, 1}
	perChunk := [3]int{g.nc, s.Hv, s.Seqs}
	walk := [3]int{s.Sv / chunkRows, s.Hv, s.Seqs}
	shared := chunkShared(s.Sk, g.Lp)
	p.add("gdn_chunk_prep", &a, perChunk, threads, 0)
	p.add("gdn_chunk_fwd", &a, walk, threads, shared)
	if !backward {
		return p, nil
	}
	p.add("gdn_chunk_bwd", &a, walk, threads, shared)
	p.add("gdn_chunk_dpairs", &a, perChunk, threads, 4*g.Lp)
	p.add("gdn_chunk_red", &a, [3]int{s.T, s.Hk, s.SeqsQK}, [3]int{max(simdWidth, s.Sk), 1, 1}, 0)
	return p, nil
}
