// Command nbgen generates the project's Jupyter notebooks (notebooks/*.ipynb,
// for the GoNB kernel) from the Markdown of derivation/ and notebooks/src/
// and from tagged regions of the Go source, so that the code a notebook
// shows is the code that runs.
//
// Usage, from the repository root:
//
//	go run ./internal/nbgen            regenerate (keeps the outputs of unchanged cells)
//	go run ./internal/nbgen -execute   regenerate, then execute every notebook with
//	                                   jupyter nbconvert, store the outputs and show
//	                                   them on the pages
//	go run ./internal/nbgen -check     report drift: exit 1 when a notebook's cells or a
//	                                   Markdown file's code blocks differ from a regeneration
//	go run ./internal/nbgen -compare DIR
//	                                   exit 1 when the outputs of the notebooks executed into
//	                                   DIR (by jupyter nbconvert) differ from the committed ones
//
// The Markdown sources use three kinds of directive, each an HTML comment
// alone on its line (invisible on GitHub):
//
//	<!-- code gdn/step.go#dM -->          the region between "// gdn:term dM" (or
//	                                      "// gdn:region dM") and "// gdn:end"
//	<!-- code gdn/step.go:StepForward --> a top-level declaration with its doc
//	                                      comment (methods as Type.Method)
//	<!-- nb:go NAME... -->                a notebook code cell made of the regions
//	                                      NAME of notebooks/cells/*.go
//	<!-- page-only -->                    the paragraph after it stays out of the
//	                                      notebook
//
// A code directive is followed by a ```go block that nbgen writes and keeps
// equal to the source, in the Markdown file itself and in the notebook. After
// an nb:go directive, nbgen shows the cell on the page, with the outputs it
// has in the committed notebook, up to a line "<!-- end nb:go -->"; images
// link figures/ when they are one of its files, else notebooks/img/. In
// notebooks/cells, "// nb:cell NAME" ... "// nb:end" marks declarations
// copied into a cell as they are, and "// nb:main NAME" ... "// nb:end" a
// function whose body becomes the cell's program (after GoNB's %%). The
// cells package compiles and its tests run every program, so a cell that
// breaks fails `go test ./...` before it fails a notebook.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	check := flag.Bool("check", false, "report drift between the committed files and a regeneration; write nothing")
	execute := flag.Bool("execute", false, "after regenerating, execute each notebook with jupyter nbconvert and keep its outputs")
	only := flag.String("only", "", "with -execute: only the notebooks whose file name contains this string")
	compare := flag.String("compare", "", "compare the outputs of the notebooks executed into this directory with the committed ones; write nothing")
	flag.Parse()
	root, err := findRoot()
	if err != nil {
		fatal(err)
	}
	g := &Generator{Root: root}
	files, err := g.Generate()
	if err != nil {
		fatal(err)
	}
	if *compare != "" {
		diff, err := g.CompareOutputs(files, *compare)
		if err != nil {
			fatal(err)
		}
		for _, d := range diff {
			fmt.Fprintln(os.Stderr, d)
		}
		if len(diff) > 0 {
			fmt.Fprintln(os.Stderr, "nbgen: executed outputs differ from the committed ones: run `go run ./internal/nbgen -execute`")
			os.Exit(1)
		}
		fmt.Println("nbgen: the committed outputs are those of a fresh execution")
		return
	}
	if *check {
		drift, err := g.Drift(files)
		if err != nil {
			fatal(err)
		}
		if len(drift) > 0 {
			for _, d := range drift {
				fmt.Fprintln(os.Stderr, d)
			}
			fmt.Fprintln(os.Stderr, "nbgen: the notebooks or derivation/ are out of date: run `go run ./internal/nbgen` (and -execute for outputs)")
			os.Exit(1)
		}
		fmt.Printf("nbgen: %d files up to date\n", len(files))
		return
	}
	if err := g.Write(files); err != nil {
		fatal(err)
	}
	if *execute {
		for _, f := range files {
			if !f.IsNotebook() || !strings.Contains(f.Path, *only) {
				continue
			}
			fmt.Printf("nbgen: executing %s\n", f.Path)
			if err := g.Execute(f); err != nil {
				fatal(err)
			}
		}
		// The pages show the notebooks' outputs: regenerate them.
		files, err := g.Generate()
		if err != nil {
			fatal(err)
		}
		if err := g.Write(files); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "nbgen:", err)
	os.Exit(1)
}
