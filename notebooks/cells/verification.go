package cells

// nb:cell verify-imports
import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/plot/vg"

	"github.com/gdnback/gdnback/figures"
	"github.com/gdnback/gdnback/notebooks/nbui"
	"github.com/gdnback/gdnback/verify"
)

// nb:end

// nb:cell verify-show
// showFigure renders figure name afresh, shows it, and says whether it is
// byte for byte the committed figures/name.
func showFigure(all []figures.Figure, name string) {
	for _, f := range all {
		if f.Name != name {
			continue
		}
		b, err := f.PNG()
		if err != nil {
			panic(err)
		}
		cur, err := os.ReadFile(filepath.Join(nbui.Root(), "figures", name))
		fmt.Printf("figures/%s (%s): the committed file is this rendering, byte for byte: %v\n", name, f.Title, err == nil && bytes.Equal(cur, b))
		nbui.PNG(b, "figures/"+name)
		return
	}
	panic("no figure " + name)
}

// nb:end

// nb:main verify-matrix
func verifyMatrix() {
	// Every backend this build has (figures.Backends), on every case of
	// the matrix.
	m, err := figures.RunMatrix()
	if err != nil {
		panic(err)
	}
	for _, r := range m.Results {
		if !r.OK() && r.Skip == "" {
			fmt.Println(r.Line())
		}
	}
	failed := false
	for _, s := range m.Sums {
		s.Lines(os.Stdout)
		failed = failed || !s.OK()
	}
	fmt.Printf("%d cases in %d families\n", len(verify.Matrix()), len(verify.Families(verify.Matrix())))
	p, err := figures.Matrix(m.Results, m.Backends)
	if err != nil {
		panic(err)
	}
	nbui.Plot(p, 6.5*vg.Inch, 4*vg.Inch)
	if failed {
		panic("a backend failed the verification matrix")
	}
}

// nb:end

// nb:main verify-scratch
func verifyScratch() {
	showFigure(figures.All(nil, nil), "scratch.png")
}

// nb:end

// nb:main verify-fd-step
func verifyFDStep() {
	showFigure(figures.All(nil, nil), "fd-step.png")
}

// nb:end

// nb:main verify-precision
func verifyPrecision() {
	showFigure(figures.All(nil, nil), "precision.png")
}

// nb:end

// nb:main verify-heatmaps
func verifyHeatmaps() {
	// The singular values of the two matrices drawn: how many of them are
	// above 1% of the largest.
	S, M, dM, err := figures.HeatmapStates()
	if err != nil {
		panic(err)
	}
	for _, m := range []struct {
		name string
		z    []float64
	}{{"M", M}, {"dL/dM", dM}} {
		var svd mat.SVD
		if !svd.Factorize(mat.NewDense(S, S, m.z), mat.SVDNone) {
			panic("SVD failed")
		}
		sv := svd.Values(nil)
		n := 0
		for _, x := range sv {
			if x > 0.01*sv[0] {
				n++
			}
		}
		fmt.Printf("%-6s singular values above 1%% of the largest: %d of %d (largest %.2g, smallest %.0e)\n", m.name, n, S, sv[0], sv[S-1])
	}
	showFigure(figures.All(nil, nil), "heatmaps.png")
}

// nb:end
