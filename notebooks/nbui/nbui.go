// Package nbui is what the notebooks import to show things: figures from
// figures/, gonum plots rendered to PNG, and the repository's paths. It
// lives outside internal/ because a GoNB notebook is a module of its own,
// which may not import another module's internal packages.
//
// Outside a notebook (in tests) the display functions print a one-line
// placeholder instead, so the cells' code runs anywhere.
package nbui

import (
	"bytes"
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"github.com/janpfeifer/gonb/gonbui"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Root returns the repository's root: the parent of the notebook's
// directory under GoNB ($GONB_DIR is the notebook's directory), else the
// nearest directory above the working directory that holds go.mod.
func Root() string {
	if d := os.Getenv("GONB_DIR"); d != "" {
		return filepath.Dir(d)
	}
	d, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "gdn")); err == nil {
				return d
			}
		}
		up := filepath.Dir(d)
		if up == d {
			panic("nbui: cannot find the repository root (no go.mod with gdn/ above the working directory)")
		}
		d = up
	}
}

// Figure shows figures/name from the repository.
func Figure(name string) {
	b, err := os.ReadFile(filepath.Join(Root(), "figures", name))
	if err != nil {
		panic(err)
	}
	PNG(b, "figures/"+name)
}

// PNG shows PNG bytes; what names them outside a notebook. It returns once
// GoNB has the image, so that a program that ends right after it does not
// lose it.
func PNG(b []byte, what string) {
	if gonbui.IsNotebook {
		gonbui.DisplayPNG(b)
		gonbui.Sync()
		return
	}
	fmt.Printf("[image %s: %d bytes of PNG]\n", what, len(b))
}

// Plot renders p at w x h to PNG, on white, and shows it.
func Plot(p *plot.Plot, w, h vg.Length) {
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96))}
	dc := draw.New(c)
	// An opaque white background, as figures/ has: viewers with a dark theme
	// show a transparent one as black.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	p.Draw(dc)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		panic(err)
	}
	PNG(buf.Bytes(), "plot "+p.Title.Text)
}
