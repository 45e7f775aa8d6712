package figures

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// chunkLs are the chunk lengths of the chunk figure's first two panels.
var chunkLs = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// ChunkCost returns, for each chunk length of chunkLs at S = 128 and
// T = 8192 (scalar gate, one snapshot), the number of sequential state
// updates (chunks; the recurrence takes T) and gdn.Flops per token of the
// chunked forward and backward, with the recurrence's flops per token
// (checkpointed backward, C = ceil(sqrt(T))) last.
func ChunkCost() (Ls []int, steps, fwd, bwd []float64, recFwd, recBwd float64) {
	s := gdn.Shape{Sk: shapeS, Sv: shapeS, Hk: 1, Hv: 1, T: shapeT, Seqs: 1, SeqsQK: 1, GateWidth: 1, Snapshots: 1}
	for _, L := range chunkLs {
		f, b := gdn.Flops(s, gdn.Options{Algo: gdn.Chunk, ChunkLen: L})
		Ls = append(Ls, L)
		steps = append(steps, float64(gdn.ChunkCount(shapeT, L, 1)))
		fwd = append(fwd, f/shapeT)
		bwd = append(bwd, b/shapeT)
	}
	f, b := gdn.Flops(s, gdn.Options{})
	return Ls, steps, fwd, bwd, f / shapeT, b / shapeT
}

// chunkPrecisionTs are the sequence lengths of the chunk figure's
// precision panel.
var chunkPrecisionTs = []int{1, 4, 16, 64, 256, 1024, 4096}

// ChunkPrecision returns, for each T, the worst over y, the final state and
// the six gradients of fla's error RMS(ref - x)/RMS(ref) of the float32
// recurrent and the float32 chunked (L = 64) algorithms against the float64
// recurrence, on one head of size 32 with verify's gentle inputs, scalar
// gate or KDA.
func ChunkPrecision(kda bool) (Ts []int, rec, chunk []float64, err error) {
	for _, T := range chunkPrecisionTs {
		c := verify.Case{Family: "chunk", Sk: 32, Sv: 32, Hk: 1, Rep: 1, T: T, Seqs: 1, KDA: kda, State: true, Range: verify.Gentle, Seed: 12}
		p64 := verify.Build[float64](c)
		f64, err := gdn.Forward(&p64.In, p64.Opt)
		if err != nil {
			return nil, nil, nil, err
		}
		g64, err := gdn.Backward(&p64.In, p64.DY, p64.DStates, p64.Opt)
		if err != nil {
			return nil, nil, nil, err
		}
		ref := [][]float64{f64.Y, f64.States, g64.DQ, g64.DK, g64.DV, g64.DG, g64.DBeta, g64.DState}
		p32 := verify.Build[float32](c)
		var worst [2]float64
		for i, opt := range []gdn.Options{p32.Opt, {Algo: gdn.Chunk}} {
			f, err := gdn.Forward(&p32.In, opt)
			if err != nil {
				return nil, nil, nil, err
			}
			g, err := gdn.Backward(&p32.In, p32.DY, p32.DStates, opt)
			if err != nil {
				return nil, nil, nil, err
			}
			got := [][]float32{f.Y, f.States, g.DQ, g.DK, g.DV, g.DG, g.DBeta, g.DState}
			for k := range ref {
				worst[i] = max(worst[i], verify.RMSRatio(ref[k], gdn.Convert[float64](got[k])))
			}
		}
		Ts = append(Ts, T)
		rec = append(rec, worst[0])
		chunk = append(chunk, worst[1])
	}
	return Ts, rec, chunk, nil
}

// Chunk draws what the chunked form buys, in three panels: sequential
// state updates against L, flops per token against L (the recurrence's as
// lines), and the float32 error of both algorithms as T grows.
func Chunk(c draw.Canvas) error {
	Ls, steps, fwd, bwd, recFwd, recBwd := ChunkCost()
	xmax := float64(Ls[len(Ls)-1])
	logPlot := func(title, x, y string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.X.Label.Text, p.Y.Label.Text = x, y
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = powTicks{}, powTicks{}
		p.Add(plotter.NewGrid())
		p.Legend.Top = false
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		return p
	}
	xys := func(xs []int, ys []float64) plotter.XYs {
		out := make(plotter.XYs, len(xs))
		for i := range xs {
			out[i] = plotter.XY{X: float64(xs[i]), Y: ys[i]}
		}
		return out
	}
	flat := func(y float64) plotter.XYs { return plotter.XYs{{X: 1, Y: y}, {X: xmax, Y: y}} }
	dashed := func(p *plot.Plot, name string, pts plotter.XYs, col color.Color) error {
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = col
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}

	p1 := logPlot(fmt.Sprintf("sequential state updates, T = %d", shapeT), "chunk length L", "steps")
	if err := plotutil.AddLinePoints(p1, "chunked: ceil(T/L)", xys(Ls, steps)); err != nil {
		return err
	}
	if err := dashed(p1, "recurrent: T", flat(shapeT), color.RGBA{R: 200, A: 255}); err != nil {
		return err
	}
	p1.Legend.Left = false
	p1.Y.Min, p1.Y.Max = 10, 3e4
	p1.Legend.Top = true

	p2 := logPlot(fmt.Sprintf("flops per token, S = %d (gdn.Flops)", shapeS), "chunk length L", "flops per token and head")
	if err := plotutil.AddLinePoints(p2, "chunked forward", xys(Ls, fwd), "chunked backward", xys(Ls, bwd)); err != nil {
		return err
	}
	if err := dashed(p2, "recurrent forward", flat(recFwd), color.RGBA{R: 200, A: 255}); err != nil {
		return err
	}
	if err := dashed(p2, "recurrent backward", flat(recBwd), color.RGBA{G: 140, A: 255}); err != nil {
		return err
	}
	p2.Legend.Left = false
	p2.Y.Min, p2.Y.Max = 5e3, 3e6

	p3 := logPlot("float32 against the float64 recurrence", "sequence length T", "worst RMS(ref - x) / RMS(ref)")
	var lines []any
	for _, kda := range []bool{false, true} {
		Ts, rec, chunk, err := ChunkPrecision(kda)
		if err != nil {
			return err
		}
		gate := "scalar"
		if kda {
			gate = "KDA"
		}
		lines = append(lines, "recurrent, "+gate, xys(Ts, rec), "chunked L 64, "+gate, xys(Ts, chunk))
	}
	if err := plotutil.AddLinePoints(p3, lines...); err != nil {
		return err
	}
	if err := dashed(p3, "NMSE 1e-7", plotter.XYs{{X: 1, Y: math.Sqrt(verify.MaxNMSE)}, {X: float64(chunkPrecisionTs[len(chunkPrecisionTs)-1]), Y: math.Sqrt(verify.MaxNMSE)}}, color.RGBA{R: 200, A: 255}); err != nil {
		return err
	}
	p3.Legend.Left = false
	p3.Y.Min, p3.Y.Max = 1e-11, 1e-2
	// Tiles without plot.Align: the panels' axes differ in kind, and
	// aligning them leaves uneven gaps under the titles.
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Points(14), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	for i, p := range []*plot.Plot{p1, p2, p3} {
		p.Draw(tiles.At(c, i, 0))
	}
	return nil
}
