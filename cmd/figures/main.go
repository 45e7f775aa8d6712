// Command figures regenerates every figure of figures/ from the code, with
// gonum/plot, deterministically: the same code gives the same bytes.
//
// Usage, from the repository root:
//
//	go run ./cmd/figures          write figures/*.png
//	go run ./cmd/figures -check   exit 1 when a committed figure differs from a regeneration
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gdnback/gdnback/figures"
)

func main() {
	check := flag.Bool("check", false, "compare the committed figures with a regeneration; write nothing")
	dir := flag.String("dir", "figures", "directory of the figures")
	flag.Parse()
	if !*check {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			fatal(err)
		}
	}
	m, err := figures.RunMatrix()
	if err != nil {
		fatal(err)
	}
	for _, s := range m.Sums {
		s.Lines(os.Stdout)
	}
	stale := 0
	for _, f := range figures.All(m.Results, m.Backends) {
		b, err := f.PNG()
		if err != nil {
			fatal(err)
		}
		path := filepath.Join(*dir, f.Name)
		cur, err := os.ReadFile(path)
		same := err == nil && bytes.Equal(cur, b)
		switch {
		case *check && !same:
			fmt.Fprintf(os.Stderr, "figures: %s differs from a regeneration (%s); run go run ./cmd/figures\n", path, f.Title)
			stale++
		case *check:
			fmt.Printf("figures: %s up to date\n", path)
		case same:
			fmt.Printf("figures: %s unchanged\n", path)
		default:
			if err := os.WriteFile(path, b, 0o644); err != nil {
				fatal(err)
			}
			fmt.Printf("figures: wrote %s (%s)\n", path, f.Title)
		}
	}
	if stale > 0 {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "figures:", err)
	os.Exit(1)
}
