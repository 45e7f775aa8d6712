package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/verify"
)

func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", `usage: gdn bench [-backend cpu|metal|metal:cuda|all] [-algo recurrent|chunk|all] [-L n] [-kept] [-S n -hk n -hv n -T n -seqs n -kda -C n -threads n -count n] [-json FILE]

Measures a backend's float32 forward and backward at one shape: the best
of -count runs of each (on metal:cuda, the median of at least 5 by CUDA
events, and the peak device memory), as time, as token-heads per second
(T * H_v * n_seqs / seconds) and as flops per token and head (gdn.Flops),
the backward's scratch, and the ratio of the checkpointed backward
(segment length C) to the keep-every-state backward (C = T), both timed in
the same run. -algo chunk measures the chunkwise (WY) algorithm (chunk
length -L) instead: the CPU reference, or the chunk kernels of gdn.metal
with -backend metal; -algo all measures both and their ratio. -kept adds,
for the chunk kernels (metal backends), the forward that keeps each
chunk's A, P and X for its backward (metal.Backend.ForwardKeep) and the
backward that reads them (BackwardKept, each run after a ForwardKeep that
is not timed), as fla's chunk_kda keeps its forward's matrices; the same
gradients, bit for bit. Their flop rates count the flops of the pass that
forms A, P and X again.
q/k are L2-normalized, the heads interleaved, the initial state random.

The shape flags left unset take defaults that depend on the backends:
when every backend measured is a GPU (-backend metal on a Mac, or
metal:cuda), the 27B model's shape: -S 128 -hk 16 -hv 48 -T 8192;
otherwise (the CPU, the Metal executor, -backend all) a small one:
-S 128 -hk 1 -hv 2 -T 1024. A line "defaults (...): ..." names the ones
taken. -json FILE appends one JSON object per measurement to FILE.
A backend that does not take the shape says why and is left out; exit
status 1 when a measured backend fails, or when no backend takes the
shape (nothing measured).

Example:
  gdn bench -S 128 -hk 2 -hv 6 -T 1024 -count 3
  gdn bench -backend metal -algo chunk          # on a Mac: the 27B shape
  gdn bench -backend metal -algo chunk -kda
`, stderr)
	backend := fs.String("backend", "cpu", "backends to measure: "+backendNames)
	var sh benchShape
	fs.IntVar(&sh.S, "S", 0, "head size `n` (S_k = S_v; default 128)")
	fs.IntVar(&sh.Hk, "hk", 0, "q/k heads `n` (default 16 on a GPU, else 1)")
	fs.IntVar(&sh.Hv, "hv", 0, "value heads `n`, a multiple of -hk (default 48 on a GPU, else 2)")
	fs.IntVar(&sh.T, "T", 0, "tokens per sequence `n` (default 8192 on a GPU, else 1024)")
	seqs := fs.Int("seqs", 1, "sequences `n`")
	kda := fs.Bool("kda", false, "per-key-channel gate (KDA) instead of one gate per head")
	C := fs.Int("C", 0, "segment length `n` of the checkpointed backward (0: ceil(sqrt(T)))")
	threads := fs.Int("threads", 0, "CPU worker threads `n` (0: GOMAXPROCS)")
	count := fs.Int("count", 3, "runs of each pass; the best is reported")
	kept := fs.Bool("kept", false, "with -algo chunk on metal backends, also the forward keeping A, P and X and the backward reading them")
	jsonPath := fs.String("json", "", "append one JSON object per measurement to `file`")
	af := addAlgoFlags(fs, true, "")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, x := range []struct {
		name string
		v    int
	}{{"S", sh.S}, {"hk", sh.Hk}, {"hv", sh.Hv}, {"T", sh.T}, {"seqs", *seqs}, {"count", *count}} {
		if (set[x.name] || x.name == "seqs" || x.name == "count") && x.v < 1 {
			fmt.Fprintf(stderr, "gdn bench: -%s %d: want at least 1\n", x.name, x.v)
			return 2
		}
	}
	if *C < 0 || *threads < 0 {
		fmt.Fprintln(stderr, "gdn bench: -C and -threads must not be negative")
		return 2
	}
	algos, err := af.algos()
	if err != nil {
		fmt.Fprintf(stderr, "gdn bench: %v\n", err)
		return 2
	}
	backends, err := backendsFor(*backend, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gdn bench: %v\n", err)
		if errors.Is(err, errUnknownBackend) {
			return 2
		}
		return 1
	}
	sh, note := resolveBenchShape(sh, set, allGPU(backends))
	if sh.Hv%sh.Hk != 0 {
		fmt.Fprintf(stderr, "gdn bench: -hv %d is not a multiple of -hk %d\n", sh.Hv, sh.Hk)
		return 2
	}
	S, hk, hv, T := &sh.S, &sh.Hk, &sh.Hv, &sh.T
	c := verify.Case{Family: "bench", Sk: *S, Sv: *S, Hk: *hk, Rep: *hv / *hk, T: *T, Seqs: *seqs,
		KDA: *kda, Heads: gdn.Interleave, State: true, C: *C, Seed: 1}
	p := verify.Build[float32](c)
	p.Opt.Threads = *threads
	keep := p.Opt
	keep.KeepAll = true
	s, err := p.In.Shape(p.Opt)
	if err != nil {
		fmt.Fprintf(stderr, "gdn bench: %v\n", err)
		return 2
	}
	seg := p.Opt.SegmentLength(*T)
	nck := gdn.Segments(*T, seg)
	workers := *threads
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, *hv**seqs)
	gate := "scalar"
	if *kda {
		gate = "kda"
	}
	if note != "" {
		fmt.Fprintln(stdout, note)
	}
	fmt.Fprintf(stdout, "shape: S %d, H_k %d, H_v %d, T %d, n_seqs %d, gate %s; C %d (n_ck %d); best of %d\n",
		*S, *hk, *hv, *T, *seqs, gate, seg, nck, *count)
	tokenHeads := float64(*T * *hv * *seqs)
	pairs := *hv * *seqs
	var js *benchJSON
	if *jsonPath != "" {
		f, err := os.OpenFile(*jsonPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "gdn bench: -json: %v\n", err)
			return 1
		}
		defer f.Close()
		js = &benchJSON{w: f, base: benchRecord{S: *S, Hk: *hk, Hv: *hv, T: *T, Seqs: *seqs, Gate: gate}}
	}
	// row prints one measurement (scratch < 0: none; held: the pairs whose
	// scratch a call holds at once) and records it.
	row := func(rec benchRecord, label string, d time.Duration, flops float64, scratch, held int) {
		text := ""
		if scratch >= 0 {
			text = fmt.Sprintf("scratch %s per (head, seq), %s for all %d", fmtBytes(scratch), fmtBytes(scratch*pairs), pairs)
			if held < pairs {
				text = fmt.Sprintf("scratch %s per (head, seq), %s for the %d of a group of value heads (of %d)", fmtBytes(scratch), fmtBytes(scratch*held), held, pairs)
			}
			rec.ScratchBytes, rec.ScratchPairs = scratch, held
		}
		line := fmt.Sprintf("  %-22s %10s %14s token-heads/s %8s flop/token  %s", label, fmtDur(d), fmtRate(tokenHeads/d.Seconds()), fmtRate(flops/float64(*T)), text)
		fmt.Fprintln(stdout, strings.TrimRight(line, " "))
		rec.MS, rec.Stat, rec.Runs, rec.FlopsToken = d.Seconds()*1e3, "best", *count, flops/float64(*T)
		js.emit(rec)
	}
	status, took := 0, 0
	for _, b := range backends {
		if err := b.Supports(s, p.Opt); err != nil {
			fmt.Fprintf(stdout, "%s: not supported: %v\n", b.Name(), err)
			continue
		}
		took++
		name := b.Name()
		switch mb := b.(type) {
		case gdn.CPU:
			name = fmt.Sprintf("CPU, threads %d", workers)
		case *metal.Backend:
			if mb.Kind() == metal.CUDA {
				fmt.Fprintf(stdout, "scratch %s per (head, seq) at C %d, %s keeping all\n", fmtBytes(mb.ScratchBytes(s, p.Opt)), seg, fmtBytes(mb.ScratchBytes(s, keep)))
				if err := benchCUDA(stdout, js, mb, p, keep, *count, seg, algos, *af.L, *kept); err != nil {
					fmt.Fprintf(stdout, "%s: FAIL: %v\n", name, err)
					status = 1
				}
				continue
			}
			if mb.Kind() == metal.Executor {
				fmt.Fprintf(stderr, "note: %s runs one OS thread per GPU thread to check the kernels, not to be fast: its figures say nothing of a GPU's, and large shapes take long\n", name)
			}
		}
		fmt.Fprintf(stdout, "%s\n", name)
		var recBack, chunkBack time.Duration
		for _, algo := range algos {
			if algo == gdn.Chunk {
				opt := p.Opt
				opt.Algo, opt.ChunkLen = gdn.Chunk, *af.L
				L := min(opt.ChunkLength(), *T)
				fw, err1 := best(*count, func() error { _, _, err := b.Forward(&p.In, opt); return err })
				bw, err2 := best(*count, func() error { _, err := b.Backward(&p.In, p.DY, p.DStates, opt); return err })
				if err := firstErr(err1, err2); err != nil {
					fmt.Fprintf(stdout, "  chunk: FAIL: %v\n", err)
					status = 1
					continue
				}
				ff, fb := gdn.Flops(s, opt)
				rec := benchRecord{Backend: name, Algo: "chunk", L: L}
				row(withPass(rec, "forward"), fmt.Sprintf("forward, chunk L %d", L), fw, ff, -1, 0)
				row(withPass(rec, "backward"), fmt.Sprintf("backward, chunk L %d", L), bw, fb, b.ScratchBytes(s, opt), scratchPairs(b, s, opt))
				fmt.Fprintf(stdout, "  chunk backward / forward: %.2f\n", bw.Seconds()/fw.Seconds())
				chunkBack = bw
				if mb, ok := b.(*metal.Backend); ok && *kept {
					fk, bk, err := benchKept(mb, p, opt, *count)
					if err != nil {
						fmt.Fprintf(stdout, "  chunk, kept: FAIL: %v\n", err)
						status = 1
						continue
					}
					row(withPass(rec, "forward_keep"), fmt.Sprintf("fwd keep, chunk L %d", L), fk, ff, -1, 0)
					row(withPass(rec, "backward_kept"), fmt.Sprintf("bwd kept, chunk L %d", L), bk, fb, -1, 0)
					fmt.Fprintf(stdout, "  chunk forward + backward, kept / not: %.3f\n", (fk+bk).Seconds()/(fw+bw).Seconds())
				}
				continue
			}
			fw, err1 := best(*count, func() error { _, _, err := b.Forward(&p.In, p.Opt); return err })
			bw, err2 := best(*count, func() error { _, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt); return err })
			bk, err3 := best(*count, func() error { _, err := b.Backward(&p.In, p.DY, p.DStates, keep); return err })
			if err := firstErr(err1, err2, err3); err != nil {
				fmt.Fprintf(stdout, "  recurrent: FAIL: %v\n", err)
				status = 1
				continue
			}
			ff, fb := gdn.Flops(s, p.Opt)
			_, fk := gdn.Flops(s, keep)
			rec := benchRecord{Backend: name, Algo: "recurrent", C: seg}
			row(withPass(rec, "forward"), "forward", fw, ff, -1, 0)
			row(withPass(rec, "backward"), fmt.Sprintf("backward, C %d", seg), bw, fb, b.ScratchBytes(s, p.Opt), scratchPairs(b, s, p.Opt))
			rec.C = *T
			row(withPass(rec, "backward_keep_all"), "backward, keep all", bk, fk, b.ScratchBytes(s, keep), scratchPairs(b, s, keep))
			fmt.Fprintf(stdout, "  checkpointed / keep-all backward time: %.3f; backward / forward: %.2f\n",
				bw.Seconds()/bk.Seconds(), bw.Seconds()/fw.Seconds())
			recBack = bw
		}
		if recBack > 0 && chunkBack > 0 {
			fmt.Fprintf(stdout, "  chunk / recurrent (checkpointed) backward time: %.3f\n", chunkBack.Seconds()/recBack.Seconds())
		}
	}
	if js != nil && js.err != nil {
		fmt.Fprintf(stderr, "gdn bench: -json: %v\n", js.err)
		return 1
	}
	if took == 0 {
		// Nothing was measured: a script must not take that for a run.
		fmt.Fprintln(stderr, "gdn bench: no backend takes this shape")
		return 1
	}
	return status
}

// withPass returns r with Pass set to pass.
func withPass(r benchRecord, pass string) benchRecord {
	r.Pass = pass
	return r
}

// benchKept times b's ForwardKeep and BackwardKept at p's inputs and
// opt (the best of count runs each); each BackwardKept follows a
// ForwardKeep of its own, outside its time.
func benchKept(b *metal.Backend, p *verify.Problem[float32], opt gdn.Options, count int) (fw, bw time.Duration, err error) {
	fw, err = best(count, func() error { _, _, _, err := b.ForwardKeep(&p.In, opt); return err })
	if err != nil {
		return 0, 0, err
	}
	for i := 0; i < count; i++ {
		_, _, k, err := b.ForwardKeep(&p.In, opt)
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		if _, err := b.BackwardKept(k, &p.In, p.DY, p.DStates, opt); err != nil {
			return 0, 0, err
		}
		if d := time.Since(t0); i == 0 || d < bw {
			bw = d
		}
	}
	return fw, max(bw, time.Nanosecond), nil
}

// best runs f count times and returns the shortest time.
func best(count int, f func() error) (time.Duration, error) {
	var b time.Duration
	for i := 0; i < count; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		if d := time.Since(t0); i == 0 || d < b {
			b = d
		}
	}
	return max(b, time.Nanosecond), nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1f µs", float64(d)/1e3)
}

func fmtRate(r float64) string {
	switch {
	case r >= 1e9:
		return fmt.Sprintf("%.3g G", r/1e9)
	case r >= 1e6:
		return fmt.Sprintf("%.3g M", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.3g k", r/1e3)
	}
	return fmt.Sprintf("%.3g", r)
}
