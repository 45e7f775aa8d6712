package metal

import "github.com/gdnback/gdnback/gdn"

// The chunkwise (WY) kernels of gdn.metal (gdn_chunk_fwd, gdn_chunk_bwd,
// gdn_chunk_red): gdn's Chunk algorithm on the device.

// chunkArgs mirrors gdn_chunk_args in gdn.metal, field for field.
type chunkArgs struct {
	Sk, Sv, Hk, Hv, T, Seqs, SeqsQK, Gw int32
	Rep, SeqRep, Interleave, Snapshots  int32
	Scale                               float32
	L, Lp                               int32
	Nc                                  int32
	Nce, E                              int32
	Nsg                                 int32
	Q, K, V, G, Beta, State, DY         view
	HasState                            int32
	DStatesOff                          int32
	YOff, SnapOff                       int32
	DqOff, DkOff, DvOff, DgOff          int32
	DbetaOff, DstateOff                 int32
	Pp, BndOff, PdqOff, PdkOff          int32
}

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

// chunkWorkElems is the elements of one (head, seq)'s work area of the
// chunk kernels (gdn_cw in gdn.metal): 11 [Lp][S_k] rows (q, k, kd, qd, kl,
// dkd, dqd, w, dk, dq and the per-channel gate gradient), 7 [Lp][S_v] (v,
// d, u, y, c, dd, du), 4 [Lp][Lp] (A, P, dA, dP), the decays [Lp][gw],
// beta [Lp], lam and dlam [S_k], and the state and its gradient [S_v][S_k].
func chunkWorkElems(sk, sv, gw, Lp int) int {
	return 11*Lp*sk + 7*Lp*sv + 4*Lp*Lp + Lp*gw + Lp + 2*sk + 2*sk*sv
}

// chunkSimdgroups is the simdgroups per threadgroup of the chunk kernels:
// S/32 for the larger head size S, at least 2 and at most 8 (256 threads,
// one per key channel at S_k = 256).
func chunkSimdgroups(sk, sv int) int { return min(8, max(2, max(sk, sv)/simdWidth)) }

// ChunkScratchBytes is the scratch in bytes of the chunk kernels'
// backward for one (head, seq) pair of a call of shape s (head sizes, T,
// gate width, snapshots) with chunk length L (0 means
// gdn.DefaultChunkLen; L is at most T):
//
//	4 * (W  +  nc * S_k*S_v  +  2 * T * S_k)
//
// the work area W of one chunk (every matrix padded to Lp = L rounded up
// to 8 rows: 11*Lp*S_k + 7*Lp*S_v + 4*Lp^2 + Lp*gw + Lp + 2*S_k +
// 2*S_k*S_v), the state before each of the nc = gdn.ChunkCount chunks,
// and the pair's dq and dk per token, which a last dispatch sums over the
// value heads and sequences that share a q/k head. The forward takes W
// only. A call needs H_v*n_seqs times this in one buffer, which the
// Backend owns and reuses. Head sizes the kernels do not take give 0.
func ChunkScratchBytes(s gdn.Shape, L int) int {
	if Supported(s.Sk, s.Sv) != nil || s.T < 1 {
		return 0
	}
	g := chunkGeomFor(s, gdn.Options{ChunkLen: L})
	return 4 * (chunkWorkElems(s.Sk, s.Sv, s.GateWidth, g.Lp) + g.nc*s.Sk*s.Sv + 2*s.T*s.Sk)
}

// newChunkPlan lays out a call of the chunk kernels; the inputs are
// validated as newPlan validates them.
func newChunkPlan(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options, backward bool) (*plan, error) {
	s, cv, err := prepare(in, dy, dStates, opt, backward)
	if err != nil {
		return nil, err
	}
	g := chunkGeomFor(s, opt)
	pairs := s.Hv * s.Seqs
	nsg := chunkSimdgroups(s.Sk, s.Sv)
	a := chunkArgs{
		Sk: int32(s.Sk), Sv: int32(s.Sv), Hk: int32(s.Hk), Hv: int32(s.Hv), T: int32(s.T),
		Seqs: int32(s.Seqs), SeqsQK: int32(s.SeqsQK), Gw: int32(s.GateWidth),
		Rep: int32(s.Hv / s.Hk), SeqRep: int32(s.Seqs / s.SeqsQK), Snapshots: int32(s.Snapshots),
		Scale: float32(opt.ScaleFor(s.Sk)),
		L:     int32(g.L), Lp: int32(g.Lp), Nc: int32(g.nc), Nce: int32(g.nce), E: int32(g.e),
		Nsg: int32(nsg),
	}
	if opt.Heads == gdn.Interleave {
		a.Interleave = 1
	}
	a.Q, a.K, a.V, a.G, a.Beta, a.State, a.DY = cv.q, cv.k, cv.v, cv.g, cv.beta, cv.state, cv.dy
	a.HasState, a.DStatesOff = cv.hasState, cv.dStatesOff
	p := &plan{shape: s, src: cv.src}

	pp := chunkWorkElems(s.Sk, s.Sv, s.GateWidth, g.Lp)
	a.Pp = int32(pp)
	p.scrLen = pairs * pp
	if backward {
		lay := s.Layout()
		p.dstLen = lay.Total
		a.DqOff, a.DkOff, a.DvOff = int32(lay.DQ), int32(lay.DK), int32(lay.DV)
		a.DgOff, a.DbetaOff, a.DstateOff = int32(lay.DG), int32(lay.DBeta), int32(lay.DState)
		a.BndOff = int32(p.scrLen)
		p.scrLen += pairs * g.nc * s.Sk * s.Sv
		a.PdqOff = int32(p.scrLen)
		p.scrLen += pairs * s.T * s.Sk
		a.PdkOff = int32(p.scrLen)
		p.scrLen += pairs * s.T * s.Sk
	} else {
		p.dstLen = s.YLen() + s.StatesLen()
		a.YOff, a.SnapOff = 0, int32(s.YLen())
	}
	if err := p.checkIndices(); err != nil {
		return nil, err
	}

	threads := [3]int{nsg * simdWidth, 1, 1}
	grid := [3]int{1, s.Hv, s.Seqs}
	if !backward {
		p.add("gdn_chunk_fwd", &a, grid, threads, 0)
		return p, nil
	}
	p.add("gdn_chunk_bwd", &a, grid, threads, 0)
	p.add("gdn_chunk_red", &a, [3]int{s.T, s.Hk, s.SeqsQK}, [3]int{max(simdWidth, s.Sk), 1, 1}, 0)
	return p, nil
}
