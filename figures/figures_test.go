package figures

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/gdnback/gdnback/verify"
)

// someResults is a small hand-made matrix run: two families on two
// backends, one of them failing and one not supported.
func someResults() ([]verify.Result, []string) {
	pass := verify.Result{Checks: []verify.Check{{Name: "nmse", Value: 1e-9, Limit: 1e-7}}}
	fail := verify.Result{Checks: []verify.Check{{Name: "nmse", Value: 1, Limit: 1e-7}}}
	var rs []verify.Result
	add := func(r verify.Result, family, backend string) {
		r.Case = verify.Case{Family: family}
		r.Backend = backend
		rs = append(rs, r)
	}
	add(pass, "head_size", "CPU")
	add(pass, "head_size", "Other")
	add(pass, "seq_len", "CPU")
	add(fail, "seq_len", "Other")
	add(verify.Result{Skip: "no"}, "seq_len", "Other")
	return rs, []string{"CPU", "Other"}
}

// TestDeterministic renders every figure twice and requires the same bytes
// both times. The verification matrix is drawn from hand-made results, so
// the test does not run the whole matrix.
func TestDeterministic(t *testing.T) {
	rs, backends := someResults()
	for _, f := range All(rs, backends) {
		t.Run(f.Name, func(t *testing.T) {
			a, err := f.PNG()
			if err != nil {
				t.Fatal(err)
			}
			b, err := f.PNG()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s: two renderings differ (%d and %d bytes)", f.Name, len(a), len(b))
			}
			if len(a) < 1000 || !bytes.HasPrefix(a, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("%s: not a PNG of a figure (%d bytes)", f.Name, len(a))
			}
		})
	}
}

// TestCommitted compares the committed figures that do not depend on the
// backends present with a regeneration. Go fuses multiply-adds on arm64
// but not on amd64, so the bytes are those of linux/amd64, where CI runs
// (`go run ./cmd/figures -check` covers the matrix figure there too).
func TestCommitted(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the committed figures are amd64's bytes; this is %s", runtime.GOARCH)
	}
	if testing.Short() {
		t.Skip("-short")
	}
	for _, f := range All(nil, nil) {
		if f.Name == "matrix.png" {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(f.Name))
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s is not committed: run go run ./cmd/figures", f.Name)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.PNG()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("figures/%s differs from a regeneration: run go run ./cmd/figures", f.Name)
			}
		})
	}
}

// TestMatrixCells checks the counting behind the matrix figure: passes,
// failures and skips per (family, backend), other backends left out, and
// no results an error.
func TestMatrixCells(t *testing.T) {
	rs, backends := someResults()
	rs = append(rs, verify.Result{Case: verify.Case{Family: "seq_len"}, Backend: "Absent"})
	families, cells := countCells(rs, backends)
	if want := []string{"head_size", "seq_len"}; !slices.Equal(families, want) {
		t.Errorf("families = %v, want %v", families, want)
	}
	want := map[[2]int]matrixCell{
		{0, 0}: {pass: 1}, {0, 1}: {pass: 1},
		{1, 0}: {pass: 1}, {1, 1}: {fail: 1, skip: 1},
	}
	if len(cells) != len(want) {
		t.Errorf("%d cells, want %d", len(cells), len(want))
	}
	for k, w := range want {
		if got := cells[k]; got == nil || *got != w {
			t.Errorf("cell %v = %+v, want %+v", k, got, w)
		}
	}
	if _, err := Matrix(nil, backends); err == nil {
		t.Error("Matrix drew a figure from no results")
	}
}
