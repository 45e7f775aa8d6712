package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	gguf "github.com/gpustack/gguf-parser-go"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/internal/upstream"
)

// model is the shape the planner works on: one Gated DeltaNet op per
// delta-net layer.
type model struct {
	source         string // where the shape came from
	Sk, Sv, Hk, Hv int
	Layers         int // delta-net layers
	Blocks         int // all layers, when read from a GGUF file
	Interval       int // full attention every Interval-th layer (GGUF), 0 if none
	// from names where each size came from, for errors: a flag ("-hv") or
	// the GGUF keys it was read from, by the names S_k, S_v, H_k, H_v,
	// layers, T and n_seqs.
	from map[string]string
	gguf bool
}

// flagNames are the flags that give a model's sizes.
var flagNames = map[string]string{"S_k": "-S", "S_v": "-S", "H_k": "-hk", "H_v": "-hv", "layers": "-layers", "T": "-T", "n_seqs": "-seqs"}

// sizes describes the named sizes and where they came from, for errors:
// "S_v 128 (-S), T 8192 (-T)".
func (m model) sizes(vals map[string]int, names ...string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d (%s)", n, vals[n], m.from[n])
	}
	return strings.Join(parts, ", ")
}

// mulInt multiplies non-negative ints, reporting false on overflow.
func mulInt(n ...int) (int, bool) {
	p := satMul(n...)
	return int(p), p < math.MaxInt64
}

// checkPlan refuses a shape the op does not take, a tensor of more than
// 2^40 elements, naming the sizes at fault and where they came from; so
// every per-op figure of the plan fits in an int.
func checkPlan(m model, T, seqs int) error {
	v := map[string]int{"S_k": m.Sk, "S_v": m.Sv, "H_k": m.Hk, "H_v": m.Hv, "T": T, "n_seqs": seqs, "layers": m.Layers}
	for _, t := range []struct {
		what string
		dims []string
		n    []int
	}{
		{"q and k [S_k, H_k, T, n_seqs]", []string{"S_k", "H_k", "T", "n_seqs"}, []int{m.Sk, m.Hk, T, seqs}},
		{"y [S_v, H_v, T, n_seqs]", []string{"S_v", "H_v", "T", "n_seqs"}, []int{m.Sv, m.Hv, T, seqs}},
		{"the states [S_k, S_v, H_v, n_seqs]", []string{"S_k", "S_v", "H_v", "n_seqs"}, []int{m.Sk, m.Sv, m.Hv, seqs}},
		{"the dq/dk partial sums [S_k, T, H_v, n_seqs]", []string{"S_k", "T", "H_v", "n_seqs"}, []int{m.Sk, T, m.Hv, seqs}},
		{"the keep-all states of one (head, seq) [S_k, S_v, T + 3]", []string{"S_k", "S_v", "T"}, []int{m.Sk, m.Sv, T + 3}},
	} {
		if n, ok := mulInt(t.n...); !ok || n > gdn.MaxElems || T > gdn.MaxElems {
			return fmt.Errorf("%s: %s would hold more than 2^40 elements, more than the op takes", m.sizes(v, t.dims...), t.what)
		}
	}
	return nil
}

func cmdPlan(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("plan", `usage: gdn plan [-S n -hk n -hv n -T n -seqs n -C n -L n -layers n]
       gdn plan -gguf FILE [-T n -seqs n -C n -L n]

Prints the backward's scratch memory (float32) per (head, seq), per op and
for the whole model, for two layouts:
  upstream   (n_ck + C + 3) * S_k*S_v * 4 bytes per (head, seq), inside each
             op's output, so it lives as long as that output: one per
             delta-net layer in the worst case, two when the allocator
             overlaps two layers' outputs;
  shared     this project's: one scratch buffer, reused by every layer
             (layers run one after another), gdn.ScratchBytes per (head, seq);
             and beside it the chunkwise algorithm's backward
             (gdn.ChunkScratchBytes, chunk length -L): the state before
             every chunk, and one chunk's rows; and the Metal kernels'
             (metal.ScratchBytes, metal.ChunkScratchBytes);
  kept       the A, P and X that the Metal chunk kernels' ForwardKeep keeps
             for its BackwardKept (metal.ChunkKeptBytes), one a layer where
             a forward over every layer comes before the backward
             (Backend.KeepSlots; metal.MaxKeepSlots of them a Backend);
and the recompute cost for several segment lengths C: the extra forward
token-steps of checkpointing against keeping every state.

The defaults are the 27B hybrid of the upstream review (Qwen3.5-27B: S 128,
16 q/k heads, 48 value heads, 48 delta-net layers) at T 8192. With -gguf the
shape comes from the model's metadata (ssm.state_size, ssm.group_count,
ssm.time_step_rank, ssm.inner_size, block_count, full_attention_interval);
no tensor data is read. A shape the op does not take (a tensor beyond 2^40
elements) is refused, naming the flags or GGUF keys it came from.

Example:
  gdn plan -S 128 -hk 16 -hv 48 -T 8192
  gdn plan -gguf Qwen3-Next-80B-A3B-Instruct-Q4_K_M.gguf -T 4096
`, stderr)
	S := fs.Int("S", 128, "head size `n` (S_k = S_v)")
	hk := fs.Int("hk", 16, "q/k heads `n` (ssm.group_count)")
	hv := fs.Int("hv", 48, "value heads `n` (ssm.time_step_rank)")
	T := fs.Int("T", 8192, "tokens per sequence `n`")
	seqs := fs.Int("seqs", 1, "sequences `n` (n_seqs)")
	C := fs.Int("C", 0, "segment length `n` (0: ceil(sqrt(T)))")
	layers := fs.Int("layers", 48, "delta-net layers `n`")
	ggufPath := fs.String("gguf", "", "read the shape from this GGUF model `file` (metadata only)")
	chunkL := fs.Int("L", 0, fmt.Sprintf("chunk length `n` of the chunked backward's row (0: %d)", gdn.DefaultChunkLen))
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	m := model{source: "from the shape flags", Sk: *S, Sv: *S, Hk: *hk, Hv: *hv, Layers: *layers, from: flagNames}
	if *ggufPath != "" {
		var clash []string
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains([]string{"S", "hk", "hv", "layers"}, f.Name) {
				clash = append(clash, "-"+f.Name)
			}
		})
		if len(clash) > 0 {
			fmt.Fprintf(stderr, "gdn plan: -gguf gives the shape; drop %s\n", strings.Join(clash, ", "))
			return 2
		}
		var err error
		if m, err = readGGUF(*ggufPath); err != nil {
			fmt.Fprintf(stderr, "gdn plan: %v\n", err)
			return 1
		}
	}
	for _, x := range []struct {
		name string
		v    int
	}{{"-S", m.Sk}, {"-hk", m.Hk}, {"-hv", m.Hv}, {"-T", *T}, {"-seqs", *seqs}, {"-layers", m.Layers}} {
		if x.v < 1 {
			fmt.Fprintf(stderr, "gdn plan: %s %d: want at least 1\n", x.name, x.v)
			return 2
		}
	}
	if m.Hv%m.Hk != 0 { // from GGUF, readGGUF has checked it
		fmt.Fprintf(stderr, "gdn plan: -hv %d is not a multiple of -hk %d\n", m.Hv, m.Hk)
		return 2
	}
	if *C < 0 {
		fmt.Fprintf(stderr, "gdn plan: -C %d: want 0 (ceil(sqrt(T))) or a positive segment length\n", *C)
		return 2
	}
	if *chunkL < 0 {
		fmt.Fprintf(stderr, "gdn plan: -L %d: want 0 (%d) or a positive chunk length\n", *chunkL, gdn.DefaultChunkLen)
		return 2
	}
	if *C > *T {
		*C = *T
	}
	status := 2 // sizes from flags: a usage error; from a GGUF file: bad data
	if m.gguf {
		status = 1
	}
	if err := checkPlan(m, *T, *seqs); err != nil {
		fmt.Fprintf(stderr, "gdn plan: %v\n", err)
		return status
	}
	var b strings.Builder
	if err := printPlan(&b, m, *T, *seqs, *C, *chunkL); err != nil {
		fmt.Fprintf(stderr, "gdn plan: %v\n", err)
		return status
	}
	io.WriteString(stdout, b.String())
	return 0
}

// upstreamScratch is the upstream Metal kernel's scratch per (head, seq) in
// bytes: upstream.ScratchStates states of S_k*S_v floats.
func upstreamScratch(sk, sv, T, C int) int {
	return upstream.ScratchStates(T, C) * sk * sv * 4
}

// printPlan writes the plan of a shape checkPlan has passed. The
// whole-model figures, per-op figures times the layer count, may still
// overflow an int: that is an error naming the sizes.
func printPlan(w io.Writer, m model, T, seqs, C, chunkLen int) error {
	opt := gdn.Options{Segment: C}
	c := opt.SegmentLength(T)
	nck := gdn.Segments(T, c)
	how := "-C"
	if C == 0 {
		how = "ceil(sqrt(T))"
	}
	fmt.Fprintf(w, "model: %s\n", m.source)
	fmt.Fprintf(w, "shape: S_k %d, S_v %d, H_k %d, H_v %d, T %d, n_seqs %d; %d delta-net layers\n",
		m.Sk, m.Sv, m.Hk, m.Hv, T, seqs, m.Layers)
	fmt.Fprintf(w, "segment length C %d (%s), n_ck %d checkpoints\n\n", c, how, nck)

	pairs := m.Hv * seqs
	up := upstreamScratch(m.Sk, m.Sv, T, c)
	ours := gdn.ScratchBytes[float32](m.Sk, m.Sv, T, c)
	// Every figure below is at most (T + 4) states of S_k*S_v floats (the
	// upstream's keep-all scratch) per (head, seq), times the pairs, times
	// the layers (or the two layers overlapped); twice that must fit.
	if satMul(T+4, m.Sk, m.Sv, 8, pairs, max(m.Layers, 2)) == math.MaxInt64 {
		v := map[string]int{"S_k": m.Sk, "S_v": m.Sv, "H_v": m.Hv, "T": T, "n_seqs": seqs, "layers": m.Layers}
		return fmt.Errorf("%s: the whole model's scratch does not fit in 64 bits", m.sizes(v, "S_k", "S_v", "H_v", "T", "n_seqs", "layers"))
	}
	row := func(name, a, b, c, note string) {
		line := fmt.Sprintf("%-42s %15s %10s %12s  %s", name, a, b, c, note)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	row("backward scratch, float32", "per (head, seq)", "per op", "whole model", "")
	row("upstream: inside each op's output", fmtBytes(up), fmtBytes(up*pairs), fmtBytes(up*pairs*m.Layers), "one per delta-net layer (worst case)")
	if m.Layers > 1 {
		row("", "", "", fmtBytes(2*up*pairs), "two layers' outputs overlapped")
	}
	row("shared: this project (gdn.ScratchBytes)", fmtBytes(ours), fmtBytes(ours*pairs), fmtBytes(ours*pairs), "one buffer reused by every layer")
	if metalScratchBytes != nil {
		if mb := metalScratchBytes(m.Sk, m.Sv, T, c); mb > 0 {
			row("shared: Metal kernels (metal.ScratchBytes)", fmtBytes(mb), fmtBytes(mb*pairs), fmtBytes(mb*pairs), "one buffer reused by every layer")
		} else {
			hs := strings.Trim(strings.ReplaceAll(fmt.Sprint(metalHeadSizes()), " ", ", "), "[]")
			fmt.Fprintf(w, "shared: Metal kernels: none; they do not take S_k %d, S_v %d (they take head sizes %s)\n", m.Sk, m.Sv, hs)
		}
	}
	L := min(gdn.Options{ChunkLen: chunkLen}.ChunkLength(), T)
	cs := gdn.Shape{Sk: m.Sk, Sv: m.Sv, Hk: m.Hk, Hv: m.Hv, T: T, Seqs: seqs, SeqsQK: seqs, GateWidth: 1, Snapshots: 1}
	cb := gdn.ChunkScratchBytes[float32](cs, L)
	row(fmt.Sprintf("shared: chunked backward, L %d", L), fmtBytes(cb), fmtBytes(cb*pairs), fmtBytes(cb*pairs),
		fmt.Sprintf("gdn.ChunkScratchBytes: %d chunk-boundary states", gdn.ChunkCount(T, L, 1)))
	// A head size the Metal kernels do not take has its note above.
	if metalChunkScratchBytes != nil {
		if mc := metalChunkScratchBytes(cs, L); mc > 0 {
			held, note := pairs, "metal.ChunkScratchBytes: a WY area per chunk"
			if metalChunkScratchPairs != nil {
				if n := metalChunkScratchPairs(cs, L); n > 0 && n < pairs {
					held, note = n, fmt.Sprintf("%s; value heads in groups, %d (head, seq) pairs' at once (metal.ChunkScratchPairs)", note, n)
				}
			}
			row(fmt.Sprintf("shared: Metal chunk kernels, L %d", L), fmtBytes(mc), fmtBytes(mc*held), fmtBytes(mc*held), note)
		}
	}
	// The kept pair's matrices, a layer's each where a forward over every
	// layer comes before the backward.
	if metalChunkKeptBytes != nil && metalMaxKeepSlots != nil {
		if kb, n := metalChunkKeptBytes(cs, L), metalMaxKeepSlots(cs, L); kb > 0 && n > 0 {
			row(fmt.Sprintf("kept: Metal chunk kernels' A, P, X, L %d", L), fmtBytes(kb/pairs), fmtBytes(kb), fmtBytes(kb*m.Layers),
				fmt.Sprintf("metal.ChunkKeptBytes: ForwardKeep's, a layer each (KeepSlots), %d a Backend (metal.MaxKeepSlots)", n))
		}
	}
	part := 2 * m.Sk * T * pairs * 4
	fmt.Fprintf(w, "(the CPU reference also holds dq/dk partial sums per value head, 2*S_k*T*H_v*n_seqs floats: %s per op)\n\n", fmtBytes(part))

	fmt.Fprintf(w, "recompute cost per (head, seq): forward token-steps of the backward (a forward is %d)\n", T)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "C\tn_ck\tstates kept\tshared/(head,seq)\tshared per op\tupstream per op\tforward steps\textra steps\tx forward\t\n")
	for _, cc := range planSegments(T, c) {
		n := gdn.Segments(T, cc)
		extra := (n - 1) * cc // pass 1 replays every segment but the last
		label := fmt.Sprint(cc)
		switch {
		case cc == T:
			label += " (keep all)"
		case cc == c:
			label += " *"
		}
		sb := gdn.ScratchBytes[float32](m.Sk, m.Sv, T, cc)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%.3f\t\n", label, n, gdn.ScratchStates(T, cc),
			fmtBytes(sb), fmtBytes(sb*pairs), fmtBytes(upstreamScratch(m.Sk, m.Sv, T, cc)*pairs),
			T+extra, extra, float64(T+extra)/float64(T))
	}
	tw.Flush()
	fmt.Fprintln(w, "(* the chosen C; extra steps = (n_ck - 1) * C, the checkpoint pass; keep all replays the forward once and keeps T states)")
	return nil
}

// planSegments lists the segment lengths the recompute table shows: powers
// of two from 16, the chosen C and T itself, at most T.
func planSegments(T, c int) []int {
	var out []int
	for x := 16; x < T && x <= 1024; x *= 2 {
		out = append(out, x)
	}
	out = append(out, c, T)
	slices.Sort(out)
	return slices.Compact(out)
}

// fmtBytes writes n bytes with a binary unit and four significant digits.
func fmtBytes[I int | int64](n I) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	x := float64(n)
	u := 0
	for x >= 1024 && u < len(units)-1 {
		x /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	digits := 3 - int(math.Floor(math.Log10(x)))
	return fmt.Sprintf("%.*f %s", max(digits, 0), x, units[u])
}

// readGGUF reads a Gated DeltaNet model's shape from a GGUF file's metadata.
func readGGUF(path string) (m model, err error) {
	defer func() {
		// The last line of defence against a parser panic on a hostile
		// file; the fuzz test looks for it.
		if r := recover(); r != nil {
			m, err = model{}, fmt.Errorf("%s: %w while reading the GGUF metadata: %v", path, errPanic, r)
		}
	}()
	gf, err := gguf.ParseGGUFFile(path, gguf.SkipLargeMetadata())
	if err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	kvs := gf.Header.MetadataKV
	archKV, ok := kvs.Get("general.architecture")
	if !ok || archKV.ValueType != gguf.GGUFMetadataValueTypeString {
		return m, fmt.Errorf("%s: no general.architecture string in the metadata", path)
	}
	arch := archKV.ValueString()
	num := func(key string, required bool) (int, error) {
		kv, ok := kvs.Get(arch + "." + key)
		if !ok {
			if required {
				return 0, fmt.Errorf("%s: %s.%s is missing (architecture %q: not a Gated DeltaNet model?)", path, arch, key, arch)
			}
			return 0, nil
		}
		if !kv.ValueType.IsNumeric() {
			return 0, fmt.Errorf("%s: %s.%s is a %v, want a number", path, arch, key, kv.ValueType)
		}
		v := gguf.ValueNumeric[float64](kv)
		if v < 1 || v > 1<<30 || v != math.Trunc(v) {
			return 0, fmt.Errorf("%s: %s.%s = %g, want a positive integer", path, arch, key, v)
		}
		return int(v), nil
	}
	var errs []error
	must := func(key string) int {
		v, err := num(key, true)
		errs = append(errs, err)
		return v
	}
	m.Sk = must("ssm.state_size")
	m.Hk = must("ssm.group_count")
	m.Hv = must("ssm.time_step_rank")
	m.Blocks = must("block_count")
	if err := errors.Join(errs...); err != nil {
		return m, err
	}
	inner, err := num("ssm.inner_size", false)
	if err != nil {
		return m, err
	}
	key := func(k string) string { return arch + "." + k }
	m.gguf = true
	m.from = map[string]string{"S_k": key("ssm.state_size"), "S_v": key("ssm.state_size"), "H_k": key("ssm.group_count"),
		"H_v": key("ssm.time_step_rank"), "layers": key("block_count"), "T": "-T", "n_seqs": "-seqs"}
	if m.Hv%m.Hk != 0 {
		return m, fmt.Errorf("%s: %s = %d value heads is not a multiple of %s = %d q/k heads", path, key("ssm.time_step_rank"), m.Hv, key("ssm.group_count"), m.Hk)
	}
	m.Sv = m.Sk
	if inner > 0 {
		if inner%m.Hv != 0 {
			return m, fmt.Errorf("%s: %s = %d is not a multiple of %s = %d", path, key("ssm.inner_size"), inner, key("ssm.time_step_rank"), m.Hv)
		}
		m.Sv = inner / m.Hv
		m.from["S_v"] = key("ssm.inner_size") + " / " + key("ssm.time_step_rank")
	}
	if m.Interval, err = num("full_attention_interval", false); err != nil {
		return m, err
	}
	// llama.cpp: layer il is recurrent unless (il + 1) % interval == 0.
	m.Layers = m.Blocks
	if m.Interval > 0 {
		m.Layers = m.Blocks - m.Blocks/m.Interval
		m.from["layers"] = key("block_count") + " and " + key("full_attention_interval")
	}
	if m.Layers < 1 {
		return m, fmt.Errorf("%s: %s = %d makes every one of the %s = %d blocks full attention: no delta-net layer to plan",
			path, key("full_attention_interval"), m.Interval, key("block_count"), m.Blocks)
	}
	attn := "no full_attention_interval: every block counted as delta-net"
	if m.Interval > 0 {
		attn = fmt.Sprintf("full attention every %s layer", ordinal(m.Interval))
	}
	name := ""
	if kv, ok := kvs.Get("general.name"); ok && kv.ValueType == gguf.GGUFMetadataValueTypeString {
		name = " " + kv.ValueString()
	}
	m.source = fmt.Sprintf("%s (%s%s: %d blocks, %s, so %d delta-net layers)", path, arch, name, m.Blocks, attn, m.Layers)
	return m, nil
}

func ordinal(n int) string {
	suf := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suf = "st"
	case n%10 == 2:
		suf = "nd"
	case n%10 == 3:
		suf = "rd"
	}
	return fmt.Sprintf("%d%s", n, suf)
}
