package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/gdnback/gdnback/gdn"
)

func cmdGrad(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("grad", `usage: gdn grad -in case.npz -out result.npz [-heads interleave|tile] [-precision f64|f32] [-backend cpu|metal] [-C n] [-algo recurrent|chunk] [-L n]

Reads tensors in fla's PyTorch layout from an .npz file (numpy.savez), runs
the gated delta rule forward and backward, and writes the outputs and the
gradients of L = sum(o * do) + sum(ht * dht) in the same layout, float64.

Input arrays (float32 or float64; other arrays in the file are ignored):
  q, k      [B, T, H, K]
  v         [B, T, HV, V]       HV a multiple of H
  g         [B, T, HV]          log gate (a = exp(g)); [B, T, HV, K] for KDA
  beta      [B, T, HV]
  do        [B, T, HV, V]       dL/do
  h0        [B, HV, K, V]       initial state (optional; zeros)
  dht       [B, HV, K, V]       dL/dht (optional; zeros)
  scale     0-d                 (optional; 1/sqrt(K))
Output arrays: o [B,T,HV,V], ht [B,HV,K,V], dq, dk [B,T,H,K], dv [B,T,HV,V],
dg (g's shape), dbeta [B,T,HV], dh0 [B,HV,K,V].

Value head h reads q/k head h/(HV/H) under -heads interleave (fla's and
Hugging Face's mapping, the default) and h mod H under -heads tile (ggml's).
The input file is never modified; the output is written whole (to a
temporary file in the same directory, then renamed) or not at all.
-algo chunk computes with the chunkwise (WY) algorithm, chunks of -L
tokens: the CPU reference, or with -backend metal the chunk kernels of
gdn.metal.
Every .npy header is checked before any data is read, and the memory the
run needs is counted from the declared shapes: a run that needs more than
-mem is refused, naming what it needs. NaN and Inf are computed with and
reported on stderr.

Example:
  gdn grad -in case.npz -out result.npz
`, stderr)
	in := fs.String("in", "", "input .npz `file` (required)")
	out := fs.String("out", "", "output .npz `file` (required; replaced whole)")
	heads := fs.String("heads", "interleave", "head mapping when HV > H: interleave (fla) or tile (ggml)")
	precision := fs.String("precision", "", "arithmetic: f64 or f32 (default f64 on cpu, f32 on other backends)")
	backend := fs.String("backend", "cpu", "backend: "+gradBackendNames)
	segment := fs.Int("C", 0, "checkpoint segment length `n` of the backward (0: ceil(sqrt(T)))")
	af := addAlgoFlags(fs, false, "")
	mem := byteSize(defaultMem())
	fs.Var(&mem, "mem", "memory `limit` of the run (its arrays, outputs and scratch, counted from the\ndeclared shapes before anything is read), e.g. 512MiB or 64GiB; by default half\nthe machine's memory")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gdn grad: "+format+"\n", a...)
		return 1
	}
	if *in == "" || *out == "" {
		fmt.Fprintln(stderr, "gdn grad: -in and -out are required (see gdn grad -h)")
		return 2
	}
	hm, err := gdn.ParseHeadMap(*heads)
	if err != nil {
		fmt.Fprintf(stderr, "gdn grad: -heads: %q: want interleave or tile\n", *heads)
		return 2
	}
	if *segment < 0 {
		fmt.Fprintf(stderr, "gdn grad: -C %d: want 0 (ceil(sqrt(T))) or a positive segment length\n", *segment)
		return 2
	}
	algos, err := af.algos()
	if err != nil {
		fmt.Fprintf(stderr, "gdn grad: %v\n", err)
		return 2
	}
	prec := *precision
	if prec == "" {
		prec = "f64"
		if *backend != "cpu" {
			prec = "f32"
		}
	}
	if prec != "f64" && prec != "f32" {
		fmt.Fprintf(stderr, "gdn grad: -precision %q: want f64 or f32\n", prec)
		return 2
	}
	var b gdn.Backend
	if *backend != "cpu" {
		var bs []gdn.Backend
		if *backend != "all" {
			bs, err = backendsFor(*backend, stderr)
		}
		if *backend == "all" || errors.Is(err, errUnknownBackend) {
			fmt.Fprintf(stderr, "gdn grad: -backend %q: want one of %s\n", *backend, gradBackendNames)
			return 2
		}
		if err != nil {
			return fail("%v", err)
		}
		b = bs[0]
		if prec == "f64" {
			fmt.Fprintf(stderr, "gdn grad: -precision f64: backend %s computes in float32; use -precision f32\n", b.Name())
			return 2
		}
	}
	if err := checkOutput(*in, *out); err != nil {
		fmt.Fprintf(stderr, "gdn grad: %v\n", err)
		if errors.Is(err, errOutIsInput) {
			return 2
		}
		return 1
	}

	f, err := openNPZ(*in)
	if err != nil {
		return fail("%s: %v", *in, err)
	}
	defer f.Close()
	c, err := inspectGrad(f)
	if err != nil {
		return fail("%s: %v", *in, err)
	}
	rc := gradRun{elem: 8, backend: b, segment: *segment, workers: runtime.GOMAXPROCS(0), algo: algos[0], chunkLen: *af.L}
	if prec == "f32" {
		rc.elem = 4
	}
	if need := c.need(rc); need.total() > int64(mem) {
		return fail("%s: B=%d T=%d H=%d HV=%d K=%d V=%d needs %s (%s), more than -mem %s; raise -mem if the machine has it",
			*in, c.B, c.T, c.H, c.HV, c.K, c.V, fmtBytes(need.total()), need, mem.String())
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The need above counts what is live; keep garbage from adding to it.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(mem)))
	}
	if err := c.load(f); err != nil {
		return fail("%s: %v", *in, err)
	}
	inputs := []string{"q", "k", "v", "g", "beta", "do", "h0", "dht"}
	for _, w := range finiteReport("input", inputs, [][]float64{c.q, c.k, c.v, c.g, c.beta, c.do, c.h0, c.dht}) {
		fmt.Fprintf(stderr, "gdn grad: %s\n", w)
	}
	opt := gdn.Options{Scale: c.scale, Heads: hm, Segment: *segment, Algo: algos[0], ChunkLen: *af.L}
	if b == nil && prec == "f32" {
		b = gdn.CPU{}
	}
	var res []*array
	if b != nil {
		res, err = gradBackend(b, c, opt)
	} else {
		res, err = gradF64(c, opt)
	}
	if err != nil {
		return fail("%v", err)
	}
	names := make([]string, len(res))
	data := make([][]float64, len(res))
	for i, a := range res {
		names[i], data[i] = a.name, a.data
	}
	for _, w := range finiteReport("output", names, data) {
		fmt.Fprintf(stderr, "gdn grad: %s\n", w)
	}
	if err := writeNPZ(*out, res); err != nil {
		return fail("writing %s: %v", *out, pathless(err))
	}
	name := gdn.CPU{}.Name()
	if b != nil {
		name = b.Name()
	}
	fmt.Fprintf(stdout, "gdn grad: B=%d T=%d H=%d HV=%d K=%d V=%d gate=%s heads=%s scale=%.6g C=%d%s backend=%s precision=%s\n",
		c.B, c.T, c.H, c.HV, c.K, c.V, c.gate(), hm, opt.ScaleFor(c.K), opt.SegmentLength(c.T), algoNote(opt, c.T), name, prec)
	fmt.Fprintf(stdout, "L = sum(o*do) + sum(ht*dht) = %.17g\n", c.loss(res))
	fmt.Fprintf(stdout, "wrote %s: %s (float64)\n", *out, strings.Join(names, ", "))
	return 0
}

// gradBackendNames lists what grad's -backend accepts.
const gradBackendNames = "cpu, metal or metal:KIND"

// errOutIsInput is wrapped by checkOutput's error for an -out that names
// the input file, a usage error.
var errOutIsInput = errors.New("is the input file")

// checkOutput refuses, before anything is read or computed, an -out that
// names the input file or that cannot be written: a directory, or a path
// whose directory is missing or not writable (tried by creating and
// removing a temporary file there, as writeNPZ will). Errors name the
// paths the user gave.
func checkOutput(in, out string) error {
	si, err := os.Stat(in)
	if err != nil {
		return fmt.Errorf("-in %s: %v", in, pathless(err))
	}
	so, err := os.Stat(out)
	if err == nil && os.SameFile(si, so) {
		return fmt.Errorf("-out %s %w; write the result elsewhere (the input is never modified)", out, errOutIsInput)
	}
	if err == nil && so.IsDir() {
		return fmt.Errorf("-out %s is a directory; name a file", out)
	}
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("-out %s: directory %s: %v", out, dir, pathless(err))
	} else if !st.IsDir() {
		return fmt.Errorf("-out %s: %s is not a directory", out, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("-out %s: cannot write in directory %s: %v", out, dir, pathless(err))
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

// pathless drops the path (perhaps of a temporary file) from a file
// system error, leaving what went wrong, so that messages can name the path
// the user gave.
func pathless(err error) error {
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// transposeStates converts between fla's state layout [B, HV, K, V] and the
// reference's [S_k, S_v, H_v, n_seqs] (per (seq, head) S_v rows of S_k):
// each (seq, head)'s K x V matrix is transposed. fromFLA picks the
// direction.
func transposeStates[F, G gdn.Float](dst []F, src []G, bh, K, V int, fromFLA bool) {
	for p := 0; p < bh; p++ {
		base := p * K * V
		for i := 0; i < K; i++ {
			for j := 0; j < V; j++ {
				fla, ours := base+i*V+j, base+j*K+i
				if fromFLA {
					dst[ours] = F(src[fla])
				} else {
					dst[fla] = F(src[ours])
				}
			}
		}
	}
}

// problem builds the reference's inputs from c, in F. fla's q, k, v, g,
// beta and do are already in ggml's memory order; only the states are
// transposed.
func problem[F gdn.Float](c *gradCase) (in gdn.Inputs[F], dy gdn.Tensor[F], dStates []F) {
	gw := 1
	if c.kda {
		gw = c.K
	}
	in.Q = gdn.Contiguous(gdn.Convert[F](c.q), [4]int{c.K, c.H, c.T, c.B})
	in.K = gdn.Contiguous(gdn.Convert[F](c.k), [4]int{c.K, c.H, c.T, c.B})
	in.V = gdn.Contiguous(gdn.Convert[F](c.v), [4]int{c.V, c.HV, c.T, c.B})
	in.G = gdn.Contiguous(gdn.Convert[F](c.g), [4]int{gw, c.HV, c.T, c.B})
	in.Beta = gdn.Contiguous(gdn.Convert[F](c.beta), [4]int{1, c.HV, c.T, c.B})
	if c.h0 != nil {
		st := make([]F, len(c.h0))
		transposeStates(st, c.h0, c.B*c.HV, c.K, c.V, true)
		in.State = gdn.Contiguous(st, [4]int{c.K, c.V, c.HV, c.B})
	}
	dy = gdn.Contiguous(gdn.Convert[F](c.do), [4]int{c.V, c.HV, c.T, c.B})
	if c.dht != nil {
		dStates = make([]F, len(c.dht))
		transposeStates(dStates, c.dht, c.B*c.HV, c.K, c.V, true)
	}
	return in, dy, dStates
}

// results turns the reference-layout outputs into fla's layout, float64.
func results[F gdn.Float](c *gradCase, y, final []F, g *gdn.Grads[F]) []*array {
	f64 := gdn.Convert[float64, F]
	state := func(x []F) []float64 {
		out := make([]float64, len(x))
		transposeStates(out, x, c.B*c.HV, c.K, c.V, false)
		return out
	}
	gshape := []int{c.B, c.T, c.HV}
	if c.kda {
		gshape = append(gshape, c.K)
	}
	qk := []int{c.B, c.T, c.H, c.K}
	vs := []int{c.B, c.T, c.HV, c.V}
	st := []int{c.B, c.HV, c.K, c.V}
	return []*array{
		{name: "o", shape: vs, data: f64(y)},
		{name: "ht", shape: st, data: state(final)},
		{name: "dq", shape: qk, data: f64(g.DQ)},
		{name: "dk", shape: qk, data: f64(g.DK)},
		{name: "dv", shape: vs, data: f64(g.DV)},
		{name: "dg", shape: gshape, data: f64(g.DG)},
		{name: "dbeta", shape: []int{c.B, c.T, c.HV}, data: f64(g.DBeta)},
		{name: "dh0", shape: st, data: state(g.DState)},
	}
}

// gradF64 runs the CPU reference in float64.
func gradF64(c *gradCase, opt gdn.Options) ([]*array, error) {
	in, dy, dStates := problem[float64](c)
	fw, err := gdn.Forward(&in, opt)
	if err != nil {
		return nil, err
	}
	g, err := gdn.Backward(&in, dy, dStates, opt)
	if err != nil {
		return nil, err
	}
	return results(c, fw.Y, fw.States[:fw.Shape.StateLen()], g), nil
}

// gradBackend runs a float32 backend.
func gradBackend(b gdn.Backend, c *gradCase, opt gdn.Options) ([]*array, error) {
	in, dy, dStates := problem[float32](c)
	s, err := in.Shape(opt)
	if err != nil {
		return nil, err
	}
	if err := b.Supports(s, opt); err != nil {
		return nil, fmt.Errorf("backend %s does not run this case: %v", b.Name(), err)
	}
	y, states, err := b.Forward(&in, opt)
	if err != nil {
		return nil, fmt.Errorf("%s forward: %w", b.Name(), err)
	}
	packed, err := b.Backward(&in, dy, dStates, opt)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", b.Name(), err)
	}
	if len(y) != s.YLen() || len(states) < s.StateLen() {
		return nil, fmt.Errorf("%s: forward outputs of %d and %d elements, want %d and %d", b.Name(), len(y), len(states), s.YLen(), s.StatesLen())
	}
	g, err := gdn.NewGrads(s, packed)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", b.Name(), err)
	}
	return results(c, y, states[:s.StateLen()], g), nil
}

// loss is L = sum(o*do) + sum(ht*dht) from the results.
func (c *gradCase) loss(res []*array) float64 {
	var l float64
	for _, a := range res {
		switch a.name {
		case "o":
			for i, x := range a.data {
				l += x * c.do[i]
			}
		case "ht":
			for i, x := range a.data {
				if c.dht != nil {
					l += x * c.dht[i]
				}
			}
		}
	}
	return l
}
