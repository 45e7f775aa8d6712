package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/verify"
)

// The H200's limits that bench sets each pass against (NVIDIA's figures:
// HBM about 4.8 TB/s, about 67 TFLOP/s of non-tensor FP32).
const (
	h200Bandwidth = 4.8e12
	h200FP32      = 67e12
)

// passCost counts what one pass at shape s must do at the least: flops
// of the recurrence (per token, value head and sequence, per state
// element: 7 in the forward — decay, u, the update, y — and 28 in the
// checkpointed backward: the checkpoint pass and the replay, 5 each
// without y, and 18 in the backward proper), and bytes if each input is
// read once and each output written once (q and k once per q/k head).
func passCost(s gdn.Shape, backward bool) (flops, bytes float64) {
	th := float64(s.T * s.Hv * s.Seqs)
	ss := float64(s.Sk * s.Sv)
	qk := 2 * float64(s.Sk*s.Hk*s.T*s.SeqsQK)
	v := float64(s.Sv * s.Hv * s.T * s.Seqs)
	g := float64(s.GateWidth * s.Hv * s.T * s.Seqs)
	beta := float64(s.Hv * s.T * s.Seqs)
	state := float64(s.StateLen())
	in := qk + v + g + beta + state
	if !backward {
		return 7 * ss * th, 4 * (in + v + float64(s.StatesLen()))
	}
	// dy in, dStates not given; out: dq, dk, dv, dg, dbeta, dstate.
	return 28 * ss * th, 4 * (in + v + in)
}

// benchCUDA measures the CUDA backend: each pass's GPU time by CUDA
// events around its dispatches (median of runs after warm-up calls), the
// whole call's time (uploads, allocations and the read-back included),
// and the peak device memory the backend held in the pass: the recurrent
// kernels' passes and, for gdn.Chunk in algos, the chunk kernels' at chunk
// length L (their flops are gdn.Flops of the chunk algorithm).
func benchCUDA(stdout io.Writer, js *benchJSON, b *metal.Backend, p *verify.Problem[float32], keep gdn.Options, runs, seg int, algos []gdn.Algo, L int, kept bool) error {
	s, err := p.In.Shape(p.Opt)
	if err != nil {
		return err
	}
	const warm = 2
	runs = max(runs, 5)
	fmt.Fprintf(stdout, "%s: median of %d runs after %d warm-up calls\n  GPU: CUDA events around a call's dispatches (one stream, one sync); launch: the host's time issuing them;\n  call: the whole call (uploads, read-back); peak: device memory the backend held (buffers grown and kept)\n", b.Name(), runs, warm)
	fmt.Fprintf(stdout, "  %-20s %10s %10s %10s %11s %9s %9s %7s %7s\n", "pass", "GPU", "launch", "call", "peak", "GB/s", "GFLOP/s", "%4.8TB", "%67TF")
	tokenHeads := float64(s.T * s.Hv * s.Seqs)
	type cudaPass struct {
		name     string
		backward bool
		keepAll  bool
		chunk    bool
		kept     bool        // ForwardKeep, or BackwardKept after an untimed ForwardKeep
		rec      benchRecord // what -json records of it
	}
	var passes []cudaPass
	chunkOpt := p.Opt
	chunkOpt.Algo, chunkOpt.ChunkLen = gdn.Chunk, L
	for _, a := range algos {
		if a == gdn.Chunk {
			cl := min(chunkOpt.ChunkLength(), s.T)
			rec := benchRecord{Backend: b.Name(), Algo: "chunk", L: cl}
			passes = append(passes, cudaPass{name: fmt.Sprintf("forward, chunk L %d", cl), chunk: true, rec: withPass(rec, "forward")},
				cudaPass{name: fmt.Sprintf("backward, chunk L %d", cl), backward: true, chunk: true, rec: withPass(rec, "backward")})
			if kept {
				passes = append(passes, cudaPass{name: fmt.Sprintf("fwd keep, chunk L %d", cl), chunk: true, kept: true, rec: withPass(rec, "forward_keep")},
					cudaPass{name: fmt.Sprintf("bwd kept, chunk L %d", cl), backward: true, chunk: true, kept: true, rec: withPass(rec, "backward_kept")})
			}
			continue
		}
		rec := benchRecord{Backend: b.Name(), Algo: "recurrent", C: seg}
		all := rec
		all.C = s.T
		passes = append(passes, cudaPass{name: "forward", rec: withPass(rec, "forward")},
			cudaPass{name: fmt.Sprintf("backward, C %d", seg), backward: true, rec: withPass(rec, "backward")},
			cudaPass{name: "backward, keep all", backward: true, keepAll: true, rec: withPass(all, "backward_keep_all")})
	}
	for _, pass := range passes {
		opt := p.Opt
		if pass.keepAll {
			opt = keep
		}
		if pass.chunk {
			opt = chunkOpt
		}
		// call runs the pass once; t0 is set where its time starts (a
		// kept backward's ForwardKeep comes before it).
		var t0 time.Time
		call := func() error {
			switch {
			case pass.kept && pass.backward:
				_, _, k, err := b.ForwardKeep(&p.In, opt)
				if err != nil {
					return err
				}
				t0 = time.Now()
				_, err = b.BackwardKept(k, &p.In, p.DY, p.DStates, opt)
				return err
			case pass.kept:
				t0 = time.Now()
				_, _, _, err := b.ForwardKeep(&p.In, opt)
				return err
			case pass.backward:
				t0 = time.Now()
				_, err := b.Backward(&p.In, p.DY, p.DStates, opt)
				return err
			}
			t0 = time.Now()
			_, _, err := b.Forward(&p.In, opt)
			return err
		}
		b.ResetPeak()
		var gpu, wall, launch []float64
		for i := 0; i < warm+runs; i++ {
			if err := call(); err != nil {
				if !pass.keepAll {
					return fmt.Errorf("%s: %w", pass.name, err)
				}
				// Keeping every state can outgrow what the kernels
				// index; a refusal, not a failure.
				fmt.Fprintf(stdout, "  %-20s not run: %v\n", pass.name, err)
				r := pass.rec
				r.Note = "not run: " + err.Error()
				js.emit(r)
				break
			}
			d := time.Since(t0)
			st, _ := b.DeviceStats()
			if i >= warm {
				gpu = append(gpu, st.LastKernelTime)
				launch = append(launch, st.LastLaunchTime)
				wall = append(wall, d.Seconds()*1e3)
			}
		}
		if len(gpu) == 0 {
			continue
		}
		st, _ := b.DeviceStats()
		g, w, l := median(gpu), median(wall), median(launch)
		flops, bytes := passCost(s, pass.backward)
		if pass.chunk {
			ff, fb := gdn.Flops(s, opt)
			flops = ff * float64(s.Hv*s.Seqs)
			if pass.backward {
				flops = fb * float64(s.Hv*s.Seqs)
			}
		}
		sec := g / 1e3
		fmt.Fprintf(stdout, "  %-20s %7.3f ms %7.3f ms %7.3f ms %11s %9.1f %9.1f %6.2f%% %6.2f%%   %s token-heads/s\n",
			pass.name, g, l, w, fmtBytes(int(st.PeakBytes)), bytes/sec/1e9, flops/sec/1e9,
			100*bytes/sec/h200Bandwidth, 100*flops/sec/h200FP32, fmtRate(tokenHeads/sec))
		r := pass.rec
		r.MS, r.Stat, r.Runs, r.LaunchMS, r.CallMS, r.PeakBytes = g, "median", len(gpu), l, w, st.PeakBytes
		r.FlopsToken = flops / float64(s.T*s.Hv*s.Seqs)
		if pass.backward && !pass.kept {
			r.ScratchBytes, r.ScratchPairs = b.ScratchBytes(s, opt), b.ScratchPairs(s, opt)
		}
		js.emit(r)
	}
	if ks, ok := b.KernelResources(); ok {
		fmt.Fprint(stdout, kernelLines(ks))
	}
	return nil
}

// kernelLines lists the kernels as the CUDA backend's compiler built them,
// one line each, and marks those that hold part of a thread's values in
// local memory (spills, or arrays not kept in registers): a kernel change
// that moves a kernel's figures here explains a time that moved too.
func kernelLines(ks []metal.KernelResources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  kernels as compiled: registers and local memory a thread, static shared memory a block, most threads a block\n")
	for _, k := range ks {
		mark := ""
		if k.LocalBytes > 0 {
			mark = "   <- local memory: spills or arrays outside the registers"
		}
		fmt.Fprintf(&b, "    %-28s %4d regs %8s local %8s shared %5d threads%s\n",
			k.Name, k.Registers, sizeOrUnknown(k.LocalBytes), sizeOrUnknown(k.SharedStatic), k.MaxThreads, mark)
	}
	return b.String()
}

// sizeOrUnknown is fmtBytes(n), or "?" for the -1 of a size the driver
// did not give.
func sizeOrUnknown(n int) string {
	if n < 0 {
		return "?"
	}
	return fmtBytes(n)
}

// median of x (which it sorts).
func median(x []float64) float64 {
	slices.Sort(x)
	n := len(x)
	if n%2 == 1 {
		return x[n/2]
	}
	return (x[n/2-1] + x[n/2]) / 2
}
