package verify

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/gdnback/gdnback/gdn"
)

// Limits of the checks, the field's own where it has one.
const (
	// MaxNMSE is test-backend-ops' limit of a backend against the CPU, here
	// of float32 against the float64 reference, per output.
	MaxNMSE = 1e-7
	// MaxFDRelErr bounds the float64 backward against central differences:
	// the worst error relative to the tensor's largest gradient entry.
	MaxFDRelErr = 1e-6
	// MaxGradModeErr is test-backend-ops' grad-mode limit on
	// mean |(gn - ga)/(gn + ga)|, applied to a float32 backward against the
	// float64 finite differences.
	MaxGradModeErr = 1e-4
	// gradModeFloor: entries below this fraction of the tensor's largest
	// gradient count as agreeing in the grad-mode error (see GradModeErr).
	gradModeFloor = 1e-6
	// gradModeAbsFloor covers a gradient that is zero everywhere (dg with a
	// zero initial state and T = 1), where the only numbers are rounding.
	gradModeAbsFloor = 1e-12
)

// Check is one measured quantity of a case against its limit.
type Check struct {
	Name  string
	Value float64
	Limit float64
	// Exact checks demand bit-identical results; Value is the number of
	// differing elements.
	Exact bool
}

// OK reports whether the check passed (NaN fails).
func (c Check) OK() bool {
	if c.Exact {
		return c.Value == 0
	}
	return c.Value <= c.Limit
}

func (c Check) String() string {
	if c.Exact {
		return fmt.Sprintf("%s: %g elements differ", c.Name, c.Value)
	}
	return fmt.Sprintf("%s = %.3g (limit %.0e)", c.Name, c.Value, c.Limit)
}

// Result is one case run on one backend.
type Result struct {
	Case    Case
	Backend string
	Checks  []Check
	Err     error  // the case could not run
	Skip    string // why the backend does not run the case ("" when it does)
}

// OK reports whether the case ran and every check passed.
func (r Result) OK() bool {
	if r.Err != nil || r.Skip != "" {
		return false
	}
	for _, c := range r.Checks {
		if !c.OK() {
			return false
		}
	}
	return true
}

// Line is the result in test-backend-ops' manner:
// GATED_DELTA_NET_BACK(case): OK, FAIL with the failing checks, or not
// supported with the reason.
func (r Result) Line() string {
	head := "GATED_DELTA_NET_BACK(" + r.Case.String() + "): "
	switch {
	case r.Skip != "":
		return head + "not supported [" + r.Backend + "]: " + r.Skip
	case r.Err != nil:
		return head + "FAIL: " + r.Err.Error()
	case r.OK():
		return head + "OK"
	}
	var bad []string
	for _, c := range r.Checks {
		if !c.OK() {
			bad = append(bad, c.String())
		}
	}
	return head + "FAIL: " + strings.Join(bad, "; ")
}

// Worst returns the check of the given name prefix with the largest value
// relative to its limit, for summaries.
func (r Result) Worst(prefix string) (Check, bool) {
	var best Check
	found := false
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, prefix) && (!found || c.Value/c.Limit > best.Value/best.Limit) {
			best, found = c, true
		}
	}
	return best, found
}

// Reference is the float64 reference's outputs for a case, and its finite
// differences, computed once and shared by every backend.
type Reference struct {
	Case   Case
	Y      []float64
	States []float64
	Grads  *gdn.Grads[float64]
	FD     []InputGrad
}

// NewReference runs the float64 reference and the finite differences.
func NewReference(c Case) (*Reference, error) {
	p := buildFD(c)
	f, err := gdn.Forward(&p.In, p.Opt)
	if err != nil {
		return nil, err
	}
	g, err := gdn.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		return nil, err
	}
	fdg, err := finiteDifferences(p, g)
	if err != nil {
		return nil, err
	}
	return &Reference{Case: c, Y: f.Y, States: f.States, Grads: g, FD: fdg}, nil
}

// Run checks backend b on case c against ref (NewReference(c)):
//   - NMSE of y, every state slot and every gradient block against the
//     float64 reference, at most MaxNMSE;
//   - the backward's gradients against the finite differences by the
//     grad-mode rule (MaxGradModeErr);
//   - two runs of the backward give bit-identical packed output;
//   - for the CPU backend, also: the float64 backward against the finite
//     differences (MaxFDRelErr), checkpointed against keep-every-state and
//     one thread against many, bit for bit.
func Run(b gdn.Backend, ref *Reference) Result {
	c := ref.Case
	res := Result{Case: c, Backend: b.Name()}
	s := ref.Grads.Shape
	if why := b.Supports(s, c.Options()); why != nil {
		res.Skip = why.Error()
		return res
	}
	p := Build[float32](c)
	y, states, err := b.Forward(&p.In, p.Opt)
	if err != nil {
		res.Err = fmt.Errorf("forward: %w", err)
		return res
	}
	if len(y) != len(ref.Y) || len(states) != len(ref.States) {
		res.Err = fmt.Errorf("forward: %d and %d outputs, want %d and %d", len(y), len(states), len(ref.Y), len(ref.States))
		return res
	}
	res.add("nmse(y)", NMSE(ref.Y, gdn.Convert[float64](y)), MaxNMSE)
	res.add("nmse(states)", NMSE(ref.States, gdn.Convert[float64](states)), MaxNMSE)
	packed, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		res.Err = fmt.Errorf("backward: %w", err)
		return res
	}
	g, err := gdn.NewGrads(s, packed)
	if err != nil {
		res.Err = fmt.Errorf("backward: %w", err)
		return res
	}
	got := g.Blocks()
	want := ref.Grads.Blocks()
	for i, name := range gdn.BlockNames {
		res.add("nmse("+name+")", NMSE(want[i], gdn.Convert[float64](got[i])), MaxNMSE)
	}
	// Grad mode: the backend's gradient at the finite-difference
	// coordinates against the numeric gradient.
	for i, fg := range ref.FD {
		ga := make([]float64, len(fg.Coords))
		for k, c := range fg.Coords {
			ga[k] = float64(got[i][c])
		}
		res.add("gradmode(d"+fg.Name+")", GradModeErr(fg.Numeric, ga, gradModeFloor*fg.Scale+gradModeAbsFloor), MaxGradModeErr)
	}
	again, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		res.Err = fmt.Errorf("backward, second run: %w", err)
		return res
	}
	res.exact("rerun", packed, again)

	if _, ok := b.(gdn.CPU); ok {
		for _, fg := range ref.FD {
			res.add("fd64(d"+fg.Name+")", fg.RelErr(), MaxFDRelErr)
		}
		res.referenceChecks(p)
	}
	return res
}

// referenceChecks: the checkpointed backward against keep-every-state (for
// the Chunk algorithm: its float64 outputs against the recurrence's), and
// one thread against all, bit for bit, in float32.
func (res *Result) referenceChecks(p *Problem[float32]) {
	base, err := gdn.Backward(&p.In, p.DY, p.DStates, p.Opt)
	if err != nil {
		res.Err = err
		return
	}
	if p.Opt.Algo == gdn.Chunk {
		res.chunkChecks(p.Case)
	} else {
		keep := p.Opt
		keep.KeepAll = true
		all, err := gdn.Backward(&p.In, p.DY, p.DStates, keep)
		if err != nil {
			res.Err = err
			return
		}
		res.exact("checkpointed=keepall", base.Packed, all.Packed)
	}
	if res.Err != nil {
		return
	}
	one := p.Opt
	one.Threads = 1
	single, err := gdn.Backward(&p.In, p.DY, p.DStates, one)
	if err != nil {
		res.Err = err
		return
	}
	res.exact("threads1=threadsN", base.Packed, single.Packed)
}

func (res *Result) add(name string, v, limit float64) {
	if math.IsNaN(v) {
		v = math.Inf(1)
	}
	res.Checks = append(res.Checks, Check{Name: name, Value: v, Limit: limit})
}

func (res *Result) exact(name string, a, b []float32) {
	n := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			n++
		}
	}
	if len(a) != len(b) {
		n += max(len(a), len(b)) - min(len(a), len(b))
	}
	res.Checks = append(res.Checks, Check{Name: name, Value: float64(n), Exact: true})
}

// Summary counts a backend's results.
type Summary struct {
	Backend                 string
	Passed, Failed, Skipped int
}

// OK reports whether nothing failed (skips with a reason are not failures).
func (s Summary) OK() bool { return s.Failed == 0 }

// Lines writes the summary in test-backend-ops' manner:
// "n/m tests passed" and "Backend X: OK" (or FAIL).
func (s Summary) Lines(w io.Writer) {
	fmt.Fprintf(w, "%d/%d tests passed\n", s.Passed, s.Passed+s.Failed)
	if s.Skipped > 0 {
		fmt.Fprintf(w, "%d tests not supported by %s\n", s.Skipped, s.Backend)
	}
	st := "OK"
	if !s.OK() {
		st = "FAIL"
	}
	fmt.Fprintf(w, "Backend %s: %s\n", s.Backend, st)
}

// Add counts r in s: passed, failed, or not supported when r.Skip is set.
func (s *Summary) Add(r Result) {
	switch {
	case r.Skip != "":
		s.Skipped++
	case r.OK():
		s.Passed++
	default:
		s.Failed++
	}
}

// RunAll runs every case on every backend, one backend after another as
// test-backend-ops does, and calls report after each result (nil to skip):
// all of the first backend's results, then all of the second's. Each case's
// float64 reference and finite differences are computed once, on the first
// backend's pass, and kept for the others. It returns one summary per
// backend, in the order given.
func RunAll(backends []gdn.Backend, cases []Case, report func(Result)) []Summary {
	sums := make([]Summary, len(backends))
	refs := make([]*Reference, len(cases))
	errs := make([]error, len(cases))
	for i, b := range backends {
		sums[i].Backend = b.Name()
		for j, c := range cases {
			if i == 0 {
				refs[j], errs[j] = NewReference(c)
			}
			var r Result
			if errs[j] != nil {
				r = Result{Case: c, Backend: b.Name(), Err: fmt.Errorf("reference: %w", errs[j])}
			} else {
				r = Run(b, refs[j])
			}
			sums[i].Add(r)
			if report != nil {
				report(r)
			}
		}
	}
	return sums
}

// Families lists the case families of cs, in order of first appearance.
func Families(cs []Case) []string {
	var out []string
	for _, c := range cs {
		if !slices.Contains(out, c.Family) {
			out = append(out, c.Family)
		}
	}
	return out
}
