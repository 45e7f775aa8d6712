// Package figures draws the project's figures with gonum/plot. Every figure
// is computed from the code (the gdn reference, the verify matrix) with
// fixed seeds and rendered to PNG by the same rasterizer, so the same code
// gives the same bytes: `go run ./cmd/figures` writes them into figures/,
// and `go run ./cmd/figures -check` fails when a committed figure differs
// from a regeneration.
package figures

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/gonum/diff/fd"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/internal/upstream"
	"github.com/gdnback/gdnback/verify"
)

// Figure is one figure: its file name in figures/ and how to draw it.
type Figure struct {
	Name  string
	Title string // what it shows, for listings
	// Draw draws the figure onto c.
	Draw          func(c draw.Canvas) error
	Width, Height vg.Length
}

// All returns every figure. The verification matrix is drawn from results,
// a run of verify.RunAll (see RunMatrix).
func All(results []verify.Result, backends []string) []Figure {
	w, h := 6.5*vg.Inch, 4*vg.Inch
	return []Figure{
		{Name: "scratch.png", Title: "backward scratch against segment length C at the 27B shape", Draw: Scratch, Width: 9 * vg.Inch, Height: h},
		{Name: "fd-step.png", Title: "finite-difference error against step h", Draw: plotDraw(FDStep), Width: w, Height: h},
		{Name: "precision.png", Title: "float32 against float64 as T grows", Draw: Precision, Width: 9 * vg.Inch, Height: h},
		{Name: "heatmaps.png", Title: "a state M and its gradient dM", Draw: Heatmaps, Width: w, Height: 4.2 * vg.Inch},
		{Name: "chunk.png", Title: "the chunked form: sequential steps, flops per token, float32 error", Draw: Chunk, Width: 13 * vg.Inch, Height: h},
		{Name: "matrix.png", Title: "the verification matrix: case family against backend", Draw: func(c draw.Canvas) error {
			p, err := Matrix(results, backends)
			if err != nil {
				return err
			}
			p.Draw(c)
			return nil
		}, Width: w, Height: h},
	}
}

func plotDraw(f func() (*plot.Plot, error)) func(draw.Canvas) error {
	return func(c draw.Canvas) error {
		p, err := f()
		if err != nil {
			return err
		}
		p.Draw(c)
		return nil
	}
}

// PNG renders f at 96 dots per inch.
func (f Figure) PNG() ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(f.Width, f.Height), vgimg.UseDPI(96))
	dc := draw.New(img)
	// An opaque white background: PNG viewers on dark themes show a
	// transparent one as black.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if err := f.Draw(dc); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// The 27B hybrid's delta-net shape (Qwen3.5-27B: ssm.state_size 128,
// ssm.time_step_rank 48 value heads) at a context of 8192 tokens.
const (
	shapeS  = 128
	shapeHv = 48
	shapeT  = 8192
)

// Scratch draws the backward's scratch per (head, seq) against the segment
// length C at S = 128, T = 8192: on the left ours, gdn.ScratchStates =
// ceil(T/C) + C + 1 states, with the optimum C = ceil(sqrt(T)) marked; on
// the right how much more the upstream Metal kernel's n_ck + C + 3 states
// are, in percent (two states are too little to see on the left's
// logarithmic axis).
func Scratch(c draw.Canvas) error {
	mib := func(states int) float64 { return float64(states*shapeS*shapeS*4) / (1 << 20) }
	var ours, extra plotter.XYs
	for C := 1; C <= shapeT; C++ {
		n := gdn.ScratchStates(shapeT, C)
		ours = append(ours, plotter.XY{X: float64(C), Y: mib(n)})
		extra = append(extra, plotter.XY{X: float64(C), Y: 100 * float64(upstream.ScratchStates(shapeT, C)-n) / float64(n)})
	}
	C := int(math.Ceil(math.Sqrt(shapeT)))
	best := gdn.ScratchStates(shapeT, C)

	p := plot.New()
	p.Title.Text = fmt.Sprintf("Backward scratch per (head, seq): S = %d, T = %d", shapeS, shapeT)
	p.X.Label.Text = "segment length C (tokens)"
	p.Y.Label.Text = "MiB per (head, seq)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = powTicks{}, powTicks{}
	p.Add(plotter.NewGrid())
	lo, err := thickLine(ours, color.RGBA{R: 60, G: 120, B: 200, A: 255})
	if err != nil {
		return err
	}
	p.Add(lo)
	p.Legend.Add("ceil(T/C) + C + 1 states (gdn.ScratchStates)", lo)
	sc, err := blackDot(float64(C), mib(best))
	if err != nil {
		return err
	}
	vline, err := plotter.NewLine(plotter.XYs{{X: float64(C), Y: 5}, {X: float64(C), Y: mib(shapeT + 2)}})
	if err != nil {
		return err
	}
	vline.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	vline.Color = color.Gray{Y: 100}
	p.Add(vline, sc)
	p.Legend.Add(fmt.Sprintf("C = ceil(sqrt(T)) = %d: %d states = %.1f MiB", C, best, mib(best)), sc)
	p.Legend.Add(fmt.Sprintf("(%.0f MiB for %d value heads)", mib(best)*shapeHv, shapeHv))
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.YOffs = -vg.Points(6)
	p.Legend.XOffs = -vg.Points(6)
	p.Y.Min, p.Y.Max = 5, 20000

	q := plot.New()
	q.Title.Text = "Upstream Metal kernel: n_ck + C + 3 states"
	q.X.Label.Text = "segment length C (tokens)"
	q.Y.Label.Text = "% more scratch than ceil(T/C) + C + 1"
	q.X.Scale = plot.LogScale{}
	q.X.Tick.Marker = powTicks{}
	q.Add(plotter.NewGrid())
	lu, err := thickLine(extra, color.RGBA{R: 220, G: 80, B: 40, A: 255})
	if err != nil {
		return err
	}
	q.Add(lu)
	pct := 200 / float64(best)
	qs, err := blackDot(float64(C), pct)
	if err != nil {
		return err
	}
	ql, err := plotter.NewLabels(plotter.XYLabels{
		XYs:    plotter.XYs{{X: float64(C), Y: pct}},
		Labels: []string{fmt.Sprintf("C = %d: 2 states, 128 KiB, %.1f%%", C, pct)},
	})
	if err != nil {
		return err
	}
	ql.Offset = vg.Point{X: -vg.Points(60), Y: vg.Points(10)}
	q.Add(qs, ql)
	q.Y.Min, q.Y.Max = 0, 1.5
	sideBySide(c, []*plot.Plot{p, q})
	return nil
}

// thickLine is a 2-point line through xys in colour c.
func thickLine(xys plotter.XYs, c color.Color) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Width = vg.Points(2)
	l.Color = c
	return l, nil
}

// blackDot marks the point (x, y) with a black disc.
func blackDot(x, y float64) (*plotter.Scatter, error) {
	sc, err := plotter.NewScatter(plotter.XYs{{X: x, Y: y}})
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(4)
	sc.GlyphStyle.Color = color.Black
	return sc, nil
}

// fdCase is the small problem of the finite-difference figure.
var fdCase = verify.Case{Family: "fd", Sk: 16, Sv: 16, Hk: 1, Rep: 1, T: 8, Seqs: 1, KDA: true, State: true, Seed: 7}

// FDStep plots the error of finite-difference gradients against the step
// h: rounding error (about eps*|L|/h) falls as h grows, truncation error
// (h^2 for central differences, h^4 for the four-point stencil) rises, and
// their sum is a V. Only the gate enters the loss through a function that
// is not a polynomial (exp): the loss is affine in q and quadratic in each
// entry of k (k_t enters token t's u and its write, and nothing after is
// nonlinear in M_t), and central differences and the four-point stencil
// are exact for quadratics, so those lines have no truncation side at all.
// verify differences k with the four-point stencil at h = 1e-3, as g and
// beta: exact for k, its only error is rounding, about eps*|L|/h.
func FDStep() (*plot.Plot, error) {
	p := verify.Build[float64](fdCase)
	g, err := gdn.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		return nil, err
	}
	central := fd.Formula{Stencil: []fd.Point{{Loc: -1, Coeff: -0.5}, {Loc: 1, Coeff: 0.5}}, Derivative: 1}
	four := fd.Formula{Stencil: []fd.Point{{Loc: -2, Coeff: 1.0 / 12}, {Loc: -1, Coeff: -8.0 / 12}, {Loc: 1, Coeff: 8.0 / 12}, {Loc: 2, Coeff: -1.0 / 12}}, Derivative: 1}
	type series struct {
		name    string
		t       gdn.Tensor[float64]
		exact   []float64
		formula fd.Formula
	}
	all := []series{
		{"g, central", p.In.G, g.DG, central},
		{"g, four-point (verify: h = 1e-3)", p.In.G, g.DG, four},
		{"k, central: exact, L is quadratic in each k entry", p.In.K, g.DK, central},
		{"k, four-point (verify: h = 1e-3): exact too", p.In.K, g.DK, four},
		{"q, central: exact, L is affine in q (verify: h = 1)", p.In.Q, g.DQ, central},
	}
	pl := plot.New()
	pl.Title.Text = "Finite differences against the analytic gradient (float64)"
	pl.X.Label.Text = "step h"
	pl.Y.Label.Text = "max |numeric - analytic| / max |analytic|"
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker, pl.Y.Tick.Marker = powTicks{}, powTicks{}
	pl.Add(plotter.NewGrid())
	var lines []any
	for _, s := range all {
		// The first 16 coordinates: token 0's row of the first head.
		coords := make([]int, 16)
		for i := range coords {
			coords[i] = i * 5 % len(s.exact)
		}
		scale := 0.0
		for _, x := range s.exact {
			scale = max(scale, math.Abs(x))
		}
		var xys plotter.XYs
		for e := -13.0; e <= 0.01; e += 0.25 {
			h := math.Pow(10, e)
			f := s.formula
			f.Step = h
			worst := 0.0
			for _, c := range coords {
				idx := s.t.Off + c // the views of this case are dense
				x0 := s.t.Data[idx]
				num := fd.Derivative(func(x float64) float64 {
					s.t.Data[idx] = x
					L, err := verify.Loss(p)
					if err != nil {
						panic(err)
					}
					return L
				}, x0, &fd.Settings{Formula: f})
				s.t.Data[idx] = x0
				worst = max(worst, math.Abs(num-s.exact[c]))
			}
			// A difference of exactly zero has no place on a log axis.
			xys = append(xys, plotter.XY{X: h, Y: max(worst/scale, 1e-17)})
		}
		lines = append(lines, s.name, xys)
	}
	if err := plotutil.AddLinePoints(pl, lines...); err != nil {
		return nil, err
	}
	pl.Legend.Top = true
	pl.Legend.Left = false
	pl.Legend.YOffs = -vg.Points(6)
	pl.Legend.XOffs = -vg.Points(6)
	pl.Y.Min, pl.Y.Max = 1e-17, 1e6
	return pl, nil
}

// precisionTs are the sequence lengths of the precision figure.
var precisionTs = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

// PrecisionErrors returns, for each T, fla's error RMS(ref - x)/RMS(ref) of
// the float32 backward against the float64 one, per gradient, on one head
// of size 32 with a scalar gate and verify's gentle inputs, their log gates
// multiplied by gateScale: 1 gives g in (-1, -0.01), a state that forgets
// within a few tokens; 0.01 gives g in (-0.01, -0.0001), one that remembers
// hundreds, so rounding errors have time to add up.
func PrecisionErrors(gateScale float64) (names []string, Ts []int, errs [][]float64, err error) {
	names = []string{"dq", "dk", "dv", "dg", "dbeta", "dstate"}
	for _, T := range precisionTs {
		c := verify.Case{Family: "precision", Sk: 32, Sv: 32, Hk: 1, Rep: 1, T: T, Seqs: 1, State: true, Range: verify.Gentle, Seed: 11}
		p64 := verify.Build[float64](c)
		p32 := verify.Build[float32](c)
		// Both hold the same float32 values; scale them the same way.
		for i := range p64.In.G.Data {
			g := float32(p64.In.G.Data[i] * gateScale)
			p64.In.G.Data[i], p32.In.G.Data[i] = float64(g), g
		}
		g64, err := gdn.Backward(&p64.In, p64.DY, p64.DStates, p64.Opt)
		if err != nil {
			return nil, nil, nil, err
		}
		g32, err := gdn.Backward(&p32.In, p32.DY, p32.DStates, p32.Opt)
		if err != nil {
			return nil, nil, nil, err
		}
		ref := [][]float64{g64.DQ, g64.DK, g64.DV, g64.DG, g64.DBeta, g64.DState}
		got := [][]float32{g32.DQ, g32.DK, g32.DV, g32.DG, g32.DBeta, g32.DState}
		row := make([]float64, len(names))
		for i := range names {
			row[i] = verify.RMSRatio(ref[i], gdn.Convert[float64](got[i]))
		}
		Ts = append(Ts, T)
		errs = append(errs, row)
	}
	return names, Ts, errs, nil
}

// Precision draws PrecisionErrors for fast and slow gates side by side, one
// line per gradient, with test-backend-ops' limit (NMSE 1e-7, an RMS ratio
// of 3.2e-4).
func Precision(c draw.Canvas) error {
	var plots []*plot.Plot
	for _, panel := range []struct {
		title string
		scale float64
	}{
		{"fast gates, g in (-1, -0.01)", 1},
		{"slow gates, g in (-0.01, -0.0001)", 0.01},
	} {
		names, Ts, errs, err := PrecisionErrors(panel.scale)
		if err != nil {
			return err
		}
		p := plot.New()
		p.Title.Text = "float32 against float64, " + panel.title
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.X.Label.Text = "sequence length T"
		p.Y.Label.Text = "RMS(ref - x) / RMS(ref)"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = powTicks{}, powTicks{}
		p.Add(plotter.NewGrid())
		var lines []any
		for i, n := range names {
			var xys plotter.XYs
			for k, T := range Ts {
				xys = append(xys, plotter.XY{X: float64(T), Y: max(errs[k][i], 1e-12)})
			}
			lines = append(lines, n, xys)
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return err
		}
		limit, err := plotter.NewLine(plotter.XYs{{X: 1, Y: math.Sqrt(verify.MaxNMSE)}, {X: float64(Ts[len(Ts)-1]), Y: math.Sqrt(verify.MaxNMSE)}})
		if err != nil {
			return err
		}
		limit.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		limit.Color = color.RGBA{R: 200, A: 255}
		p.Add(limit)
		p.Legend.Add(fmt.Sprintf("%.1e = sqrt(1e-7): the NMSE limit 1e-7 as an RMS ratio", math.Sqrt(verify.MaxNMSE)), limit)
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		p.Legend.YOffs = -vg.Points(4)
		p.Legend.XOffs = vg.Points(4)
		p.Y.Min, p.Y.Max = 1e-8, 1
		plots = append(plots, p)
	}
	sideBySide(c, plots)
	return nil
}

// HeatmapStates returns the state M after token T/2 - 1 of a KDA head of
// size 32 over T = 64 tokens, and its gradient dL/dM under verify's loss
// (fla's sum(y*dy) + sum(state*dstate)): the second half of the sequence
// run as an op of its own, starting from M, whose dstate is dL/dM.
func HeatmapStates() (S int, M, dM []float64, err error) {
	c := verify.Case{Family: "heatmap", Sk: 32, Sv: 32, Hk: 1, Rep: 1, T: 64, Seqs: 1, KDA: true, State: true, Seed: 5}
	p := verify.Build[float64](c)
	half := c.T / 2
	view := func(t gdn.Tensor[float64], t0 int) gdn.Tensor[float64] {
		t.Ne[2] = half
		t.Off += t0 * t.Nb[2]
		return t
	}
	first := p.In
	first.Q, first.K, first.V, first.G, first.Beta = view(p.In.Q, 0), view(p.In.K, 0), view(p.In.V, 0), view(p.In.G, 0), view(p.In.Beta, 0)
	f, err := gdn.Forward(&first, gdn.Options{})
	if err != nil {
		return 0, nil, nil, err
	}
	M = f.States // slot 0: the state after the first half
	second := gdn.Inputs[float64]{
		Q: view(p.In.Q, half), K: view(p.In.K, half), V: view(p.In.V, half), G: view(p.In.G, half), Beta: view(p.In.Beta, half),
		State: gdn.Contiguous(M, [4]int{c.Sk, c.Sv, 1, 1}),
	}
	g, err := gdn.Backward(&second, view(p.DY, half), p.DStates, gdn.Options{})
	if err != nil {
		return 0, nil, nil, err
	}
	return c.Sk, M, g.DState, nil
}

// grid is a square matrix as plotter.GridXYZ: column i (key index) on x,
// row j (value index) on y, row 0 at the top.
type grid struct {
	n int
	z []float64
}

func (g grid) Dims() (c, r int)    { return g.n, g.n }
func (g grid) Z(c, r int) float64  { return g.z[(g.n-1-r)*g.n+c] }
func (g grid) X(c int) float64     { return float64(c) }
func (g grid) Y(r int) float64     { return float64(g.n - 1 - r) }
func (g grid) valueRange() float64 { return maxAbs(g.z) }

func maxAbs(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(v))
	}
	return m
}

// Heatmaps draws M and dM side by side, each on a diverging palette
// symmetric around zero (blue negative, red positive).
func Heatmaps(c draw.Canvas) error {
	S, M, dM, err := HeatmapStates()
	if err != nil {
		return err
	}
	var maps, bars []*plot.Plot
	for _, m := range []struct {
		title string
		z     []float64
	}{
		{"state M after token 31 (row j, column i)", M},
		{"its gradient dL/dM", dM},
	} {
		g := grid{n: S, z: m.z}
		r := g.valueRange()
		cm := moreland.SmoothBlueRed()
		cm.SetMin(-r)
		cm.SetMax(r)
		h := plotter.NewHeatMap(g, cm.Palette(255))
		h.Min, h.Max = -r, r
		p := plot.New()
		p.Title.Text = m.title
		p.X.Label.Text = "key index i"
		p.Y.Label.Text = "value index j"
		p.Add(h)
		p.Y.Tick.Marker = reversedTicks{n: S}
		maps = append(maps, p)
		// The colour bar: blue negative, white zero, red positive, on a
		// scale symmetric about zero set by the panel's largest entry.
		b := plot.New()
		b.Add(&plotter.ColorBar{ColorMap: cm})
		b.HideY()
		b.X.Label.Text = "value (blue < 0 < red)"
		b.X.Padding = 0
		bars = append(bars, b)
	}
	split := c.Min.Y + 0.2*(c.Max.Y-c.Min.Y)
	top, bottom := c, c
	top.Min.Y, bottom.Max.Y = split, split
	sideBySide(top, maps)
	sideBySide(bottom, bars)
	return nil
}

// powTicks marks the powers of ten of a log axis, labelled 1e-5, 1, 100,
// with unlabelled ticks at 2..9 times each power when the range is short.
type powTicks struct{}

func (powTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	lo, hi := int(math.Floor(math.Log10(min))), int(math.Ceil(math.Log10(max)))
	step := 1
	if hi-lo > 8 {
		step = 2
	}
	for e := lo; e <= hi; e++ {
		v := math.Pow(10, float64(e))
		if v >= min && v <= max {
			label := ""
			if (e-lo)%step == 0 {
				label = powLabel(e)
			}
			out = append(out, plot.Tick{Value: v, Label: label})
		}
		if hi-lo <= 4 {
			for k := 2; k <= 9; k++ {
				if w := float64(k) * v; w >= min && w <= max {
					out = append(out, plot.Tick{Value: w})
				}
			}
		}
	}
	return out
}

func powLabel(e int) string {
	switch {
	case e >= 0 && e <= 4:
		return fmt.Sprint(int(math.Pow(10, float64(e))))
	case e == -1:
		return "0.1"
	}
	return fmt.Sprintf("1e%d", e)
}

// reversedTicks labels a y axis whose row 0 is drawn at the top.
type reversedTicks struct{ n int }

func (t reversedTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for j := 0; j < t.n; j += 8 {
		out = append(out, plot.Tick{Value: float64(t.n - 1 - j), Label: fmt.Sprint(j)})
	}
	return out
}

// MatrixRun is one run of the verification matrix (verify.Matrix) on every
// backend of Backends: what the matrix figure draws.
type MatrixRun struct {
	Backends []string         // the backends' names, in order
	Results  []verify.Result  // every result, backend after backend
	Sums     []verify.Summary // one per backend
}

// RunMatrix runs the verification matrix on Backends.
func RunMatrix() (*MatrixRun, error) {
	backends, err := Backends()
	if err != nil {
		return nil, err
	}
	m := &MatrixRun{}
	for _, b := range backends {
		m.Backends = append(m.Backends, b.Name())
	}
	m.Sums = verify.RunAll(backends, verify.Matrix(), func(r verify.Result) { m.Results = append(m.Results, r) })
	return m, nil
}

// matrixCell counts one (family, backend) pair's results.
type matrixCell struct{ pass, fail, skip int }

// countCells counts results per (family, backend), keyed by their indices
// in families (in order of first appearance) and backends. Results of
// other backends are left out.
func countCells(results []verify.Result, backends []string) (families []string, cells map[[2]int]*matrixCell) {
	for _, r := range results {
		if !slices.Contains(families, r.Case.Family) {
			families = append(families, r.Case.Family)
		}
	}
	cells = map[[2]int]*matrixCell{}
	for _, r := range results {
		fi, bi := slices.Index(families, r.Case.Family), slices.Index(backends, r.Backend)
		if bi < 0 {
			continue
		}
		k := [2]int{fi, bi}
		if cells[k] == nil {
			cells[k] = &matrixCell{}
		}
		switch {
		case r.Skip != "":
			cells[k].skip++
		case r.OK():
			cells[k].pass++
		default:
			cells[k].fail++
		}
	}
	return families, cells
}

// Matrix draws results as a grid: one row per case family, one column per
// backend, each cell green when every case passed, red when any failed,
// grey when the backend supports none, with the counts written in.
func Matrix(results []verify.Result, backends []string) (*plot.Plot, error) {
	families, cells := countCells(results, backends)
	if len(families) == 0 || len(backends) == 0 {
		return nil, fmt.Errorf("figures: no results to draw")
	}
	p := plot.New()
	p.Title.Text = "Verification matrix: GATED_DELTA_NET_BACK cases per family"
	p.X.Label.Text = "backend"
	p.Y.Label.Text = ""
	p.Add(&matrixPlotter{rows: len(families), cols: len(backends), cells: cells})
	var xt, yt []plot.Tick
	for i, b := range backends {
		xt = append(xt, plot.Tick{Value: float64(i) + 0.5, Label: b})
	}
	for i, f := range families {
		yt = append(yt, plot.Tick{Value: float64(len(families)-1-i) + 0.5, Label: f})
	}
	p.X.Tick.Marker = plot.ConstantTicks(xt)
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	p.X.Min, p.X.Max = 0, float64(len(backends))
	p.Y.Min, p.Y.Max = 0, float64(len(families))
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.LineStyle.Width = 0
		a.Tick.LineStyle.Width = 0
		a.Tick.Length = 0
		a.Tick.Label.Font.Size = vg.Points(11)
	}
	return p, nil
}

type matrixPlotter struct {
	rows, cols int
	cells      map[[2]int]*matrixCell
}

func (m *matrixPlotter) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	style := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: text.XCenter, YAlign: text.YCenter, Handler: plot.DefaultTextHandler}
	style.Font.Size = vg.Points(12)
	for r := 0; r < m.rows; r++ {
		for b := 0; b < m.cols; b++ {
			cell := m.cells[[2]int{r, b}]
			y0 := float64(m.rows - 1 - r)
			x0 := float64(b)
			pad := 0.04
			pts := []vg.Point{
				{X: trX(x0 + pad), Y: trY(y0 + pad)}, {X: trX(x0 + 1 - pad), Y: trY(y0 + pad)},
				{X: trX(x0 + 1 - pad), Y: trY(y0 + 1 - pad)}, {X: trX(x0 + pad), Y: trY(y0 + 1 - pad)},
			}
			col := color.RGBA{R: 210, G: 210, B: 210, A: 255}
			label := "not run"
			if cell != nil {
				switch {
				case cell.fail > 0:
					col = color.RGBA{R: 230, G: 120, B: 110, A: 255}
					label = fmt.Sprintf("%d/%d FAIL", cell.pass, cell.pass+cell.fail)
				case cell.pass > 0:
					col = color.RGBA{R: 140, G: 210, B: 140, A: 255}
					label = fmt.Sprintf("%d/%d OK", cell.pass, cell.pass)
				default:
					label = "not supported"
				}
				if cell.skip > 0 && cell.pass+cell.fail > 0 {
					label += fmt.Sprintf(" (%d n/s)", cell.skip)
				}
			}
			c.FillPolygon(col, c.ClipPolygonXY(pts))
			c.FillText(style, vg.Point{X: trX(x0 + 0.5), Y: trY(y0 + 0.5)}, label)
		}
	}
}

func (m *matrixPlotter) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, float64(m.cols), 0, float64(m.rows)
}

// sideBySide draws plots in one row of tiles on c, their axes aligned.
func sideBySide(c draw.Canvas, plots []*plot.Plot) {
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(10), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, c)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
}
