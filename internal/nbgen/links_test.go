package main

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestLinks: every relative link of the repository's Markdown (README.md,
// derivation/, notebooks/src/) and of the committed notebooks' Markdown
// cells names a file that exists, and a fragment into a Markdown file names
// one of its headings. A notebook links neither itself nor a page that has
// a notebook (it links that notebook).
func TestLinks(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "shared" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(rel, ".md"):
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, e := range brokenLinks(root, rel, string(b)) {
				t.Errorf("%s: %s", rel, e)
			}
		case strings.HasSuffix(rel, ".ipynb"):
			nb, err := readNotebook(p)
			if err != nil {
				return err
			}
			for i, c := range nb.cells() {
				if c.Kind != "markdown" {
					continue
				}
				for _, e := range brokenLinks(root, rel, c.Source) {
					t.Errorf("%s: cell %d: %s", rel, i, e)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		full := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("derivation/01-forward.md", "# 1. The forward\n\n## Term dS_prev: the decay\n")
	write("figures/a.png", "")
	write("derivation/README.md", "# The derivation\n")
	write("notebooks/01-forward.ipynb", "{}")
	text := "[ok](01-forward.md#term-ds_prev-the-decay), ![f](../figures/a.png), [web](https://go.dev), " +
		"[gone](02-backward.md), [bad anchor](01-forward.md#nope), [up](../derivation/01-forward.md#1-the-forward), " +
		"[fence](x.md)\n```\n[in code](none.md)\n```\n[self](#term-ds_prev-the-decay) [no](#missing) [[3]](README.md#refs)"
	got := brokenLinks(root, "derivation/01-forward.md", text)
	want := []string{"02-backward.md", "01-forward.md#nope", "x.md", "#missing", "README.md#refs"}
	if len(got) != len(want) {
		t.Fatalf("brokenLinks = %q, want one error for each of %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], "("+w+")") {
			t.Errorf("error %d = %q, want one about (%s)", i, got[i], w)
		}
	}
	if got := brokenLinks(root, "notebooks/01-forward.ipynb", "[page](../derivation/README.md)"); len(got) != 0 {
		t.Errorf("a notebook's link to a page without a notebook of its own: %q", got)
	}
	if got := brokenLinks(root, "notebooks/01-forward.ipynb", "[me](01-forward.ipynb) [page](../derivation/01-forward.md)"); len(got) != 2 {
		t.Errorf("a notebook linking itself and a page that has a notebook: %q, want two errors", got)
	}
}

// brokenLinks returns a message for each relative link of the Markdown text
// of file rel (a repository path) that does not resolve, outside code.
func brokenLinks(root, rel, text string) []string {
	var errs []string
	dir := path.Dir(rel)
	pageOf := map[string]string{}
	for _, b := range Books {
		pageOf[b.Source] = b.Notebook
	}
	for _, line := range proseLines(text) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target := m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			abs := rel
			if file != "" {
				abs = path.Join(dir, file)
			}
			link := m[1] + "(" + target + ")"
			if strings.HasPrefix(abs, "../") || strings.HasPrefix(target, "/") {
				errs = append(errs, link+": outside the repository")
				continue
			}
			if strings.HasSuffix(rel, ".ipynb") {
				if abs == rel && frag == "" {
					errs = append(errs, link+": the notebook links itself")
				}
				if nb, ok := pageOf[abs]; ok {
					errs = append(errs, link+": a notebook links the notebook "+nb+", not its page")
				}
			}
			st, err := os.Stat(filepath.Join(root, filepath.FromSlash(abs)))
			if err != nil {
				errs = append(errs, link+": no such file "+abs)
				continue
			}
			if frag == "" || st.IsDir() || !strings.HasSuffix(abs, ".md") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(abs)))
			if err != nil {
				errs = append(errs, link+": "+err.Error())
				continue
			}
			if !anchors(string(b))[frag] {
				errs = append(errs, link+": no heading of "+abs+" has the anchor #"+frag)
			}
		}
	}
	return errs
}

// proseLines returns the lines of Markdown text outside fenced code.
func proseLines(text string) []string {
	var out []string
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, l)
		}
	}
	return out
}

var headingLine = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// anchors returns the anchors GitHub gives the headings of a Markdown
// file: the text in lower case, without punctuation other than '-' and
// '_', spaces made '-', and "-1", "-2", ... on repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(text) {
		m := headingLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// TestChecksShown: every program cell of every notebook has an output in
// the committed notebook, and its page shows it (an empty check would leave
// the reader with "the cell below ..." and nothing below).
func TestChecksShown(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range Books {
		nb, err := readNotebook(filepath.Join(root, b.Notebook))
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range nb.Cells {
			if c.CellType == "code" && isProgram(c.source()) && len(c.Outputs) == 0 {
				t.Errorf("%s: cell %d runs a program but has no output", b.Notebook, i)
			}
		}
		page, err := os.ReadFile(filepath.Join(root, b.Source))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(page), NoOutput) {
			t.Errorf("%s: a cell is shown without its output", b.Source)
		}
	}
}
