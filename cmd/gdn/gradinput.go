package main

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// gradCase is a grad input, in fla's layout, every array float64.
type gradCase struct {
	B, T, H, HV, K, V int
	kda               bool
	scale             float64 // 0: the default, 1/sqrt(K)
	hasH0, hasDht     bool
	q, k, v, g, beta  []float64
	do                []float64
	h0, dht           []float64 // nil when absent
}

func (c *gradCase) gate() string {
	if c.kda {
		return "kda"
	}
	return "scalar"
}

// gradShapes are the shapes of grad's input arrays in fla's layout, by
// dimension name; g is [B, T, HV] or, for KDA, [B, T, HV, K].
var gradShapes = map[string][]string{
	"q": {"B", "T", "H", "K"}, "k": {"B", "T", "H", "K"},
	"v": {"B", "T", "HV", "V"}, "g": {"B", "T", "HV"}, "beta": {"B", "T", "HV"}, "do": {"B", "T", "HV", "V"},
	"h0": {"B", "HV", "K", "V"}, "dht": {"B", "HV", "K", "V"},
}

// gradInputs lists grad's arrays in the order they are read.
var gradInputs = []string{"q", "k", "v", "g", "beta", "do", "h0", "dht"}

// dims checks the shape of array name against want (named dimensions, e.g.
// B, T, H, K), filling in dimensions not yet known, and names the array,
// the dimension and the expected shape in its error.
func dims(name string, h *npyHeader, want []string, known map[string]int) error {
	bad := len(h.shape) != len(want)
	for i := 0; !bad && i < len(want); i++ {
		if h.shape[i] < 1 {
			return fmt.Errorf("%s: shape %s (%s): %s = %d, want at least 1", name, pyShape(h.shape), h.dtype, want[i], h.shape[i])
		}
		if n, ok := known[want[i]]; ok && h.shape[i] != n {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("%s: shape %s (%s), want [%s] = %s", name, pyShape(h.shape), h.dtype, strings.Join(want, ", "), expected(want, known))
	}
	for i, d := range want {
		known[d] = h.shape[i]
	}
	return nil
}

// expected writes the shape want, with the known sizes filled in.
func expected(want []string, known map[string]int) string {
	parts := make([]string, len(want))
	for i, d := range want {
		if n, ok := known[d]; ok {
			parts[i] = fmt.Sprint(n)
		} else {
			parts[i] = d
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func pyShape(s []int) string {
	if len(s) == 1 {
		return fmt.Sprintf("(%d,)", s[0])
	}
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// inspectGrad checks the headers of the input arrays against each other
// and returns the case's sizes, decoding nothing but the scalar scale.
func inspectGrad(f *npzFile) (*gradCase, error) {
	known := map[string]int{}
	c := &gradCase{}
	for _, name := range gradInputs {
		optional := name == "h0" || name == "dht"
		if optional && !f.has(name) {
			continue
		}
		h, err := f.header(name)
		if errors.Is(err, errMissing) {
			want := "[" + strings.Join(gradShapes[name], ", ") + "]"
			if name == "g" {
				want = "[B, T, HV] or [B, T, HV, K]"
			}
			return nil, fmt.Errorf("%w (want float32 or float64 %s)", err, want)
		}
		if err != nil {
			return nil, err
		}
		want := gradShapes[name]
		if name == "g" && len(h.shape) == 4 {
			want = append(want[:3:3], "K")
			c.kda = true
		}
		if err := dims(name, h, want, known); err != nil {
			if name == "g" {
				return nil, fmt.Errorf("%w, or [B, T, HV, K] = %s for KDA", err, expected([]string{"B", "T", "HV", "K"}, known))
			}
			return nil, err
		}
		if name == "v" && known["HV"]%known["H"] != 0 {
			return nil, fmt.Errorf("v: HV = %d value heads is not a multiple of H = %d q/k heads", known["HV"], known["H"])
		}
		c.hasH0 = c.hasH0 || name == "h0"
		c.hasDht = c.hasDht || name == "dht"
	}
	c.B, c.T, c.H, c.K, c.HV, c.V = known["B"], known["T"], known["H"], known["K"], known["HV"], known["V"]
	if f.has("scale") {
		h, err := f.header("scale")
		if err != nil {
			return nil, err
		}
		if h.n != 1 || len(h.shape) > 1 {
			return nil, fmt.Errorf("scale: shape %s, want a 0-d array (a scalar)", pyShape(h.shape))
		}
		a, err := f.read("scale")
		if err != nil {
			return nil, err
		}
		c.scale = a.data[0]
		if c.scale == 0 || math.IsNaN(c.scale) || math.IsInf(c.scale, 0) {
			return nil, fmt.Errorf("scale: %g, want a finite nonzero number", c.scale)
		}
	}
	return c, nil
}

// load decodes the input arrays into c.
func (c *gradCase) load(f *npzFile) error {
	dst := map[string]*[]float64{"q": &c.q, "k": &c.k, "v": &c.v, "g": &c.g, "beta": &c.beta, "do": &c.do, "h0": &c.h0, "dht": &c.dht}
	for _, name := range gradInputs {
		if (name == "h0" && !c.hasH0) || (name == "dht" && !c.hasDht) {
			continue
		}
		a, err := f.read(name)
		if err != nil {
			return err
		}
		*dst[name] = a.data
	}
	return nil
}

// nonFinite counts the NaN and infinite values of x.
func nonFinite(x []float64) (nan, inf int) {
	for _, v := range x {
		switch {
		case v != v:
			nan++
		case math.IsInf(v, 0):
			inf++
		}
	}
	return nan, inf
}

// finiteReport describes, one line each, the arrays that hold NaN or Inf;
// none gives nil.
func finiteReport(kind string, names []string, data [][]float64) []string {
	var out []string
	for i, x := range data {
		if nan, inf := nonFinite(x); nan+inf > 0 {
			out = append(out, fmt.Sprintf("warning: %s %s holds %d NaN and %d Inf of %d values", kind, names[i], nan, inf, len(x)))
		}
	}
	return out
}
