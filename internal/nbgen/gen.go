package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Book is one notebook and the Markdown it is made from.
type Book struct {
	Notebook string // repository path of the .ipynb
	Source   string // repository path of its Markdown
}

// Books are the notebooks, in reading order.
var Books = []Book{
	{"notebooks/01-forward.ipynb", "derivation/01-forward.md"},
	{"notebooks/02-backward.ipynb", "derivation/02-backward.md"},
	{"notebooks/03-checkpointing.ipynb", "derivation/03-checkpointing.md"},
	{"notebooks/04-heads-and-gates.ipynb", "derivation/04-heads-and-gates.md"},
	{"notebooks/05-training.ipynb", "notebooks/src/05-training.md"},
	{"notebooks/06-verification.ipynb", "notebooks/src/06-verification.md"},
	{"notebooks/07-chunkwise.ipynb", "derivation/05-chunkwise.md"},
}

// MarkdownOnly are Markdown files whose code blocks nbgen maintains but
// that make no notebook.
var MarkdownOnly = []string{"derivation/README.md"}

// CellsDir holds the Go source of the notebooks' code cells.
const CellsDir = "notebooks/cells"

// SetupCell is every notebook's first code cell: GoNB builds each cell as
// a module of its own in a temporary directory; a go.work makes this
// repository's module (the notebook's parent directory) part of it, and
// %noautoget stops GoNB from running `go get`, which would ask the module
// proxy for versions it refuses to list.
const SetupCell = `%noautoget
!*rm -f go.work && go work init && go work use . "$GONB_DIR/.."`

// SetupNote introduces the setup cell in the first notebook, and
// SetupNoteShort in the others.
const (
	SetupNote = "**Setup.** The next cell starts every notebook. GoNB builds each cell as a Go module of " +
		"its own, in a temporary directory. `go work init` and `go work use` make a workspace of that " +
		"module and of this repository's (the notebook directory's parent, `$GONB_DIR/..`), so that the " +
		"cells import `gdn` and the rest of the repository as it is checked out. `%noautoget` stops GoNB " +
		"from running `go get` for the cells' imports, which would ask the module proxy for versions of " +
		"this repository's module that it does not have."
	SetupNoteShort = "The next cell links GoNB to this repository's module ([1-forward](01-forward.ipynb) explains it)."
)

// File is one generated file: Markdown (Content) or a notebook (Cells).
type File struct {
	Path    string
	Content []byte // Markdown files
	Cells   []Cell // notebooks
}

// IsNotebook reports whether f is a notebook.
func (f *File) IsNotebook() bool { return strings.HasSuffix(f.Path, ".ipynb") }

// Cell is a notebook cell as generated: its kind and source.
type Cell struct {
	Kind   string // "markdown" or "code"
	Source string
}

// Generator reads the sources under Root.
type Generator struct {
	Root  string
	cells map[string]region // notebooks/cells regions by name
}

type region struct {
	kind string // "cell" or "main"
	text string
	file string
}

// Generate builds every file in memory. A page shows each notebook code
// cell with the outputs of the committed notebook (see renderCell), so
// a page changes when its notebook is executed again: -execute regenerates
// the pages after executing.
func (g *Generator) Generate() ([]*File, error) {
	if err := g.loadCells(); err != nil {
		return nil, err
	}
	var files []*File
	for _, md := range MarkdownOnly {
		out, _, _, err := g.markdown(md, false)
		if err != nil {
			return nil, err
		}
		files = append(files, &File{Path: md, Content: []byte(strings.Join(out, "\n") + "\n")})
	}
	for _, b := range Books {
		out, cells, shown, err := g.markdown(b.Source, true)
		if err != nil {
			return nil, err
		}
		// The outputs a page shows are those the notebook keeps: a cell's
		// committed outputs while its source is unchanged.
		old, _ := readNotebook(filepath.Join(g.Root, b.Notebook)) // none yet: no outputs
		kept := build(cells, old)
		var images []*File
		for k := len(shown) - 1; k >= 0; k-- {
			sc := shown[k]
			block, imgs, err := g.renderCell(b, sc, cells[sc.cell].Source, kept.cells[sc.cell]["outputs"].([]any))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.Source, err)
			}
			out = slices.Insert(out, sc.line, block...)
			images = append(imgs, images...)
		}
		files = append(files, &File{Path: b.Source, Content: []byte(strings.Join(out, "\n") + "\n")}, &File{Path: b.Notebook, Cells: cells})
		files = append(files, images...)
	}
	return files, nil
}

var (
	codeDirective = regexp.MustCompile(`^<!-- code (\S+) -->$`)
	nbDirective   = regexp.MustCompile(`^<!-- nb:go ((?:\S+ )*\S+) -->$`)
	// mdLink is an inline link or image, [text](target): the text may hold
	// one level of brackets, as in a citation [[3]](README.md#references).
	mdLink = regexp.MustCompile(`(!?\[(?:[^\[\]]|\[[^\[\]]*\])*\])\(([^)\s]+)\)`)
)

// PageOnly, alone on its line, keeps the paragraph after it out of the
// notebook: text about the notebook that only the page needs.
const PageOnly = "<!-- page-only -->"

// EndShown closes what nbgen writes after an nb:go directive on a page:
// the cell's code and its outputs.
const EndShown = "<!-- end nb:go -->"

// shownCell is an nb:go directive of a page: the line of the page's output
// after which the cell is shown, and the cell's index in the notebook.
type shownCell struct {
	line, cell int
	names      []string
}

// markdown processes one Markdown source: it rewrites the code block after
// each code directive and, when nb, splits the result into notebook cells
// and returns where each code cell is to be shown on the page. The lines
// returned do not yet hold the shown cells.
func (g *Generator) markdown(rel string, nb bool) ([]string, []Cell, []shownCell, error) {
	src, err := os.ReadFile(filepath.Join(g.Root, rel))
	if err != nil {
		return nil, nil, nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
	var out []string
	var cells []Cell
	var shown []shownCell
	var md []string // the markdown cell being built
	flush := func() {
		text := strings.Trim(strings.Join(md, "\n"), "\n")
		if text != "" {
			cells = append(cells, Cell{Kind: "markdown", Source: g.notebookLinks(text, path.Dir(rel))})
		}
		md = md[:0]
	}
	setupDone := false
	inFence := false
	pageOnly := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if pageOnly && strings.TrimSpace(line) == "" && !inFence {
			pageOnly = false
		}
		if strings.HasPrefix(line, "```") || inFence {
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			out = append(out, line)
			if !pageOnly {
				md = append(md, line)
			}
			continue
		}
		if line == PageOnly {
			out = append(out, line)
			pageOnly = true
			continue
		}
		if m := codeDirective.FindStringSubmatch(line); m != nil {
			code, err := g.sourceCode(m[1])
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s:%d: %w", rel, i+1, err)
			}
			// Drop the block that follows, if any: it is regenerated.
			j := i + 1
			if j < len(lines) && strings.HasPrefix(lines[j], "```") {
				for j++; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				}
				if j == len(lines) {
					return nil, nil, nil, fmt.Errorf("%s:%d: unterminated code block after %s", rel, i+1, line)
				}
				i = j
			}
			block := []string{"```go"}
			block = append(block, strings.Split(code, "\n")...)
			block = append(block, "```")
			out = append(out, line)
			out = append(out, block...)
			md = append(md, block...)
			continue
		}
		if m := nbDirective.FindStringSubmatch(line); m != nil {
			out = append(out, line)
			if !nb {
				return nil, nil, nil, fmt.Errorf("%s:%d: nb:go directive in a file that makes no notebook", rel, i+1)
			}
			// Drop what a previous run showed after the directive, if any:
			// it is regenerated.
			if j := i + 1; j < len(lines) && (strings.HasPrefix(lines[j], "```") || lines[j] == "<details>") {
				for ; j < len(lines) && lines[j] != EndShown; j++ {
				}
				if j == len(lines) {
					return nil, nil, nil, fmt.Errorf("%s:%d: the cell shown after %s has no %s", rel, i+1, line, EndShown)
				}
				i = j
			}
			flush()
			if !setupDone {
				return nil, nil, nil, fmt.Errorf("%s:%d: a code cell before the first heading", rel, i+1)
			}
			names := strings.Fields(m[1])
			src, err := g.cellSource(names)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s:%d: %w", rel, i+1, err)
			}
			shown = append(shown, shownCell{line: len(out), cell: len(cells), names: names})
			cells = append(cells, Cell{Kind: "code", Source: src})
			continue
		}
		if strings.HasPrefix(line, "#") {
			flush()
			if nb && !setupDone && len(cells) > 0 {
				// The setup cell goes after the title and introduction,
				// explained where it first appears.
				note := SetupNoteShort
				if rel == Books[0].Source {
					note = SetupNote
				}
				cells = append(cells, Cell{Kind: "markdown", Source: note}, Cell{Kind: "code", Source: SetupCell})
				setupDone = true
			}
		}
		out = append(out, line)
		if !pageOnly {
			md = append(md, line)
		}
	}
	if inFence {
		return nil, nil, nil, fmt.Errorf("%s: unterminated code block", rel)
	}
	flush()
	if nb && !setupDone {
		return nil, nil, nil, fmt.Errorf("%s: a notebook needs a title and a second heading", rel)
	}
	return out, cells, shown, nil
}

// isProgram reports whether a code cell's source runs something (it has
// GoNB's %% line), as opposed to only declaring.
func isProgram(src string) bool {
	return strings.HasPrefix(src, "%%\n") || strings.Contains(src, "\n%%\n")
}

// ImageDir holds the images of notebook outputs that pages show and that
// are not one of figures/*.png.
const ImageDir = "notebooks/img"

// renderCell returns the lines that show notebook cell sc (source src, its
// kept outputs) on book b's page, and the image files they link. A program
// is shown with its outputs; a cell of declarations only is folded.
// Images that are one of figures/*.png link that file; others are written
// to ImageDir.
func (g *Generator) renderCell(b Book, sc shownCell, src string, outputs []any) ([]string, []*File, error) {
	var block []string
	code := append(append([]string{"```go"}, strings.Split(src, "\n")...), "```")
	if !isProgram(src) {
		block = append(block, "<details>", "<summary>The notebook's declarations: "+strings.Join(sc.names, ", ")+"</summary>", "")
		block = append(block, code...)
		block = append(block, "", "</details>", EndShown)
		return block, nil, nil
	}
	// On a page, the program's leading %% (GoNB's mark for "run this as
	// main") is left out.
	block = append(block, "```go")
	block = append(block, strings.Split(strings.TrimPrefix(src, "%%\n"), "\n")...)
	block = append(block, "```")
	var files []*File
	pageDir := path.Dir(b.Source)
	shownAny := false
	for n, o := range outputs {
		m, _ := o.(map[string]any)
		switch m["output_type"] {
		case "stream":
			text := strings.TrimRight(streamText(m["text"]), "\n")
			if text == "" {
				continue
			}
			block = append(block, "", "Output:", "", "```text")
			block = append(block, strings.Split(text, "\n")...)
			block = append(block, "```")
			shownAny = true
		case "display_data", "execute_result":
			data, _ := m["data"].(map[string]any)
			if png, ok := data["image/png"]; ok {
				img, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(streamText(png), "\n", ""))
				if err != nil {
					return nil, nil, fmt.Errorf("cell %d: image: %w", sc.cell, err)
				}
				target, err := g.figureFile(img)
				if err != nil {
					return nil, nil, err
				}
				if target == "" {
					target = path.Join(ImageDir, fmt.Sprintf("%s-%s-%d.png", strings.TrimSuffix(path.Base(b.Notebook), ".ipynb"), sc.names[len(sc.names)-1], n))
					files = append(files, &File{Path: target, Content: img})
				}
				rel, _ := filepath.Rel(pageDir, target)
				block = append(block, "", "!["+path.Base(target)+"]("+filepath.ToSlash(rel)+")")
				shownAny = true
			} else if text, ok := data["text/plain"]; ok {
				block = append(block, "", "```text", strings.TrimRight(streamText(text), "\n"), "```")
				shownAny = true
			}
		case "error":
			block = append(block, "", "```text", fmt.Sprintf("%v: %v", m["ename"], m["evalue"]), "```")
			shownAny = true
		}
	}
	if !shownAny {
		block = append(block, "", NoOutput)
	}
	block = append(block, EndShown)
	return block, files, nil
}

// NoOutput stands on a page for a program whose notebook cell has no output
// (yet): TestChecksShown fails on it.
const NoOutput = "*(no output: run `go run ./internal/nbgen -execute`)*"

// figureFile returns the repository path of the figures/*.png whose bytes
// are img, or "".
func (g *Generator) figureFile(img []byte) (string, error) {
	files, err := filepath.Glob(filepath.Join(g.Root, "figures", "*.png"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if bytes.Equal(b, img) {
			return path.Join("figures", filepath.Base(f)), nil
		}
	}
	return "", nil
}

// notebookLinks makes the relative links of Markdown in directory from
// relative to notebooks/, where the notebooks are, and points a link to a
// page that has a notebook at that notebook instead (without the fragment:
// Jupyter names headings' anchors differently).
func (g *Generator) notebookLinks(text, from string) string {
	pages := map[string]string{}
	for _, b := range Books {
		pages[b.Source] = b.Notebook
	}
	return rewriteLinks(text, from, "notebooks", pages)
}

// rewriteLinks makes the relative links of Markdown in directory from
// relative to directory to instead. A link whose target is a key of
// replace goes to its value instead, without its fragment.
func rewriteLinks(text, from, to string, replace map[string]string) string {
	return mdLink.ReplaceAllStringFunc(text, func(s string) string {
		m := mdLink.FindStringSubmatch(s)
		target := m[2]
		if isExternal(target) {
			return s
		}
		frag := ""
		if i := strings.IndexByte(target, '#'); i >= 0 {
			target, frag = target[:i], target[i:]
		}
		abs := path.Join(from, target)
		if r, ok := replace[abs]; ok {
			abs, frag = r, ""
		}
		if from == to && abs == path.Join(from, target) {
			return s
		}
		r, err := filepath.Rel(to, abs)
		if err != nil {
			return s
		}
		return m[1] + "(" + filepath.ToSlash(r) + frag + ")"
	})
}

// isExternal reports whether a link target is not a relative path in the
// repository: a URL, a fragment of the same document, an absolute path.
func isExternal(target string) bool {
	return strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "/") || strings.HasPrefix(target, "mailto:")
}

// sourceCode returns the text a code directive names: FILE#REGION or
// FILE:DECL.
func (g *Generator) sourceCode(spec string) (string, error) {
	if file, name, ok := strings.Cut(spec, "#"); ok {
		return g.taggedRegion(file, name)
	}
	if file, name, ok := strings.Cut(spec, ":"); ok {
		return g.declaration(file, name)
	}
	return "", fmt.Errorf("code directive %q: want FILE#REGION or FILE:DECL", spec)
}

var (
	gdnStart = regexp.MustCompile(`^\s*// gdn:(?:term|region) (\S+)\s*$`)
	gdnEnd   = regexp.MustCompile(`^\s*// gdn:end\s*$`)
)

// taggedRegion returns the lines between "// gdn:term NAME" (or
// "// gdn:region NAME") and the next "// gdn:end" in file.
func (g *Generator) taggedRegion(file, name string) (string, error) {
	src, err := os.ReadFile(filepath.Join(g.Root, file))
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		m := gdnStart.FindStringSubmatch(l)
		if m == nil || m[1] != name {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if gdnEnd.MatchString(lines[j]) {
				return trimBlank(lines[i+1 : j]), nil
			}
		}
		return "", fmt.Errorf("%s: region %s has no // gdn:end", file, name)
	}
	return "", fmt.Errorf("%s: no region %q (a line // gdn:term %s or // gdn:region %s)", file, name, name, name)
}

// declaration returns the source of the top-level declaration name (a
// function, a type, or Type.Method) in file, with its doc comment.
func (g *Generator) declaration(file, name string) (string, error) {
	full := filepath.Join(g.Root, file)
	src, err := os.ReadFile(full)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, full, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		var doc *ast.CommentGroup
		match := false
		switch d := d.(type) {
		case *ast.FuncDecl:
			doc = d.Doc
			n := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				n = recvName(d.Recv.List[0].Type) + "." + n
			}
			match = n == name
		case *ast.GenDecl:
			doc = d.Doc
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					match = match || s.Name.Name == name
				case *ast.ValueSpec:
					for _, id := range s.Names {
						match = match || id.Name == name
					}
				}
			}
		}
		if !match {
			continue
		}
		start := d.Pos()
		if doc != nil {
			start = doc.Pos()
		}
		text := string(src[fset.Position(start).Offset:fset.Position(d.End()).Offset])
		return text, nil
	}
	return "", fmt.Errorf("%s: no top-level declaration %q", file, name)
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

var (
	nbStart = regexp.MustCompile(`^// nb:(cell|main) (\S+)\s*$`)
	nbEnd   = regexp.MustCompile(`^// nb:end\s*$`)
)

// loadCells reads every region of notebooks/cells/*.go.
func (g *Generator) loadCells() error {
	g.cells = map[string]region{}
	files, err := filepath.Glob(filepath.Join(g.Root, CellsDir, "*.go"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(g.Root, file)
		lines := strings.Split(string(src), "\n")
		for i := 0; i < len(lines); i++ {
			m := nbStart.FindStringSubmatch(lines[i])
			if m == nil {
				if nbEnd.MatchString(lines[i]) {
					return fmt.Errorf("%s:%d: // nb:end without a start", rel, i+1)
				}
				continue
			}
			j := i + 1
			for ; j < len(lines) && !nbEnd.MatchString(lines[j]); j++ {
				if nbStart.MatchString(lines[j]) {
					return fmt.Errorf("%s:%d: region %s is not closed before the next one", rel, i+1, m[2])
				}
			}
			if j == len(lines) {
				return fmt.Errorf("%s:%d: region %s has no // nb:end", rel, i+1, m[2])
			}
			if old, dup := g.cells[m[2]]; dup {
				return fmt.Errorf("%s:%d: region %s is also in %s", rel, i+1, m[2], old.file)
			}
			text := trimBlank(lines[i+1 : j])
			if m[1] == "main" {
				text, err = mainBody(text)
				if err != nil {
					return fmt.Errorf("%s:%d: %w", rel, i+1, err)
				}
			}
			g.cells[m[2]] = region{kind: m[1], text: text, file: rel}
			i = j
		}
	}
	return nil
}

// mainBody turns "func name() {\n\tbody\n}" into GoNB's "%%\nbody".
func mainBody(text string) (string, error) {
	lines := strings.Split(text, "\n")
	notOne := errors.New("an nb:main region must be one function `func name() { ... }` and nothing else")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "func ") || !strings.HasSuffix(lines[0], "() {") || lines[len(lines)-1] != "}" {
		return "", notOne
	}
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+text, parser.ParseComments)
	if err != nil {
		return "", fmt.Errorf("nb:main region: %w", err)
	}
	if len(f.Decls) != 1 || len(f.Comments) > 0 && f.Comments[len(f.Comments)-1].End() > f.Decls[0].End() {
		return "", notOne
	}
	body := lines[1 : len(lines)-1]
	out := []string{"%%"}
	for _, l := range body {
		out = append(out, strings.TrimPrefix(l, "\t"))
	}
	return strings.Join(out, "\n"), nil
}

// cellSource joins the named regions into one code cell: declarations
// first, then at most one program (an nb:main region).
func (g *Generator) cellSource(names []string) (string, error) {
	var parts []string
	mains := 0
	for _, n := range names {
		r, ok := g.cells[n]
		if !ok {
			return "", fmt.Errorf("no region %q in %s (// nb:cell %s or // nb:main %s)", n, CellsDir, n, n)
		}
		if r.kind == "main" {
			mains++
		} else if mains > 0 {
			return "", fmt.Errorf("region %q: declarations must come before the program", n)
		}
		parts = append(parts, r.text)
	}
	if mains > 1 {
		return "", fmt.Errorf("regions %v: at most one nb:main per cell", names)
	}
	return strings.Join(parts, "\n\n"), nil
}

func trimBlank(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// Write writes every file, keeping the outputs of the notebook cells whose
// source did not change.
func (g *Generator) Write(files []*File) error {
	for _, f := range files {
		full := filepath.Join(g.Root, f.Path)
		var data []byte
		if f.IsNotebook() {
			old, _ := readNotebook(full) // a missing or broken notebook starts afresh
			nb := build(f.Cells, old)
			var err error
			if data, err = nb.Marshal(); err != nil {
				return err
			}
		} else {
			data = f.Content
		}
		if cur, err := os.ReadFile(full); err == nil && bytes.Equal(cur, data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("nbgen: wrote %s\n", f.Path)
	}
	stale, err := g.staleImages(files)
	if err != nil {
		return err
	}
	for _, p := range stale {
		if err := os.Remove(filepath.Join(g.Root, p)); err != nil {
			return err
		}
		fmt.Printf("nbgen: removed %s\n", p)
	}
	return nil
}

// staleImages lists the files of ImageDir that no page shows.
func (g *Generator) staleImages(files []*File) ([]string, error) {
	have, err := filepath.Glob(filepath.Join(g.Root, ImageDir, "*"))
	if err != nil {
		return nil, err
	}
	made := map[string]bool{}
	for _, f := range files {
		made[f.Path] = true
	}
	var stale []string
	for _, h := range have {
		rel := path.Join(ImageDir, filepath.Base(h))
		if !made[rel] {
			stale = append(stale, rel)
		}
	}
	return stale, nil
}

// Drift compares the files on disk with a regeneration: Markdown byte for
// byte, notebooks cell by cell (kind and source; outputs are not compared).
func (g *Generator) Drift(files []*File) ([]string, error) {
	var drift []string
	stale, err := g.staleImages(files)
	if err != nil {
		return nil, err
	}
	for _, p := range stale {
		drift = append(drift, p+": shown on no page")
	}
	for _, f := range files {
		full := filepath.Join(g.Root, f.Path)
		if !f.IsNotebook() {
			cur, err := os.ReadFile(full)
			if errors.Is(err, os.ErrNotExist) {
				drift = append(drift, f.Path+": missing")
				continue
			}
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(cur, f.Content) {
				drift = append(drift, fmt.Sprintf("%s: differs from a regeneration (code blocks, cells shown, outputs)%s", f.Path, firstDiff(string(cur), string(f.Content))))
			}
			continue
		}
		nb, err := readNotebook(full)
		if err != nil {
			drift = append(drift, fmt.Sprintf("%s: %v", f.Path, err))
			continue
		}
		have := nb.cells()
		if len(have) != len(f.Cells) {
			drift = append(drift, fmt.Sprintf("%s: %d cells, a regeneration has %d", f.Path, len(have), len(f.Cells)))
		}
		for i := range min(len(have), len(f.Cells)) {
			if have[i] != f.Cells[i] {
				drift = append(drift, fmt.Sprintf("%s: cell %d (%s) differs from a regeneration%s", f.Path, i, f.Cells[i].Kind, firstDiff(have[i].Source, f.Cells[i].Source)))
				break
			}
		}
	}
	return drift, nil
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		x, y := "(end)", "(end)"
		if i < len(al) {
			x = fmt.Sprintf("%q", shorten(al[i]))
		}
		if i < len(bl) {
			y = fmt.Sprintf("%q", shorten(bl[i]))
		}
		if x != y {
			return fmt.Sprintf(": line %d\n\thave: %s\n\twant: %s", i+1, x, y)
		}
	}
	return ""
}

// shorten cuts a line to 160 bytes for a message (a notebook's image is
// one line of base64).
func shorten(s string) string {
	if len(s) <= 160 {
		return s
	}
	return s[:160] + "..."
}

// findRoot returns the repository root: the nearest directory at or above
// the working directory holding go.mod and internal/nbgen.
func findRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "internal", "nbgen")); err == nil {
				return d, nil
			}
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("run nbgen inside the repository (no go.mod with internal/nbgen above the working directory)")
		}
		d = up
	}
}

// Notebooks lists the notebooks' repository paths.
func Notebooks() []string {
	var out []string
	for _, b := range Books {
		out = append(out, b.Notebook)
	}
	return slices.Clip(out)
}
