package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUpToDate is the drift check: the committed notebooks' cells and the
// code blocks of derivation/ must be what a regeneration from the Markdown
// and the Go source gives. Fix a failure with `go run ./internal/nbgen`
// (then `go run ./internal/nbgen -execute` to refresh the outputs).
func TestUpToDate(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	g := &Generator{Root: root}
	files, err := g.Generate()
	if err != nil {
		t.Fatal(err)
	}
	drift, err := g.Drift(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drift {
		t.Error(d)
	}
	if len(drift) > 0 {
		t.Log("regenerate with: go run ./internal/nbgen")
	}
}

// TestProgramsListed: every notebook program (nb:main region) is run by
// the cells package's tests too.
func TestProgramsListed(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	g := &Generator{Root: root}
	if err := g.loadCells(); err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(filepath.Join(root, CellsDir, "programs_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range g.cells {
		if r.kind == "main" && !strings.Contains(string(list), strconv.Quote(name)) {
			t.Errorf("%s: program %s is not in %s/programs_test.go", r.file, name, CellsDir)
		}
	}
}

func TestMainBody(t *testing.T) {
	got, err := mainBody("func f() {\n\tx := 1\n\tif x > 0 {\n\t\tprintln(x)\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	want := "%%\nx := 1\nif x > 0 {\n\tprintln(x)\n}"
	if got != want {
		t.Errorf("mainBody = %q, want %q", got, want)
	}
	if _, err := mainBody("var x = 1"); err == nil {
		t.Error("mainBody accepted a region that is not one function")
	}
}

func TestRewriteLinks(t *testing.T) {
	in := "see [fwd](01-forward.md), [nb](../notebooks/02-backward.ipynb#x), ![f](../figures/a.png) and [web](https://go.dev)"
	want := "see [fwd](../derivation/01-forward.md), [nb](02-backward.ipynb#x), ![f](../figures/a.png) and [web](https://go.dev)"
	if got := rewriteLinks(in, "derivation", "notebooks"); got != want {
		t.Errorf("rewriteLinks:\n got %s\nwant %s", got, want)
	}
}
