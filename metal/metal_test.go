package metal

import (
	"errors"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/verify"
)

// backward runs p's backward on b.
func backward(b *Backend, p *verify.Problem[float32]) ([]float32, error) {
	return b.Backward(&p.In, p.DY, p.DStates, p.Opt)
}

func openExec(t *testing.T) *Backend {
	t.Helper()
	b, err := Open(Executor)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHeadSizes runs head sizes beyond the matrix (256, and S_k != S_v at
// the extremes) against the reference.
func TestHeadSizes(t *testing.T) {
	runCases(t, openExec(t), []verify.Case{
		{Family: "head_size", Sk: 256, Sv: 256, Hk: 1, Rep: 1, T: 3, Seqs: 1, C: 2, State: true, Seed: 7},
		{Family: "head_size", Sk: 256, Sv: 16, Hk: 1, Rep: 2, T: 4, Seqs: 1, C: 3, KDA: true, Layout: verify.Fused, Seed: 8},
		{Family: "head_size", Sk: 16, Sv: 256, Hk: 1, Rep: 1, T: 4, Seqs: 1, C: 3, Snapshots: 2, State: true, Seed: 9},
	})
}

// runCases checks b on each case against the reference and finite
// differences (verify.Run), logging the passes and failing on the others.
func runCases(t *testing.T, b *Backend, cases []verify.Case) {
	t.Helper()
	for _, c := range cases {
		ref, err := verify.NewReference(c)
		if err != nil {
			t.Fatal(err)
		}
		if r := verify.Run(b, ref); !r.OK() {
			t.Error(r.Line())
		} else {
			t.Log(r.Line())
		}
	}
}

// TestRefused: head sizes the kernels do not take and malformed inputs are
// refused before dispatch, with errors naming the tensor and dimension.
func TestRefused(t *testing.T) {
	b := openExec(t)
	c := verify.Case{Family: "x", Sk: 48, Sv: 32, Hk: 1, Rep: 1, T: 2, Seqs: 1, Seed: 1}
	p := verify.Build[float32](c)
	s, err := p.In.Shape(p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Supports(s, p.Opt); err == nil || !strings.Contains(err.Error(), "q: ne[0] (S_k) = 48") {
		t.Errorf("Supports(S_k 48) = %v", err)
	}
	if _, _, err := b.Forward(&p.In, p.Opt); err == nil || !strings.Contains(err.Error(), "S_k") {
		t.Errorf("forward at S_k 48: %v", err)
	}
	c.Sk, c.Sv = 32, 24
	if _, err := backward(b, verify.Build[float32](c)); err == nil || !strings.Contains(err.Error(), "v: ne[0] (S_v) = 24") {
		t.Errorf("backward at S_v 24: %v", err)
	}

	c.Sv = 32
	for _, tc := range []struct {
		name  string
		spoil func(p *verify.Problem[float32])
		want  string
	}{
		{"dy shape", func(p *verify.Problem[float32]) { p.DY.Ne[2] = 1 }, "dy: ne[2] (T) = 1, want 2"},
		{"dy bounds", func(p *verify.Problem[float32]) { p.DY.Off = 5 }, "dy: strides"},
		{"dstates", func(p *verify.Problem[float32]) { p.DStates = p.DStates[1:] }, "dstates:"},
		{"k shape", func(p *verify.Problem[float32]) { p.In.K.Ne[1] = 2 }, "k:"},
		{"beta", func(p *verify.Problem[float32]) { p.In.Beta.Ne[2] = 3 }, "beta: ne[2]"},
	} {
		p := verify.Build[float32](c)
		tc.spoil(p)
		_, err := backward(b, p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := Open("tpu"); !errors.Is(err, ErrUnknownKind) || err.Error() != `metal: unknown kind "tpu": want "auto", "gpu", "executor" or "cuda"` {
		t.Errorf("Open(tpu): %v", err)
	}
}

// TestScratch: the backend's scratch is its ScratchBytes times H_v*n_seqs
// of the largest call so far, kept for smaller ones, and ScratchBytes
// matches the layout.
func TestScratch(t *testing.T) {
	b := openExec(t)
	big := verify.Case{Family: "x", Sk: 32, Sv: 64, Hk: 1, Rep: 2, T: 10, Seqs: 1, C: 3, Seed: 1}
	small := verify.Case{Family: "x", Sk: 16, Sv: 16, Hk: 1, Rep: 1, T: 4, Seqs: 1, Seed: 2}
	pb := verify.Build[float32](big)
	if _, err := backward(b, pb); err != nil {
		t.Fatal(err)
	}
	s, err := pb.In.Shape(pb.Opt)
	if err != nil {
		t.Fatal(err)
	}
	want := b.ScratchBytes(s, pb.Opt) * s.Hv * s.Seqs
	if got := b.ScratchLen(); got != want {
		t.Errorf("scratch after the big call: %d bytes, want %d", got, want)
	}
	if _, err := backward(b, verify.Build[float32](small)); err != nil {
		t.Fatal(err)
	}
	if got := b.ScratchLen(); got != want {
		t.Errorf("scratch after a smaller call: %d bytes, want it kept at %d", got, want)
	}
	// 27B: S 128, T 8192, C 91: (91 + 91)*128*128 + 91*128 + 91*4*385 floats.
	if got, want := ScratchBytes(128, 128, 8192, 91), 4*((91+91)*128*128+91*128+91*4*385); got != want {
		t.Errorf("ScratchBytes(27B) = %d, want %d", got, want)
	}
	if ScratchBytes(48, 128, 10, 3) != 0 {
		t.Error("ScratchBytes of an unsupported head size is not 0")
	}
	if ScratchBytes(16, 16, 10, 0) != ScratchBytes(16, 16, 10, 10) {
		t.Error("ScratchBytes with C = 0 is not keep-all")
	}
}
