package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npz"

	"github.com/gdnback/gdnback/metal"
	"github.com/gdnback/gdnback/verify"
)

// torchCase is one entry of testdata/torch/cases.json, written by
// scripts/torch/make_fixtures.py.
type torchCase struct {
	Name, File, Heads, Gate, Dtype string
	B, T, H, HV, K, V              int
	H0, Dht                        bool
	Loss                           float64
}

func loadTorchCases(t *testing.T) []torchCase {
	t.Helper()
	b, err := os.ReadFile("testdata/torch/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Cases []torchCase }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) == 0 {
		t.Fatal("cases.json lists no case")
	}
	return m.Cases
}

// outputs are the arrays grad writes, which the fixtures hold as PyTorch
// computed them.
var outputs = []string{"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"}

func readAll(t *testing.T, path string, names []string) map[string]*array {
	t.Helper()
	f, err := openNPZ(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]*array{}
	for _, n := range names {
		a, err := f.read(n)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out[n] = a
	}
	return out
}

func sha(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// gdnGrad runs gdn grad in-process and fails the test on a nonzero status.
func gdnGrad(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if st := run(append([]string{"grad"}, args...), &stdout, &stderr); st != 0 {
		t.Fatalf("gdn grad %s: status %d\n%s%s", strings.Join(args, " "), st, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestGradTorchFixtures runs gdn grad on every PyTorch fixture and compares
// o, ht and every gradient with PyTorch's float64 autograd by fla's metric,
// RMS(ref - x) / RMS(ref): within 1e-9 in float64 arithmetic and 1e-5 in
// float32, with the recurrent algorithm and with the chunked one (at the
// default chunk length, one partial chunk at these T, and at L 4, several).
func TestGradTorchFixtures(t *testing.T) {
	limits := map[string]float64{"f64": 1e-9, "f32": 1e-5}
	algos := [][]string{{"-algo", "recurrent"}, {"-algo", "chunk"}, {"-algo", "chunk", "-L", "4"}}
	for _, tc := range loadTorchCases(t) {
		in := filepath.Join("testdata/torch", tc.File)
		ref := readAll(t, in, outputs)
		for _, prec := range []string{"f64", "f32"} {
			for _, algo := range algos {
				t.Run(tc.Name+"/"+prec+"/"+strings.Join(algo[1:], "_L"), func(t *testing.T) {
					before := sha(t, in)
					out := filepath.Join(t.TempDir(), "result.npz")
					gdnGrad(t, append([]string{"-in", in, "-out", out, "-heads", tc.Heads, "-precision", prec}, algo...)...)
					if sha(t, in) != before {
						t.Fatalf("%s was modified", in)
					}
					got := readAll(t, out, outputs)
					var worst float64
					var report []string
					for _, n := range outputs {
						r, g := ref[n], got[n]
						if g.dtype != "float64" {
							t.Errorf("%s: dtype %s, want float64", n, g.dtype)
						}
						if !equalInts(r.shape, g.shape) {
							t.Fatalf("%s: shape %v, PyTorch's %v", n, g.shape, r.shape)
						}
						e := verify.RMSRatio(r.data, g.data)
						worst = max(worst, e)
						report = append(report, fmt.Sprintf("%s %.2g", n, e))
						if !(e <= limits[prec]) {
							t.Errorf("%s: relative RMS error %.3g against PyTorch, limit %g", n, e, limits[prec])
						}
					}
					t.Logf("worst %.3g: %s", worst, strings.Join(report, ", "))
				})
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGradSegments: the result does not depend on the segment length C.
func TestGradSegments(t *testing.T) {
	in := "testdata/torch/long_f64.npz"
	dir := t.TempDir()
	var base map[string]*array
	for _, c := range []string{"0", "1", "3", "40", "100"} {
		out := filepath.Join(dir, "C"+c+".npz")
		gdnGrad(t, "-in", in, "-out", out, "-C", c)
		got := readAll(t, out, outputs)
		if base == nil {
			base = got
			continue
		}
		for _, n := range outputs {
			if e := verify.RMSRatio(base[n].data, got[n].data); e != 0 {
				t.Errorf("-C %s: %s differs from -C 0 by %.3g", c, n, e)
			}
		}
	}
}

// TestGradHeadsMatter: running a tile fixture with the wrong mapping gives
// a different answer (so the mapping the tests pass is the one that counts).
func TestGradHeadsMatter(t *testing.T) {
	in := "testdata/torch/scalar_tile_f64.npz"
	out := filepath.Join(t.TempDir(), "r.npz")
	gdnGrad(t, "-in", in, "-out", out, "-heads", "interleave")
	ref := readAll(t, in, []string{"o"})
	got := readAll(t, out, []string{"o"})
	if e := verify.RMSRatio(ref["o"].data, got["o"].data); e < 1e-3 {
		t.Fatalf("interleave on a tile fixture agrees with PyTorch (%.3g): the mapping is not exercised", e)
	}
}

// writeCase writes an .npz with the given arrays (name -> nested slices or
// scalars) as numpy's savez would.
func writeCase(t *testing.T, arrays map[string]any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "case.npz")
	m := map[string]any{}
	for k, v := range arrays {
		m[k+".npy"] = v
	}
	if err := npz.Write(path, m); err != nil {
		t.Fatal(err)
	}
	return path
}

// goodCase is a valid input: B 1, T 2, H 1, HV 2, K 3, V 2.
func goodCase() map[string]any {
	fill := func(shape ...int) any {
		n := 1
		for _, d := range shape {
			n *= d
		}
		data := make([]float64, n)
		for i := range data {
			data[i] = 0.1 * float64(i%7-3)
		}
		return nest(data, shape)
	}
	return map[string]any{
		"q": fill(1, 2, 1, 3), "k": fill(1, 2, 1, 3), "v": fill(1, 2, 2, 2),
		"g": fill(1, 2, 2), "beta": fill(1, 2, 2), "do": fill(1, 2, 2, 2),
	}
}

func TestGradErrors(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(m map[string]any)
		status int
		want   string
	}{
		{"missing q", func(m map[string]any) { delete(m, "q") }, 1, "q: missing (want float32 or float64 [B, T, H, K])"},
		{"missing do", func(m map[string]any) { delete(m, "do") }, 1, "do: missing (want float32 or float64 [B, T, HV, V])"},
		{"missing g", func(m map[string]any) { delete(m, "g") }, 1, "g: missing"},
		{"k misshaped", func(m map[string]any) { m["k"] = nest(make([]float64, 8), []int{1, 2, 1, 4}) }, 1, "k: shape (1, 2, 1, 4) (float64), want [B, T, H, K] = [1, 2, 1, 3]"},
		{"v 3-d", func(m map[string]any) { m["v"] = nest(make([]float64, 4), []int{1, 2, 2}) }, 1, "v: shape (1, 2, 2) (float64), want [B, T, HV, V] = [1, 2, HV, V]"},
		{"v heads", func(m map[string]any) {
			m["q"] = nest(make([]float64, 12), []int{1, 2, 2, 3})
			m["k"] = m["q"]
			m["v"] = nest(make([]float64, 12), []int{1, 2, 3, 2})
		}, 1, "v: HV = 3 value heads is not a multiple of H = 2 q/k heads"},
		{"k bool", func(m map[string]any) { m["k"] = [][][][]bool{{{{true, false, true}}, {{true, false, true}}}} }, 1, "k: dtype bool"},
		{"g wrong T", func(m map[string]any) { m["g"] = nest(make([]float64, 6), []int{1, 3, 2}) }, 1, "g: shape (1, 3, 2) (float64), want [B, T, HV] = [1, 2, 2], or [B, T, HV, K] = [1, 2, 2, 3] for KDA"},
		{"beta int", func(m map[string]any) { m["beta"] = [][][]int64{{{1, 2}, {3, 4}}} }, 1, "beta: dtype int64"},
		{"h0 misshaped", func(m map[string]any) { m["h0"] = nest(make([]float64, 12), []int{1, 2, 2, 3}) }, 1, "h0: shape (1, 2, 2, 3) (float64), want [B, HV, K, V] = [1, 2, 3, 2]"},
		{"scale vector", func(m map[string]any) { m["scale"] = []float64{1, 2} }, 1, "scale: shape (2,), want a 0-d array"},
		{"scale zero", func(m map[string]any) { m["scale"] = 0.0 }, 1, "scale: 0, want a finite nonzero number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := goodCase()
			tt.edit(m)
			in := writeCase(t, m)
			out := filepath.Join(filepath.Dir(in), "out.npz")
			var stdout, stderr bytes.Buffer
			st := run([]string{"grad", "-in", in, "-out", out}, &stdout, &stderr)
			if st != tt.status {
				t.Fatalf("status %d, want %d\n%s", st, tt.status, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q\nwant it to contain %q", stderr.String(), tt.want)
			}
			if _, err := os.Stat(out); tt.status != 0 && err == nil {
				t.Errorf("an output was written after an error")
			}
		})
	}
}

// TestGradWholeOrNothing: a failed run leaves an existing output as it was
// and no temporary file behind; a good run replaces it whole.
func TestGradWholeOrNothing(t *testing.T) {
	m := goodCase()
	good := writeCase(t, m)
	delete(m, "beta")
	bad := writeCase(t, m)
	dir := t.TempDir()
	out := filepath.Join(dir, "result.npz")
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, _, errOut := runGdn("grad", "-in", bad, "-out", out); st != 1 || !strings.Contains(errOut, "beta: missing") {
		t.Fatalf("status %d, %q", st, errOut)
	}
	if b, _ := os.ReadFile(out); string(b) != "old" {
		t.Fatalf("a failed run changed the output to %q", b)
	}
	if st, stdout, errOut := runGdn("grad", "-in", good, "-out", out); st != 0 || !strings.Contains(stdout, "wrote "+out+": o, ht, dq, dk, dv, dg, dbeta, dh0 (float64)") {
		t.Fatalf("status %d\n%s%s", st, stdout, errOut)
	}
	got := readAll(t, out, outputs)
	shapes := map[string][]int{"o": {1, 2, 2, 2}, "ht": {1, 2, 3, 2}, "dq": {1, 2, 1, 3}, "dk": {1, 2, 1, 3},
		"dv": {1, 2, 2, 2}, "dg": {1, 2, 2}, "dbeta": {1, 2, 2}, "dh0": {1, 2, 3, 2}}
	for n, s := range shapes {
		if !equalInts(got[n].shape, s) || got[n].dtype != "float64" {
			t.Errorf("%s: %s %v, want float64 %v", n, got[n].dtype, got[n].shape, s)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left in the output directory: %v", entries)
	}
}

func TestGradSameFile(t *testing.T) {
	in := writeCase(t, goodCase())
	before := sha(t, in)
	st, _, errOut := runGdn("grad", "-in", in, "-out", in)
	if st != 2 || !strings.Contains(errOut, "is the input file") {
		t.Errorf("status %d, %q", st, errOut)
	}
	if sha(t, in) != before {
		t.Error("the input was modified")
	}
	if st, _, errOut := runGdn("grad", "-in", filepath.Join(t.TempDir(), "absent.npz"), "-out", "x.npz"); st != 1 || !strings.Contains(errOut, "absent.npz") {
		t.Errorf("absent input: status %d, %q", st, errOut)
	}
}

// TestGradBackend: -backend runs a gdn.Backend in float32; it must give
// what the float32 CPU gives.
func TestGradBackend(t *testing.T) {
	in := "testdata/torch/kda_tile_f64.npz"
	dir := t.TempDir()
	// The real Metal backend (the executor off Apple GPUs) refuses this
	// fixture's head size, 8, before running anything.
	if st, _, errOut := runGdn("grad", "-in", in, "-out", filepath.Join(dir, "m.npz"), "-backend", "metal"); st != 1 || !strings.Contains(errOut, "S_k) = 8 is not a head size") {
		t.Errorf("metal on head size 8: status %d, %q", st, errOut)
	}
	withMetal(t, fakeMetal{})
	gdnGrad(t, "-in", in, "-out", filepath.Join(dir, "m.npz"), "-backend", "metal", "-heads", "tile")
	gdnGrad(t, "-in", in, "-out", filepath.Join(dir, "c.npz"), "-precision", "f32", "-heads", "tile")
	m := readAll(t, filepath.Join(dir, "m.npz"), outputs)
	c := readAll(t, filepath.Join(dir, "c.npz"), outputs)
	for _, n := range outputs {
		if e := verify.RMSRatio(c[n].data, m[n].data); e != 0 {
			t.Errorf("%s: backend differs from the float32 CPU by %.3g", n, e)
		}
	}
	if st, _, errOut := runGdn("grad", "-in", in, "-out", filepath.Join(dir, "x.npz"), "-backend", "metal", "-precision", "f64"); st != 2 || !strings.Contains(errOut, "computes in float32") {
		t.Errorf("metal f64: status %d, %q", st, errOut)
	}
}

// The fixture kda_tile_f64 stores q in Fortran order, so that reading it
// is tested against PyTorch; here a small one is read back in C order.
func TestFortranOrder(t *testing.T) {
	f, err := openNPZ("testdata/torch/kda_tile_f64.npz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if h, err := f.header("q"); err != nil || !h.fortran {
		t.Fatalf("q is not Fortran-ordered: %v, %v", h, err)
	}
	// column-major [[[0 1 2] [3 4 5]], [[6 7 8] [9 10 11]]]: shape (2, 2, 3)
	col := []float64{0, 6, 3, 9, 1, 7, 4, 10, 2, 8, 5, 11}
	raw := npyBytes("<f8", true, "(2, 2, 3)", col)
	f = npzOf(t, map[string][]byte{"x.npy": raw})
	a, err := f.read("x")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a.data) != "[0 1 2 3 4 5 6 7 8 9 10 11]" {
		t.Errorf("Fortran order read as %v", a.data)
	}
}

// TestGradTorchMetal runs gdn grad -backend metal (the executor off Apple
// GPUs) on every PyTorch fixture whose head sizes the kernels take, and holds
// it to the float32 limit against PyTorch's float64 autograd.
func TestGradTorchMetal(t *testing.T) { gradTorchBackend(t, "metal") }

// TestGradTorchCUDA does the same through gdn grad -backend metal:cuda,
// where there is an NVIDIA GPU.
func TestGradTorchCUDA(t *testing.T) {
	if _, err := metal.Open(metal.CUDA); errors.Is(err, metal.ErrNoCUDA) {
		t.Skipf("no NVIDIA GPU here: %v", err)
	}
	gradTorchBackend(t, "metal:cuda")
}

// TestGradTorchMetalChunk does the same through the chunk kernels, gdn
// grad -backend metal -algo chunk, at the default chunk length (one partial
// chunk at these T) and at L 4 (several).
func TestGradTorchMetalChunk(t *testing.T) {
	for _, L := range []string{"0", "4"} {
		t.Run("L"+L, func(t *testing.T) { gradTorchBackend(t, "metal", "-algo", "chunk", "-L", L) })
	}
}

// TestGradTorchCUDAChunk does that through gdn grad -backend metal:cuda
// -algo chunk, where there is an NVIDIA GPU.
func TestGradTorchCUDAChunk(t *testing.T) {
	if _, err := metal.Open(metal.CUDA); errors.Is(err, metal.ErrNoCUDA) {
		t.Skipf("no NVIDIA GPU here: %v", err)
	}
	for _, L := range []string{"0", "4"} {
		t.Run("L"+L, func(t *testing.T) { gradTorchBackend(t, "metal:cuda", "-algo", "chunk", "-L", L) })
	}
}

// gradTorchBackend runs gdn grad -backend backend, with the extra flags,
// on every fixture whose head sizes the kernels take.
func gradTorchBackend(t *testing.T, backend string, extra ...string) {
	ran := 0
	for _, tc := range loadTorchCases(t) {
		if metal.Supported(tc.K, tc.V) != nil {
			continue
		}
		ran++
		t.Run(tc.Name, func(t *testing.T) {
			in := filepath.Join("testdata/torch", tc.File)
			ref := readAll(t, in, outputs)
			out := filepath.Join(t.TempDir(), "result.npz")
			head := gdnGrad(t, append([]string{"-in", in, "-out", out, "-heads", tc.Heads, "-backend", backend}, extra...)...)
			if len(extra) > 0 && !strings.Contains(head, "algo=chunk") {
				t.Errorf("the header does not name the chunk algorithm:\n%s", head)
			}
			got := readAll(t, out, outputs)
			var worst float64
			for _, n := range outputs {
				e := verify.RMSRatio(ref[n].data, got[n].data)
				worst = max(worst, e)
				if !(e <= 1e-5) {
					t.Errorf("%s: relative RMS error %.3g against PyTorch, limit 1e-5", n, e)
				}
			}
			t.Logf("-backend %s %s: worst relative RMS error against PyTorch: %.3g", backend, strings.Join(extra, " "), worst)
		})
	}
	if ran == 0 {
		t.Fatal("no PyTorch fixture has head sizes the Metal kernels take")
	}
}
