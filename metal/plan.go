package metal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/gdnback/gdnback/gdn"
)

// headSizes are the key and value head sizes the kernels take.
var headSizes = [...]int{16, 32, 64, 128, 256}

// HeadSizes returns the key and value head sizes the kernels take.
func HeadSizes() []int { return slices.Clone(headSizes[:]) }

const (
	simdWidth = 32
	// rowsPerSimd is GDN_R in gdn.metal: rows of the state per simdgroup.
	rowsPerSimd = 4
	// maxSimdgroups bounds a threadgroup to 8 simdgroups (256 threads).
	maxSimdgroups = 8
	// maxShared is Metal's threadgroup memory limit in bytes.
	maxShared = 32 << 10
	// maxIndex bounds every element offset the kernels compute in int.
	maxIndex = math.MaxInt32
)

// layout is how the rows of one (head, seq) state are spread: nsg
// simdgroups of rowsPerSimd rows per threadgroup, nrb threadgroups.
type layout struct {
	nc       int // state columns per lane: ceil(S_k / 32)
	nsg, nrb int
	pw       int // partial sums per token and row block: 3*S_k + 1
}

// layoutFor chooses the row layout for head sizes sk and sv, which must be
// in HeadSizes(). The backward stages 2*nsg*pw floats in threadgroup memory,
// which bounds nsg at S_k = 256.
func layoutFor(sk, sv int) layout {
	l := layout{nc: (sk + simdWidth - 1) / simdWidth, pw: 3*sk + 1}
	l.nsg = min(maxSimdgroups, sv/rowsPerSimd)
	for l.nsg > 1 && 2*l.nsg*l.pw*4 > maxShared {
		l.nsg /= 2
	}
	l.nrb = sv / (rowsPerSimd * l.nsg)
	return l
}

// shared is the backward's threadgroup memory in bytes, a multiple of 16
// as Metal requires.
func (l layout) shared() int { return (2*l.nsg*l.pw*4 + 15) &^ 15 }

// checkHeadSize refuses a head size the kernels do not take.
func checkHeadSize(tensor string, dim int, name string, n int) error {
	if !slices.Contains(headSizes[:], n) {
		return fmt.Errorf("metal: %s: ne[%d] (%s) = %d is not a head size the kernels take (%v)", tensor, dim, name, n, headSizes)
	}
	return nil
}

// Supported returns nil if the kernels take head sizes sk and sv, or an
// error saying which does not fit.
func Supported(sk, sv int) error {
	if err := checkHeadSize("q", 0, "S_k", sk); err != nil {
		return err
	}
	return checkHeadSize("v", 0, "S_v", sv)
}

// scratch is the backward's scratch layout in elements, for every (head,
// seq) pair at once.
type scratch struct {
	ck, st, w, part, total int
}

func scratchFor(sk, sv, pairs, T, C int, l layout) scratch {
	nck := gdn.Segments(T, C)
	ss := sk * sv
	var s scratch
	s.ck = 0
	s.st = s.ck + nck*pairs*ss
	s.w = s.st + C*pairs*ss
	s.part = s.w + C*pairs*sv
	s.total = s.part + C*pairs*l.nrb*l.pw
	return s
}

// ScratchBytes is the backward's scratch in bytes for one (head, seq) pair
// at head sizes sk and sv, T tokens and segment length C (C < 1 or C > T
// means T, keeping every state):
//
//	4 * ((ceil(T/C) + C) * S_k*S_v  +  C * S_v  +  C * nrb * (3*S_k + 1))
//
// the checkpoints (the last of which carries dM between segments), the
// replayed segment's states, its v - u rows, and the per-token partial sums
// of dq, dk, dg and dbeta of each of the nrb row blocks (nrb = S_v/32, or
// S_v/16 at S_k 256, and 1 at S_v 16). A backward call over H_v heads and n_seqs sequences needs
// H_v*n_seqs times this in one buffer, which the Backend owns and reuses
// for every call, so a model's layers share one scratch. Head sizes the
// kernels do not take, and T < 1, give 0; T beyond gdn.MaxElems gives
// math.MaxInt (no call that long is taken).
func ScratchBytes(sk, sv, T, C int) int {
	if Supported(sk, sv) != nil || T < 1 {
		return 0
	}
	if T > gdn.MaxElems {
		return math.MaxInt
	}
	if C < 1 || C > T {
		C = T
	}
	return 4 * scratchFor(sk, sv, 1, T, C, layoutFor(sk, sv)).total
}

// view mirrors gdn_view in gdn.metal.
type view struct {
	Off int32
	Nb  [4]int32
}

// kargs mirrors gdn_args in gdn.metal, field for field; every field is 4
// bytes, so neither side pads.
type kargs struct {
	Sk, Sv, Hk, Hv, T, Seqs, SeqsQK, Gw int32
	Rep, SeqRep, Interleave, Snapshots  int32
	Scale                               float32
	Nsg, Nrb                            int32
	Q, K, V, G, Beta, State, DY         view
	HasState, DStatesOff                int32
	YOff, SnapOff                       int32
	DqOff, DkOff, DvOff, DgOff          int32
	DbetaOff, DstateOff                 int32
	C, Nck                              int32
	Seg, T0, T1                         int32
	Mode                                int32
	CkOff, StOff, WOff, PartOff, Pw     int32
}

// argsSize is sizeof(gdn_args), and argsStride separates the dispatches'
// args in the plan's args: a multiple of 256 bytes that holds gdn_args and
// gdn_chunk_args, which satisfies every Metal constant-buffer offset
// alignment (and is the size of the CUDA trampolines' args parameter).
var (
	argsSize   = binary.Size(kargs{})
	argsStride = (max(argsSize, binary.Size(chunkArgs{})) + 255) &^ 255
)

// dispatch is one grid launch of a plan; its args are the argLen bytes at
// argOff in the plan's args bytes.
type dispatch struct {
	kernel        string
	argOff        int
	argLen        int
	grid, threads [3]int
	shared        int
}

// plan is everything one call sends to the device: the packed inputs, the
// output and scratch sizes, and the dispatches in order.
type plan struct {
	shape    gdn.Shape
	src      []float32
	dstLen   int
	scrLen   int
	spares   bool // the slots of Backend.KeepSlots are outside the floats it writes
	args     []byte
	dispatch []dispatch
}

// add appends a dispatch of kernel with args a (a *kargs or a *chunkArgs).
func (p *plan) add(kernel string, a any, grid, threads [3]int, shared int) {
	off := len(p.args)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, a)
	p.args = append(p.args, b.Bytes()...)
	p.args = append(p.args, make([]byte, argsStride-b.Len())...)
	p.dispatch = append(p.dispatch, dispatch{kernel: kernel, argOff: off, argLen: b.Len(), grid: grid, threads: threads, shared: max(shared, 16)})
}

// packer gathers the inputs' backing arrays into one src buffer, each array
// once (so q, k and v as views of one fused buffer stay views of it).
type packer struct {
	src  []float32
	seen map[arrayKey]int
}

type arrayKey struct {
	p *float32
	n int
}

func (pk *packer) place(data []float32) int {
	if len(data) == 0 {
		return 0
	}
	key := arrayKey{&data[0], len(data)}
	if off, ok := pk.seen[key]; ok {
		return off
	}
	off := len(pk.src)
	pk.src = append(pk.src, data...)
	pk.seen[key] = off
	return off
}

// view places t's data and returns the kernel's view of it.
func (pk *packer) view(t gdn.Tensor[float32]) view {
	base := pk.place(t.Data)
	v := view{Off: int32(base + t.Off)}
	for d := range 4 {
		v.Nb[d] = int32(t.Nb[d])
	}
	return v
}

// callViews is a call's inputs as the kernels see them: the packed src
// buffer, each input's view into it, and where dStates starts (-1: none).
type callViews struct {
	src                         []float32
	q, k, v, g, beta, state, dy view
	hasState, dStatesOff        int32
}

// prepare validates a call (backward: with dy and dStates) and packs its
// inputs; dy as a view only with dyView (the chunk kernels lay out their
// own copy of it, chunkC).
func prepare(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options, backward, dyView bool) (gdn.Shape, callViews, error) {
	cv := callViews{dStatesOff: -1}
	s, err := in.Shape(opt)
	if err != nil {
		return s, cv, err
	}
	if err := Supported(s.Sk, s.Sv); err != nil {
		return s, cv, err
	}
	if backward {
		if err := gdn.CheckUpstream(s, dy, dStates); err != nil {
			return s, cv, err
		}
	}
	pk := &packer{seen: map[arrayKey]int{}}
	cv.q, cv.k, cv.v = pk.view(in.Q), pk.view(in.K), pk.view(in.V)
	cv.g, cv.beta = pk.view(in.G), pk.view(in.Beta)
	if in.State.Data != nil {
		cv.state, cv.hasState = pk.view(in.State), 1
	}
	if backward {
		if dyView {
			cv.dy = pk.view(dy)
		}
		if dStates != nil {
			// Placed whole, never shared with another input's array.
			cv.dStatesOff = int32(len(pk.src))
			pk.src = append(pk.src, dStates...)
		}
	}
	cv.src = pk.src
	return s, cv, nil
}

// planBuffer is one of a plan's buffers: what it holds and its floats.
type planBuffer struct {
	what string
	n    int
}

// buffers is the plan's three buffers.
func (p *plan) buffers() [3]planBuffer {
	return [3]planBuffer{{"the packed inputs", len(p.src)}, {"the outputs", p.dstLen}, {"the scratch", p.scrLen}}
}

// checkIndices refuses a plan whose buffers the kernels' 32-bit indices
// do not reach.
func (p *plan) checkIndices() error {
	for _, n := range p.buffers() {
		if n.n > maxIndex {
			return fmt.Errorf("metal: %s hold %d elements, more than the kernels' 32-bit indices reach (%d); split the call over sequences or heads", n.what, n.n, maxIndex)
		}
	}
	return nil
}

// checkDevice refuses a plan with a buffer of more than limit bytes, the
// device's largest (Metal's maxBufferLength), before anything runs.
func (p *plan) checkDevice(limit int) error {
	for _, n := range p.buffers() {
		if 4*n.n > limit {
			hint := "split the call over sequences or heads"
			if n.what == "the scratch" && p.spares {
				hint += ", or keep fewer slots (KeepSlots)"
			}
			return fmt.Errorf("metal: %s would take %d bytes, more than the device's largest buffer (maxBufferLength, %d bytes); %s", n.what, 4*n.n, limit, hint)
		}
	}
	return nil
}

// newPlan validates a call and lays it out. backward selects the backward
// (dy and dStates are its inputs); else the forward. The non-zero fields
// of a split replace the chunk kernels' own choice (tests).
func newPlan(in *gdn.Inputs[float32], dy gdn.Tensor[float32], dStates []float32, opt gdn.Options, backward bool, split ...chunkSplit) (*plan, error) {
	if opt.Algo == gdn.Chunk {
		var force chunkSplit
		if len(split) > 0 {
			force = split[0]
		}
		return newChunkPlan(in, dy, dStates, opt, backward, force, keepAt{})
	}
	s, cv, err := prepare(in, dy, dStates, opt, backward, true)
	if err != nil {
		return nil, err
	}
	l := layoutFor(s.Sk, s.Sv)
	C := opt.SegmentLength(s.T)
	nck := gdn.Segments(s.T, C)
	pairs := s.Hv * s.Seqs
	scale := opt.ScaleFor(s.Sk)

	p := &plan{shape: s, src: cv.src}
	a := kargs{
		Sk: int32(s.Sk), Sv: int32(s.Sv), Hk: int32(s.Hk), Hv: int32(s.Hv), T: int32(s.T),
		Seqs: int32(s.Seqs), SeqsQK: int32(s.SeqsQK), Gw: int32(s.GateWidth),
		Rep: int32(s.Hv / s.Hk), SeqRep: int32(s.Seqs / s.SeqsQK), Snapshots: int32(s.Snapshots),
		Scale: float32(scale), Nsg: int32(l.nsg), Nrb: int32(l.nrb), DStatesOff: -1,
		C: int32(C), Nck: int32(nck), Pw: int32(l.pw),
	}
	if opt.Heads == gdn.Interleave {
		a.Interleave = 1
	}
	a.Q, a.K, a.V, a.G, a.Beta, a.State, a.DY = cv.q, cv.k, cv.v, cv.g, cv.beta, cv.state, cv.dy
	a.HasState, a.DStatesOff = cv.hasState, cv.dStatesOff

	sc := scratchFor(s.Sk, s.Sv, pairs, s.T, C, l)
	if backward {
		lay := s.Layout()
		p.dstLen = lay.Total
		a.DqOff, a.DkOff, a.DvOff = int32(lay.DQ), int32(lay.DK), int32(lay.DV)
		a.DgOff, a.DbetaOff, a.DstateOff = int32(lay.DG), int32(lay.DBeta), int32(lay.DState)
		p.scrLen = sc.total
		a.CkOff, a.StOff, a.WOff, a.PartOff = int32(sc.ck), int32(sc.st), int32(sc.w), int32(sc.part)
	} else {
		p.dstLen = s.YLen() + s.StatesLen()
		a.YOff, a.SnapOff = 0, int32(s.YLen())
	}
	if err := p.checkIndices(); err != nil {
		return nil, err
	}

	threads := [3]int{l.nsg * simdWidth, 1, 1}
	rows := [3]int{l.nrb, s.Hv, s.Seqs}
	scan := fmt.Sprintf("gdn_scan_nc%d", l.nc)
	if !backward {
		a.Mode = 0
		p.add(scan, &a, rows, threads, 0)
		return p, nil
	}
	a.Mode = 1
	p.add(scan, &a, rows, threads, 0)
	seg := fmt.Sprintf("gdn_bwd_seg_nc%d", l.nc)
	redThreads := [3]int{max(simdWidth, s.Sk), 1, 1}
	for c := nck - 1; c >= 0; c-- {
		a.Seg, a.T0, a.T1 = int32(c), int32(c*C), int32(min(s.T, (c+1)*C))
		p.add(seg, &a, rows, threads, l.shared())
		p.add("gdn_bwd_red", &a, [3]int{int(a.T1 - a.T0), s.Hv, s.Seqs}, redThreads, 0)
	}
	return p, nil
}
