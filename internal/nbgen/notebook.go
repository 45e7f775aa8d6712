package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// notebook is the nbformat 4 document, as much of it as nbgen writes.
type notebook struct {
	Cells []nbCell `json:"cells"`
}

type nbCell struct {
	CellType       string            `json:"cell_type"`
	ExecutionCount *json.Number      `json:"execution_count"`
	Source         json.RawMessage   `json:"source"` // a string or a list of lines
	Outputs        []json.RawMessage `json:"outputs"`
}

// source returns the cell's source as one string.
func (c nbCell) source() string {
	var s string
	if json.Unmarshal(c.Source, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(c.Source, &lines) == nil {
		return strings.Join(lines, "")
	}
	return ""
}

func (nb *notebook) cells() []Cell {
	out := make([]Cell, len(nb.Cells))
	for i, c := range nb.Cells {
		out[i] = Cell{Kind: c.CellType, Source: c.source()}
	}
	return out
}

func readNotebook(path string) (*notebook, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var nb notebook
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&nb); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &nb, nil
}

// doc is the notebook nbgen writes: every map has its keys sorted by the
// encoder, as Jupyter writes them, and nothing varies from run to run (no
// timings, no kernel version).
type doc struct {
	cells []map[string]any
}

// build makes the notebook of cells, keeping the outputs and execution
// counts of old's cells at the same index with the same kind and source.
func build(cells []Cell, old *notebook) *doc {
	d := &doc{}
	for i, c := range cells {
		m := map[string]any{
			"cell_type": c.Kind,
			"id":        fmt.Sprintf("cell-%02d", i),
			"metadata":  map[string]any{},
			"source":    lines(c.Source),
		}
		if c.Kind == "code" {
			m["execution_count"] = nil
			outs := []any{}
			if old != nil && i < len(old.Cells) && old.Cells[i].CellType == c.Kind && old.Cells[i].source() == c.Source {
				if n := old.Cells[i].ExecutionCount; n != nil {
					m["execution_count"] = *n
				}
				outs = coalesce(old.Cells[i].Outputs)
			}
			m["outputs"] = outs
		}
		d.cells = append(d.cells, m)
	}
	return d
}

// normalizeOutput decodes an output and drops what varies between runs:
// metadata that nbclient may add, and an execute_result's count is kept as
// is (it is the cell's sequential execution count).
func normalizeOutput(raw json.RawMessage) any {
	var o map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&o); err != nil {
		return json.RawMessage(raw)
	}
	if _, ok := o["metadata"]; ok {
		o["metadata"] = map[string]any{}
	}
	return o
}

// coalesce normalizes outputs (see normalizeOutput) into an order that
// does not depend on timing: one stream output per stream (stdout, then
// stderr) holding all of its text, then the other outputs (images, errors)
// in the order they came. GoNB forwards a program's standard output and its
// displays through two pipes, so the order in which they reach Jupyter, and
// how the text is cut into messages, vary from run to run; the text of each
// stream and the order of the displays do not. The notebooks' programs
// print before they display.
func coalesce(raw []json.RawMessage) []any {
	streams := map[string]map[string]any{}
	var names []string
	var rest []any
	for _, r := range raw {
		o := normalizeOutput(r)
		m, ok := o.(map[string]any)
		if !ok || m["output_type"] != "stream" {
			rest = append(rest, o)
			continue
		}
		name, _ := m["name"].(string)
		if s, ok := streams[name]; ok {
			s["text"] = streamText(s["text"]) + streamText(m["text"])
			continue
		}
		m["text"] = streamText(m["text"])
		streams[name] = m
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return streamRank(names[i]) < streamRank(names[j]) })
	out := []any{}
	for _, n := range names {
		s := streams[n]
		s["text"] = lines(s["text"].(string))
		out = append(out, s)
	}
	return append(out, rest...)
}

// streamRank orders streams: stdout, stderr, any other.
func streamRank(name string) int {
	switch name {
	case "stdout":
		return 0
	case "stderr":
		return 1
	}
	return 2
}

// streamText returns a stream output's text, stored as a string or a list
// of strings.
func streamText(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []string:
		return strings.Join(t, "")
	case []any:
		var b strings.Builder
		for _, x := range t {
			s, _ := x.(string)
			b.WriteString(s)
		}
		return b.String()
	}
	return ""
}

// lines splits text as Jupyter stores it: a list of lines, each but the
// last ending in "\n".
func lines(text string) []string {
	if text == "" {
		return []string{}
	}
	parts := strings.SplitAfter(text, "\n")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// Marshal writes the notebook as Jupyter does: one-space indentation,
// sorted keys, no HTML escaping, a final newline.
func (d *doc) Marshal() ([]byte, error) {
	top := map[string]any{
		"cells": d.cells,
		"metadata": map[string]any{
			"kernelspec": map[string]any{
				"display_name": "Go (gonb)",
				"language":     "go",
				"name":         "gonb",
			},
			"language_info": map[string]any{
				"codemirror_mode":    "",
				"file_extension":     ".go",
				"mimetype":           "text/x-go",
				"name":               "go",
				"nbconvert_exporter": "",
				"pygments_lexer":     "",
			},
		},
		"nbformat":       4,
		"nbformat_minor": 5,
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	e.SetIndent("", " ")
	if err := e.Encode(top); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Execute runs notebook f headless with jupyter nbconvert (in its own
// directory, so that GoNB's $GONB_DIR is notebooks/), then stores the
// outputs of the executed copy in f's notebook file.
func (g *Generator) Execute(f *File) error {
	full := filepath.Join(g.Root, f.Path)
	tmp, err := os.MkdirTemp("", "nbgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Execute a copy without outputs, so that nothing of the last run leaks.
	fresh, err := build(f.Cells, nil).Marshal()
	if err != nil {
		return err
	}
	in := filepath.Join(filepath.Dir(full), ".nbgen-"+filepath.Base(full))
	if err := os.WriteFile(in, fresh, 0o644); err != nil {
		return err
	}
	defer os.Remove(in)
	cmd := exec.Command("jupyter", "nbconvert", "--to", "notebook", "--execute",
		"--ExecutePreprocessor.kernel_name=gonb", "--ExecutePreprocessor.timeout=900",
		"--output-dir", tmp, "--output", filepath.Base(full), in)
	cmd.Dir = filepath.Dir(full)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("executing %s: %w\n%s", f.Path, err, tail(log.String(), 4000))
	}
	done, err := readNotebook(filepath.Join(tmp, filepath.Base(full)))
	if err != nil {
		return err
	}
	if got := done.cells(); len(got) != len(f.Cells) {
		return fmt.Errorf("%s: the executed notebook has %d cells, want %d", f.Path, len(got), len(f.Cells))
	}
	data, err := build(f.Cells, done).Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(full, data, 0o644)
}

// CompareOutputs compares each notebook executed into dir (same file name,
// as jupyter nbconvert --output-dir writes it) with the committed one, as
// Execute would store it: outputs normalized, sources regenerated.
func (g *Generator) CompareOutputs(files []*File, dir string) ([]string, error) {
	var diff []string
	for _, f := range files {
		if !f.IsNotebook() {
			continue
		}
		done, err := readNotebook(filepath.Join(dir, filepath.Base(f.Path)))
		if err != nil {
			return nil, err
		}
		if got := done.cells(); len(got) != len(f.Cells) {
			diff = append(diff, fmt.Sprintf("%s: the executed notebook has %d cells, a regeneration %d", f.Path, len(got), len(f.Cells)))
			continue
		}
		want, err := build(f.Cells, done).Marshal()
		if err != nil {
			return nil, err
		}
		have, err := os.ReadFile(filepath.Join(g.Root, f.Path))
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(have, want) {
			diff = append(diff, fmt.Sprintf("%s: the committed outputs differ from a fresh execution's%s", f.Path, firstDiff(string(have), string(want))))
		}
	}
	return diff, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
