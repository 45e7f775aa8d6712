package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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
-algo chunk computes on the CPU with the chunkwise (WY) algorithm, chunks
of -L tokens.

Example:
  gdn grad -in case.npz -out result.npz
`, stderr)
	in := fs.String("in", "", "input .npz `file` (required)")
	out := fs.String("out", "", "output .npz `file` (required; replaced whole)")
	heads := fs.String("heads", "interleave", "head mapping when HV > H: interleave (fla) or tile (ggml)")
	precision := fs.String("precision", "", "arithmetic: f64 or f32 (default f64 on cpu, f32 on other backends)")
	backend := fs.String("backend", "cpu", "backend: cpu, metal or metal:KIND")
	segment := fs.Int("C", 0, "checkpoint segment length `n` of the backward (0: ceil(sqrt(T)))")
	af := addAlgoFlags(fs, false)
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
	if algos[0] == gdn.Chunk && *backend != "cpu" {
		fmt.Fprintf(stderr, "gdn grad: -algo chunk runs on -backend cpu only\n")
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
		if *backend == "all" {
			fmt.Fprintln(stderr, "gdn grad: -backend all: name one backend")
			return 2
		}
		bs, err := backendsFor(*backend, stderr)
		if errors.Is(err, errUnknownBackend) {
			fmt.Fprintf(stderr, "gdn grad: %v\n", err)
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
	if err := sameFile(*in, *out); err != nil {
		return fail("%v", err)
	}

	c, err := loadGradCase(*in)
	if err != nil {
		return fail("%s: %v", *in, err)
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
	if err := writeNPZ(*out, res); err != nil {
		return fail("writing %s: %v", *out, err)
	}
	name := gdn.CPU{}.Name()
	if b != nil {
		name = b.Name()
	}
	names := make([]string, len(res))
	for i, a := range res {
		names[i] = a.name
	}
	fmt.Fprintf(stdout, "gdn grad: B=%d T=%d H=%d HV=%d K=%d V=%d gate=%s heads=%s scale=%.6g C=%d%s backend=%s precision=%s\n",
		c.B, c.T, c.H, c.HV, c.K, c.V, c.gate(), hm, opt.ScaleFor(c.K), opt.SegmentLength(c.T), algoNote(opt, c.T), name, prec)
	fmt.Fprintf(stdout, "L = sum(o*do) + sum(ht*dht) = %.17g\n", c.loss(res))
	fmt.Fprintf(stdout, "wrote %s: %s (float64)\n", *out, strings.Join(names, ", "))
	return 0
}

// sameFile refuses an -out that names the input file.
func sameFile(in, out string) error {
	si, err := os.Stat(in)
	if err != nil {
		return err
	}
	if so, err := os.Stat(out); err == nil && os.SameFile(si, so) {
		return fmt.Errorf("-out %s is the input file; write the result elsewhere (the input is never modified)", out)
	}
	return nil
}

// gradCase is a grad input, in fla's layout, every array float64.
type gradCase struct {
	B, T, H, HV, K, V int
	kda               bool
	scale             float64 // 0: the default, 1/sqrt(K)
	q, k, v, g, beta  []float64
	do                []float64
	h0, dht           []float64 // nil when absent
}

func (c *gradCase) gate() string {
	if c.kda {
		return "kda"
	}
	return "scalar"
}

// dims checks a's shape against want (named dimensions, e.g. B, T, H, K),
// filling in dimensions not yet known, and names the array and the
// expected shape in its error.
func dims(a *array, want []string, known map[string]int) error {
	bad := len(a.shape) != len(want)
	for i := 0; !bad && i < len(want); i++ {
		if n, ok := known[want[i]]; ok && a.shape[i] != n {
			bad = true
		}
		if a.shape[i] < 1 {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("%s: shape %s (%s), want [%s] = %s", a.name, pyShape(a.shape), a.dtype, strings.Join(want, ", "), expected(want, known))
	}
	for i, d := range want {
		known[d] = a.shape[i]
	}
	return nil
}

// expected writes the shape want, with the known sizes filled in.
func expected(want []string, known map[string]int) string {
	parts := make([]string, len(want))
	for i, d := range want {
		if n, ok := known[d]; ok {
			parts[i] = fmt.Sprint(n)
		} else {
			parts[i] = d
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func pyShape(s []int) string {
	if len(s) == 1 {
		return fmt.Sprintf("(%d,)", s[0])
	}
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// loadGradCase reads and checks the input arrays.
func loadGradCase(path string) (*gradCase, error) {
	f, err := openNPZ(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	known := map[string]int{}
	shapes := map[string][]string{
		"q": {"B", "T", "H", "K"}, "k": {"B", "T", "H", "K"},
		"v": {"B", "T", "HV", "V"}, "beta": {"B", "T", "HV"}, "do": {"B", "T", "HV", "V"},
		"h0": {"B", "HV", "K", "V"}, "dht": {"B", "HV", "K", "V"},
	}
	get := func(name string) ([]float64, error) {
		a, err := f.read(name)
		if err != nil {
			if errors.Is(err, errMissing) {
				return nil, fmt.Errorf("%w (want float32 or float64 [%s])", err, strings.Join(shapes[name], ", "))
			}
			return nil, err
		}
		if err := dims(a, shapes[name], known); err != nil {
			return nil, err
		}
		return a.data, nil
	}
	c := &gradCase{}
	if c.q, err = get("q"); err != nil {
		return nil, err
	}
	if c.k, err = get("k"); err != nil {
		return nil, err
	}
	if c.v, err = get("v"); err != nil {
		return nil, err
	}
	c.B, c.T, c.H, c.K, c.HV, c.V = known["B"], known["T"], known["H"], known["K"], known["HV"], known["V"]
	if c.HV%c.H != 0 {
		return nil, fmt.Errorf("v: HV = %d value heads is not a multiple of H = %d q/k heads", c.HV, c.H)
	}
	// g: scalar gate [B, T, HV] or KDA [B, T, HV, K].
	g, err := f.read("g")
	if err != nil {
		if errors.Is(err, errMissing) {
			return nil, fmt.Errorf("%w (want float32 or float64 [B, T, HV] or [B, T, HV, K])", err)
		}
		return nil, err
	}
	gw := []string{"B", "T", "HV"}
	if len(g.shape) == 4 {
		gw = append(gw, "K")
	}
	if err := dims(g, gw, known); err != nil {
		return nil, fmt.Errorf("%w, or [B, T, HV, K] = %s for KDA", err, expected([]string{"B", "T", "HV", "K"}, known))
	}
	c.g, c.kda = g.data, len(g.shape) == 4
	if c.beta, err = get("beta"); err != nil {
		return nil, err
	}
	if c.do, err = get("do"); err != nil {
		return nil, err
	}
	for _, name := range []string{"h0", "dht"} {
		if !f.has(name) {
			continue
		}
		d, err := get(name)
		if err != nil {
			return nil, err
		}
		if name == "h0" {
			c.h0 = d
		} else {
			c.dht = d
		}
	}
	if f.has("scale") {
		a, err := f.read("scale")
		if err != nil {
			return nil, err
		}
		if len(a.data) != 1 || len(a.shape) > 1 {
			return nil, fmt.Errorf("scale: shape %s, want a 0-d array (a scalar)", pyShape(a.shape))
		}
		c.scale = a.data[0]
		if c.scale == 0 || math.IsNaN(c.scale) || math.IsInf(c.scale, 0) {
			return nil, fmt.Errorf("scale: %g, want a finite nonzero number", c.scale)
		}
	}
	return c, nil
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
