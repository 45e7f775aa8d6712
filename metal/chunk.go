package metal

import (
	"fmt"

	"github.com/gdnback/gdnback/gdn"
)

// The chunkwise (WY) kernels of gdn.metal (gdn_chunk_prep, gdn_chunk_fwd,
// gdn_chunk_bwd, gdn_chunk_dsolve, gdn_chunk_dpairs, gdn_chunk_red): gdn's Chunk algorithm
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
	Hq0, Hkg                            int32
	Q, K, V, G, Beta, State, DY         view
	HasState                            int32
	DStatesOff                          int32
	YOff, SnapOff                       int32
	DqOff, DkOff, DvOff, DgOff          int32
	DbetaOff, DstateOff                 int32
	Pp, Bwd                             int32
	COff                                int32
	Kept, Kres, Aoff                    int32
}

// keepMode is what a call of the chunk kernels does with each chunk's A,
// P and X (kept in gdn.metal's args).
type keepMode int32

const (
	keepNone     keepMode = iota // in the areas, formed by every pass's prep
	keepForward                  // the forward forms them in the kept part of the scratch
	keepBackward                 // the backward reads them there
)

// keepAt places a chunk call's kept matrices and areas in the scratch.
type keepAt struct {
	mode keepMode
	slot int // the first float of the call's A, P and X (keepForward, keepBackward)
	// room is the floats of a slot of Backend.KeepSlots; 0 without slots,
	// where a kept call's matrices start the scratch and its areas follow
	// them, and every other call's areas start it.
	room int
	// With slots: every call's areas start at areas, after the slots, and
	// its scratch is at least least floats, KeepSlots' size.
	areas, least int
}

// MaxChunkLen is the longest chunk the chunk kernels take (GDN_LMAX in
// gdn.metal): a chunk's rows of the state walk stay in threadgroup memory.
const MaxChunkLen = 64

// chunkRows is vb in gdn.metal, the value rows of the state that one
// threadgroup of the state walk (gdn_chunk_fwd, gdn_chunk_bwd) holds: 16,
// or 8 where 16 would give a walk dispatch fewer than chunkWalkGroups
// threadgroups (see chunkSplitFor). chunkRowsMin is the smaller, which
// sizes each chunk area's block shares.
const chunkRows, chunkRowsMin = 16, 8

// chunkWalkGroups: a walk dispatch with blocks of 16 rows and fewer
// threadgroups than this takes blocks of 8, twice the threadgroups. On an
// NVIDIA H200 (132 multiprocessors, three walk threadgroups each) at S
// 128, T 8192, with vb still a run-time value of the walks: with 24 value
// heads, 192 threadgroups of 16 rows took 30.4 ms forward + backward and
// 384 of 8 rows 25.3 ms; with 48, 384 of 16 rows took 42.2 ms and 768 of
// 8 rows 51.1 ms.
const chunkWalkGroups = 256

// ChunkScratchLimit is the most scratch, in bytes, that one call of the
// chunk kernels holds where the value heads of one q/k head fit in it:
// a call whose areas for every (head, seq) pair would need more runs its
// value heads in groups of whole q/k heads, as many as it takes and as
// even as they can be, one group's dispatches after another's in one
// scratch. Groups cost time: each group's state walks run alone, at a
// fraction of the threadgroups a walk of every value head has. At the 27B
// shape (S 128, H_k 16, H_v 48, T 8192) the scalar gate's backward areas
// take 2.21 GiB, under this limit: one group. With their areas at 2.59 GiB
// (before dd and du took the places of kd and q), one group's backward
// took 14.39 ms on an H100 where two groups of 24 value heads (the limit
// at 2 GiB, the areas then 2.96 GiB) took 16.64
// (docs/h200/scratch-groups-ab.log). KDA's areas take 2.02 GiB (its
// backward's k, q and decays share places with dL/dM and the state, see
// chunkAreaElems), one group too.
const ChunkScratchLimit = 21 << 27 // 2.625 GiB

// chunkSplit is how a call runs its value heads: ng groups of the value
// heads of hkg q/k heads (the last group may have fewer), each walk block
// vb value rows.
type chunkSplit struct {
	hkg, ng, vb int
}

// chunkSplitFor splits a call of shape s with chunk geometry g (the
// backward's areas, or the forward's) under ChunkScratchLimit.
func chunkSplitFor(s gdn.Shape, g chunkGeom, backward bool) chunkSplit {
	return chunkSplitElems(s, g, chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, backward))
}

// chunkSplitElems is chunkSplitFor for areas of pp elements.
func chunkSplitElems(s gdn.Shape, g chunkGeom, pp int) chunkSplit {
	rep := s.Hv / s.Hk
	perHead := int64(4*g.nc*pp) * int64(rep*s.Seqs)
	hkg := int(max(1, min(int64(s.Hk), ChunkScratchLimit/perHead)))
	ng := (s.Hk + hkg - 1) / hkg
	hkg = (s.Hk + ng - 1) / ng // the same number of groups, as even as they can be
	sp := chunkSplit{hkg: hkg, ng: (s.Hk + hkg - 1) / hkg, vb: chunkRows}
	if s.Sv/chunkRows*hkg*rep*s.Seqs < chunkWalkGroups {
		sp.vb = chunkRowsMin
	}
	return sp
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

// chunkAreaElems is the elements of one chunk's area of the scratch
// (gdn_ca in gdn.metal), with Lp = L rounded up to 8: six [Lp][S_k] (k, q,
// kd, kl, -W', qd), two [Lp][S_v] (v; U' then v - u), three [Lp][Lp] (A, P,
// R), beta and ell [Lp], lam [S_k] and the decays [Lp][gw]; the backward's
// areas add dd, in kd's place, grown to max(Lp S_k, Lp S_v) (prep's kd has
// no reader after wn = X kd), the state before the chunk and dL/dM after it
// [S_v][S_k], each state block's share of dlam [S_v/8][S_k] (room for
// blocks of 8 rows), and du, and have no place of v's own: prep's v goes
// where the walks later write the state, du where the scalar gate's q or
// KDA's kl were (grown to max(Lp S_k, Lp S_v)). The scalar gate's backward
// holds no kl, which is k with its rows scaled by ell; its v, state, dL/dM
// and then the pair terms' q (gathered from the inputs again) share
// max(2 S_v S_k, Lp S_k, Lp S_v). KDA's backward shares two places (the
// pair terms gather k, q and exp(g) from the inputs again after reading
// dL/dM and the state): k and q, then dL/dM, in max(2 Lp S_k, S_v S_k); the
// decays with v after them, then the state, in max(Lp gw + max(Lp S_v, 3
// (Lp/8) S_k), S_v S_k) (the pair terms' block sums after the decays). The
// backward's c = scale dy is not in the areas but in the inputs (chunkC).
func chunkAreaElems(sk, sv, gw, Lp int, backward bool) int {
	n := 6*Lp*sk + 2*Lp*sv + 3*Lp*Lp + 2*Lp + sk + Lp*gw
	if !backward {
		return n
	}
	lku := max(Lp*sk, Lp*sv) // dd in kd's place; du in q's (scalar) or kl's (KDA)
	n += lku - Lp*sk + 2*sk*sv + (sv/chunkRowsMin)*sk - Lp*sv
	if gw == 1 {
		return n - Lp*sk + (lku - Lp*sk) - 2*sk*sv + max(2*sk*sv, lku)
	}
	return n - (2*Lp*sk + sv*sk) + max(2*Lp*sk, sv*sk) + (lku - Lp*sk) - (Lp*gw + sv*sk) +
		max(Lp*gw+max(Lp*sv, 3*(Lp/8)*sk), sv*sk)
}

// chunkKeptElems is the floats of one chunk's A, P and X, which a kept
// call holds outside its areas (keepForward, keepBackward).
func chunkKeptElems(Lp int) int { return 3 * Lp * Lp }

// ChunkKeptBytes is the bytes of A, P and X that ForwardKeep keeps for a
// call of shape s with chunk length L, every (head, seq) and chunk:
// 4 H_v n_seqs nc 3 Lp^2, with nc and Lp as ChunkScratchBytes has them
// (288 MiB at the 27B shape, T 8192, L 64); 0 where ChunkScratchBytes is.
func ChunkKeptBytes(s gdn.Shape, L int) int {
	if checkChunk(s, gdn.Options{Algo: gdn.Chunk, ChunkLen: L}) != nil {
		return 0
	}
	return 4 * chunkKeptLen(s, chunkGeomFor(s, gdn.Options{ChunkLen: L}))
}

// chunkKeptLen is the floats of A, P and X a kept call at s and g holds.
func chunkKeptLen(s gdn.Shape, g chunkGeom) int { return s.Hv * s.Seqs * g.nc * chunkKeptElems(g.Lp) }

// chunkGroups is the groups of a call at s and g with areas of pp floats
// (chunkSplitElems), force's non-zero hkg and ng in place of that choice,
// and the floats of one group's areas.
func chunkGroups(s gdn.Shape, g chunkGeom, pp int, force chunkSplit) (chunkSplit, int) {
	sp := chunkSplitElems(s, g, pp)
	if force.hkg != 0 {
		sp.hkg, sp.ng = force.hkg, force.ng
	}
	return sp, sp.hkg * (s.Hv / s.Hk) * s.Seqs * g.nc * pp
}

// chunkKeptGroups is chunkGroups for a kept call, forward or backward: the
// backward's areas without A, P and X.
func chunkKeptGroups(s gdn.Shape, g chunkGeom, force chunkSplit) (chunkSplit, int) {
	return chunkGroups(s, g, chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, true)-chunkKeptElems(g.Lp), force)
}

// chunkC appends to src the backward's c = scale dy as the chunk kernels
// read it (gdn_chunk_c in gdn.metal): [seqs][H_v][nc][Lp][S_v], chunk c's
// rows its tokens' scale dy, zero from its n tokens to Lp, each element
// rounded as the kernels' scale*dy, at an even offset (8-byte aligned
// tiles). It returns src and the offset. dy is the caller's, read only.
func chunkC(src []float32, dy gdn.Tensor[float32], s gdn.Shape, g chunkGeom, scale float32) ([]float32, int) {
	if len(src)%2 != 0 {
		src = append(src, 0)
	}
	off := len(src)
	src = append(src, make([]float32, s.Seqs*s.Hv*g.nc*g.Lp*s.Sv)...)
	c := src[off:]
	for sq := range s.Seqs {
		for h := range s.Hv {
			for ch := range g.nc {
				t0, t1 := chunkSpan(g, ch)
				base := ((sq*s.Hv+h)*g.nc + ch) * g.Lp * s.Sv
				for t := t0; t < t1; t++ {
					row := c[base+(t-t0)*s.Sv : base+(t-t0+1)*s.Sv]
					at := dy.Off + h*dy.Nb[1] + t*dy.Nb[2] + sq*dy.Nb[3]
					for j := range row {
						row[j] = scale * dy.Data[at+j*dy.Nb[0]]
					}
				}
			}
		}
	}
	return src, off
}

// chunkSpan is chunk c's tokens [t0, t1), as gdn_chunk_span in gdn.metal.
func chunkSpan(g chunkGeom, c int) (int, int) {
	if c < g.nce {
		return c * g.L, min(g.e, (c+1)*g.L)
	}
	t := g.e + (c - g.nce)
	return t, t + 1
}

// chunkShared is the threadgroup memory in bytes of the state walk with
// blocks of vb rows: vb rows of M (or dM), padded by chunkPadK elements,
// and two [Lp][vb] blocks of row stride chunkLB (GDN_PADK and GDN_LB in
// gdn.metal).
func chunkShared(sk, Lp, vb int) int {
	return 4 * (vb*(sk+chunkPadK) + 2*Lp*chunkLB)
}

// chunkPrepShared is gdn_chunk_prep's threadgroup memory in bytes: the
// scalar gate's decays a_r, Λ_r, Γ_{n-1,s} and the two tile factors of
// its pairs' decays, Lp floats each, and the tiles' T_RS, Lp floats
// ([Lp/8][8]); KDA's (gw > 1) column factors, Lp - 8 rows of stride sk +
// chunkPadK, where they fit in chunkKColsMax bytes (GDN_KCOLS_TG in
// gdn.metal), else the same as the scalar gate's.
func chunkPrepShared(sk, Lp, gw int) int {
	n := 4 * 6 * Lp
	if gw > 1 && Lp > 8 && 4*(Lp-8)*(sk+chunkPadK) <= chunkKColsMax {
		n = max(n, 4*(Lp-8)*(sk+chunkPadK))
	}
	return n
}

// chunkKColsMax is the threadgroup memory in bytes that KDA prep's column
// factors may take: Apple's 32 KiB a threadgroup.
const chunkKColsMax = 32 << 10

// chunkPairsShared is gdn_chunk_dpairs' threadgroup memory in bytes: the
// scalar gate's E_u,-1, Λ_r and Γ_{n-1,s}, Lp floats each, then E_u,-1 and
// the rows' running sums of E ([Lp][Lp + 1]), or where more, the staging
// buffers of its first products (chunkStageShared), which the same memory
// holds before them.
func chunkPairsShared(Lp int) int {
	return max(4*3*Lp, 4*(Lp+Lp*(Lp+1)), chunkStageShared)
}

// chunkPairsSharedKDA is gdn_chunk_dpairs_kda's threadgroup memory in
// bytes: five 8x8 tiles and K̂'s [MaxChunkLen][8] rows for each simdgroup
// (gdn_dpairs_kda in gdn.metal), or the staging buffers where more.
const chunkPairsSharedKDA = max(4*(5*64+8*MaxChunkLen)*maxSimdgroups, chunkStageShared)

// chunkStageShared is gdn_gemm_tg's two staging buffers in bytes
// (GDN_STAGE floats each: a [64][16] slice of A and a [16][64] one of B,
// rows padded by 4).
const chunkStageShared = 4 * 2 * (64*(16+4) + 16*(64+4))

// chunkRedRows is GDN_RED_ROWS in gdn.metal: the tokens of one
// gdn_chunk_red threadgroup, whose elements (token, column) go GDN_GB (4)
// a thread.
const chunkRedRows = 8

// chunkRedThreads is gdn_chunk_red's threads a threadgroup: one for every
// four of its chunkRedRows x sk elements, in whole simdgroups, at most
// maxSimdgroups of them (256 threads at sk 128; 32 at sk 16).
func chunkRedThreads(sk int) int {
	n := (chunkRedRows*sk/4 + simdWidth - 1) / simdWidth * simdWidth
	return min(maxSimdgroups*simdWidth, max(simdWidth, n))
}

// chunkPadK and chunkLB are GDN_PADK and GDN_LB in gdn.metal.
const chunkPadK, chunkLB = 4, 24

// ChunkScratchBytes is the scratch in bytes of the chunk kernels'
// backward for one (head, seq) pair of a call of shape s (head sizes, T,
// gate width, snapshots) with chunk length L (0 means
// gdn.DefaultChunkLen; L is at most T); a call holds ChunkScratchPairs
// pairs' at once:
//
//	4 * nc * W
//
// an area of W elements for each of the nc = gdn.ChunkCount chunks, every
// matrix padded to Lp = L rounded up to 8 rows (see chunkAreaElems); for
// the scalar gate (gw 1)
//
//	W = 5*Lp*S_k + 3*Lp*S_v + 3*Lp^2 + 3*Lp + S_k + 2*S_k*S_v + (S_v/8)*S_k
//
// and for KDA (gw = S_k)
//
//	W = 4*Lp*S_k + max(2*Lp*S_k, S_v*S_k) + 3*Lp*S_v + 3*Lp^2 + 2*Lp + S_k
//	    + max(Lp*gw + 3*(Lp/8)*S_k, S_v*S_k) + (S_v/8)*S_k
//
// The pair's dq and dk end in its areas, and a last dispatch sums them
// over the value heads and sequences that share a q/k head. The forward
// takes nc areas of 6*Lp*S_k + 2*Lp*S_v + 3*Lp^2 + 2*Lp + S_k + Lp*gw. A
// call needs ChunkScratchPairs times this in one buffer, which the
// Backend owns and reuses. Head sizes the kernels do not take, chunks
// longer than MaxChunkLen and shapes that gdn's Shape.Check refuses (an
// H_k of 0, say) give 0.
func ChunkScratchBytes(s gdn.Shape, L int) int {
	if checkChunk(s, gdn.Options{Algo: gdn.Chunk, ChunkLen: L}) != nil {
		return 0
	}
	g := chunkGeomFor(s, gdn.Options{ChunkLen: L})
	return 4 * g.nc * chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, true)
}

// ChunkScratchPairs is the number of (head, seq) pairs whose areas the
// chunk kernels' backward holds at once for a call of shape s with chunk
// length L: H_v*n_seqs, or where that would take more than
// ChunkScratchLimit bytes, the pairs of the largest group of value heads
// (the value heads of whole q/k heads, times n_seqs). 0 where
// ChunkScratchBytes is 0.
func ChunkScratchPairs(s gdn.Shape, L int) int {
	if checkChunk(s, gdn.Options{Algo: gdn.Chunk, ChunkLen: L}) != nil {
		return 0
	}
	sp := chunkSplitFor(s, chunkGeomFor(s, gdn.Options{ChunkLen: L}), true)
	return sp.hkg * (s.Hv / s.Hk) * s.Seqs
}

// checkChunk refuses what the chunk kernels do not take: a shape that
// gdn's Shape.Check refuses (the sizing functions take hand-built shapes),
// head sizes (see Supported) and chunks longer than MaxChunkLen.
func checkChunk(s gdn.Shape, opt gdn.Options) error {
	if err := s.Check(); err != nil {
		return fmt.Errorf("metal: %w", err)
	}
	if err := Supported(s.Sk, s.Sv); err != nil {
		return err
	}
	if L := min(opt.ChunkLength(), s.T); L > MaxChunkLen {
		return fmt.Errorf("metal: ChunkLen %d: the chunk kernels take chunks of at most %d tokens", L, MaxChunkLen)
	}
	return nil
}

// newChunkPlan lays out a call of the chunk kernels; the inputs are
// validated as newPlan validates them.
// The non-zero fields of force replace chunkSplitFor's choice (tests).
//
// at.mode says where A, P and X go: keepNone, in every pass's areas; else
// in a slot of the scratch (at.slot on), one [3][Lp][Lp] block for every
// (head, seq) and chunk, which the forward (keepForward) writes and the
// backward (keepBackward) reads and overwrites. Both then take the
// backward's groups (so that a group's blocks are the same in both) and
// areas without A, P and X; the forward's scratch is as long as the
// backward's, so that the backward does not grow it (a grown scratch is a
// new one). Where Backend.KeepSlots set slots (at.room > 0), every chunk
// call's areas follow them all, and its scratch is at least at.least.
func newChunkPlan(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options, backward bool, force chunkSplit, at keepAt) (*plan, error) {
	// dy is read as c = scale dy, laid out below, not as a view.
	s, cv, err := prepare(in, dy, dStates, opt, backward, false)
	if err != nil {
		return nil, err
	}
	if err := checkChunk(s, opt); err != nil {
		return nil, err
	}
	g := chunkGeomFor(s, opt)
	a := chunkArgs{
		Sk: int32(s.Sk), Sv: int32(s.Sv), Hk: int32(s.Hk), Hv: int32(s.Hv), T: int32(s.T),
		Seqs: int32(s.Seqs), SeqsQK: int32(s.SeqsQK), Gw: int32(s.GateWidth),
		Rep: int32(s.Hv / s.Hk), SeqRep: int32(s.Seqs / s.SeqsQK), Snapshots: int32(s.Snapshots),
		Scale: float32(opt.ScaleFor(s.Sk)),
		L:     int32(g.L), Lp: int32(g.Lp), Nc: int32(g.nc), Nce: int32(g.nce), E: int32(g.e),
	}
	if opt.Heads == gdn.Interleave {
		a.Interleave = 1
	}
	a.Q, a.K, a.V, a.G, a.Beta, a.State = cv.q, cv.k, cv.v, cv.g, cv.beta, cv.state
	a.HasState, a.DStatesOff = cv.hasState, cv.dStatesOff
	if backward {
		var off int
		cv.src, off = chunkC(cv.src, dy, s, g, a.Scale)
		a.COff = int32(off)
	}
	p := &plan{shape: s, src: cv.src}

	pp := chunkAreaElems(s.Sk, s.Sv, s.GateWidth, g.Lp, backward)
	// a group's areas: a kept call's are the backward's (the longer) in
	// both passes, without A, P and X
	sp, areas := chunkGroups(s, g, pp, force)
	if at.mode != keepNone {
		pp -= chunkKeptElems(g.Lp)
		sp, areas = chunkKeptGroups(s, g, force)
		a.Kept = int32(at.mode)
	}
	if force.vb != 0 {
		sp.vb = force.vb
	}
	rep := s.Hv / s.Hk
	a.Pp = int32(pp)
	a.Vb, a.Nvb = int32(sp.vb), int32(s.Sv/sp.vb)
	// the kept blocks of one q/k head's value heads, every sequence
	keptPerHead := rep * s.Seqs * g.nc * chunkKeptElems(g.Lp)
	switch {
	case at.room > 0: // every call's areas after the slots
		a.Aoff = int32(at.areas)
	case at.mode != keepNone: // after this call's matrices
		a.Aoff = int32(s.Hk * keptPerHead)
	}
	p.scrLen = int(a.Aoff) + areas
	if at.room > 0 {
		p.scrLen = max(p.scrLen, at.least)
		p.spares = true
	}
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

	// Each group's dispatches, one group after another in the one scratch.
	threads := [3]int{maxSimdgroups * simdWidth, 1, 1}
	shared := chunkShared(s.Sk, g.Lp, sp.vb)
	for hq0 := 0; hq0 < s.Hk; hq0 += sp.hkg {
		ga := a
		ga.Hq0, ga.Hkg = int32(hq0), int32(min(sp.hkg, s.Hk-hq0))
		if at.mode != keepNone {
			ga.Kres = int32(at.slot + hq0*keptPerHead)
		}
		hv := int(ga.Hkg) * rep
		perChunk := [3]int{g.nc, hv, s.Seqs}
		walk := [3]int{s.Sv / sp.vb, hv, s.Seqs}
		// Prep and the forward walk are one instance per pass (the
		// backward's with a b: gdn_chunk_prepb, gdn_chunk_fwdb_vb*).
		if !backward {
			p.add("gdn_chunk_prep", &ga, perChunk, threads, chunkPrepShared(s.Sk, g.Lp, s.GateWidth))
			p.add(fmt.Sprintf("gdn_chunk_fwd_vb%d", sp.vb), &ga, walk, threads, shared)
		} else {
			p.add("gdn_chunk_prepb", &ga, perChunk, threads, chunkPrepShared(s.Sk, g.Lp, s.GateWidth))
			p.add(fmt.Sprintf("gdn_chunk_fwdb_vb%d", sp.vb), &ga, walk, threads, shared)
			p.add(fmt.Sprintf("gdn_chunk_bwd_vb%d", sp.vb), &ga, walk, threads, shared)
			if s.GateWidth > 1 { // the scalar gate's pair terms run it first
				p.add("gdn_chunk_dsolve", &ga, perChunk, threads, 0)
			}
			if s.GateWidth > 1 {
				p.add("gdn_chunk_dpairs_kda", &ga, perChunk, threads, chunkPairsSharedKDA)
			} else {
				p.add("gdn_chunk_dpairs", &ga, perChunk, threads, chunkPairsShared(g.Lp))
			}
			p.add("gdn_chunk_red", &ga, [3]int{(s.T + chunkRedRows - 1) / chunkRedRows, int(ga.Hkg), s.SeqsQK}, [3]int{chunkRedThreads(s.Sk), 1, 1}, 0)
		}
	}
	return p, nil
}
