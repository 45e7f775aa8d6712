package main

import (
	"encoding/json"
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
	for _, bad := range []string{
		"var x = 1",
		"func f() {\n\tx := 1\n}\n\nfunc g() {\n}",
		"func f() {\n\tx := 1\n}\n\n// g is more.\nvar g = 2\n\nfunc h() {\n}",
	} {
		if _, err := mainBody(bad); err == nil {
			t.Errorf("mainBody accepted %q, which is not one function", bad)
		}
	}
}

func TestRewriteLinks(t *testing.T) {
	in := "see [fwd](01-forward.md#x) [[3]](README.md#refs), [other](03-other.md#y), [nb](../notebooks/02-backward.ipynb#x), ![f](../figures/a.png) and [web](https://go.dev)"
	want := "see [fwd](01-forward.ipynb) [[3]](../derivation/README.md#refs), [other](../derivation/03-other.md#y), [nb](02-backward.ipynb#x), ![f](../figures/a.png) and [web](https://go.dev)"
	pages := map[string]string{"derivation/01-forward.md": "notebooks/01-forward.ipynb"}
	if got := rewriteLinks(in, "derivation", "notebooks", pages); got != want {
		t.Errorf("rewriteLinks:\n got %s\nwant %s", got, want)
	}
}

// TestCoalesce: outputs that timing cut and ordered differently are
// stored alike: each stream's text in one output, streams first.
func TestCoalesce(t *testing.T) {
	raw := func(ss ...string) []json.RawMessage {
		var out []json.RawMessage
		for _, s := range ss {
			out = append(out, json.RawMessage(s))
		}
		return out
	}
	a := coalesce(raw(`{"output_type":"stream","name":"stdout","text":["one\n","tw"]}`,
		`{"output_type":"display_data","data":{"image/png":"x"},"metadata":{"k":1}}`,
		`{"output_type":"stream","name":"stderr","text":"warn\n"}`,
		`{"output_type":"stream","name":"stdout","text":"o\nthree\n"}`,
		`{"output_type":"display_data","data":{"image/png":"y"},"metadata":{}}`))
	b := coalesce(raw(`{"output_type":"stream","name":"stderr","text":["warn\n"]}`,
		`{"output_type":"display_data","data":{"image/png":"x"},"metadata":{}}`,
		`{"output_type":"stream","name":"stdout","text":"one\ntwo\nthree\n"}`,
		`{"output_type":"display_data","data":{"image/png":"y"},"metadata":{}}`))
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("coalesce differs:\n%s\n%s", ja, jb)
	}
	want := `[{"name":"stdout","output_type":"stream","text":["one\n","two\n","three\n"]},` +
		`{"name":"stderr","output_type":"stream","text":["warn\n"]},` +
		`{"data":{"image/png":"x"},"metadata":{},"output_type":"display_data"},` +
		`{"data":{"image/png":"y"},"metadata":{},"output_type":"display_data"}]`
	if string(ja) != want {
		t.Errorf("coalesce =\n%s\nwant\n%s", ja, want)
	}
}

// TestRenderCell: a page shows a program with its text output, an image
// that is a committed figure as a link to it, and a cell of declarations
// folded; a program without output is marked.
func TestRenderCell(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "figures"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "figures", "a.png"), []byte("PNG-A"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &Generator{Root: root}
	b := Book{Notebook: "notebooks/01-x.ipynb", Source: "derivation/01-x.md"}
	outs := []any{
		map[string]any{"output_type": "stream", "name": "stdout", "text": []any{"one\n", "two\n"}},
		map[string]any{"output_type": "display_data", "data": map[string]any{"image/png": "UE5HLUE="}}, // PNG-A
		map[string]any{"output_type": "display_data", "data": map[string]any{"image/png": "UE5HLUI="}}, // PNG-B
	}
	block, files, err := g.renderCell(b, shownCell{names: []string{"run"}}, "%%\nfmt.Println(1)", outs)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(block, "\n")
	want := "```go\nfmt.Println(1)\n```\n\nOutput:\n\n```text\none\ntwo\n```\n\n![a.png](../figures/a.png)\n\n![01-x-run-2.png](../notebooks/img/01-x-run-2.png)\n" + EndShown
	if got != want {
		t.Errorf("program shown as\n%s\nwant\n%s", got, want)
	}
	if len(files) != 1 || files[0].Path != "notebooks/img/01-x-run-2.png" || string(files[0].Content) != "PNG-B" {
		t.Errorf("image files = %v, want notebooks/img/01-x-run-2.png holding PNG-B", files)
	}
	block, _, err = g.renderCell(b, shownCell{names: []string{"decls"}}, "func f() {}", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(block, "\n"); !strings.HasPrefix(got, "<details>") || !strings.Contains(got, "func f() {}") {
		t.Errorf("declarations shown as\n%s\nwant them folded in <details>", got)
	}
	block, _, err = g.renderCell(b, shownCell{names: []string{"run"}}, "%%\nx()", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(block, "\n"); !strings.Contains(got, NoOutput) {
		t.Errorf("a program without output shown as\n%s\nwant the mark %q", got, NoOutput)
	}
}
