package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/gdnback/gdnback/verify"
)

// isTerminal reports whether w is a terminal. Tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func cmdVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", `usage: gdn verify [-backend cpu|metal|all] [-algo recurrent|chunk|all] [-L n] [-run REGEX] [-long]

Runs the case matrix: the float64 CPU reference against finite differences,
and each backend's float32 forward and backward against the float64
reference (NMSE <= 1e-7, grad mode <= 1e-4, reruns bit-identical). Prints
a block per backend, as test-backend-ops does: "Backend i/n: X", one line
per case, GATED_DELTA_NET_BACK(case): OK, then "n/m tests passed" and
"Backend X: OK"; last, "k/n backends passed" and OK or FAIL. On a terminal
a progress bar runs on stderr; piped output stays plain. Exit status 1 on
any failure. -algo chunk runs the cases with the chunkwise (WY) algorithm
(at chunk length -L, or by default each case's segment length C, so that
every case runs several chunks) and checks it also against the float64
recurrence (relative RMS <= 1e-12 per output); -algo all runs both.

Example:
  gdn verify -run 'broadcast_strided'
`, stderr)
	backend := fs.String("backend", "cpu", "backends to verify: "+backendNames)
	runRE := fs.String("run", "", "only cases whose name matches this regular `regexp`")
	long := fs.Bool("long", false, "run the long matrix (longer sequences, larger heads)")
	af := addAlgoFlags(fs, true, "each case's segment length C")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	algos, err := af.algos()
	if err != nil {
		fmt.Fprintf(stderr, "gdn verify: %v\n", err)
		return 2
	}
	backends, err := backendsFor(*backend, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gdn verify: %v\n", err)
		if errors.Is(err, errUnknownBackend) {
			return 2
		}
		return 1
	}
	matrix := verify.Matrix()
	if *long {
		matrix = verify.LongMatrix()
	}
	var cases []verify.Case
	for _, a := range algos {
		cases = append(cases, verify.WithAlgo(matrix, a, *af.L)...)
	}
	if *runRE != "" {
		re, err := regexp.Compile(*runRE)
		if err != nil {
			fmt.Fprintf(stderr, "gdn verify: -run: %v\n", err)
			return 2
		}
		cases = verify.Filter(cases, re.MatchString)
		if len(cases) == 0 {
			fmt.Fprintf(stderr, "gdn verify: -run %q matches no case\n", *runRE)
			return 2
		}
	}
	var bar *progressbar.ProgressBar
	if isTerminal(stderr) {
		bar = progressbar.NewOptions(len(cases)*len(backends),
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription("verify"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetRenderBlankState(true),
		)
	}
	// test-backend-ops' layout: a block per backend, its header, one line
	// per case, its summary; then how many backends passed.
	cur := -1
	var sum verify.Summary
	endBlock := func() {
		if cur >= 0 {
			sum.Lines(stdout)
			fmt.Fprintln(stdout)
		}
	}
	sums := verify.RunAll(backends, cases, func(r verify.Result) {
		if bar != nil {
			bar.Clear()
		}
		if cur < 0 || r.Backend != backends[cur].Name() {
			endBlock()
			cur++
			sum = verify.Summary{Backend: backends[cur].Name()}
			fmt.Fprintf(stdout, "Backend %d/%d: %s\n", cur+1, len(backends), backends[cur].Name())
		}
		sum.Add(r)
		fmt.Fprintf(stdout, "  %s\n", r.Line())
		if bar != nil {
			bar.Add(1)
		}
	})
	endBlock()
	if bar != nil {
		bar.Finish()
	}
	passed := 0
	for _, s := range sums {
		if s.OK() {
			passed++
		}
	}
	fmt.Fprintf(stdout, "%d/%d backends passed\n", passed, len(sums))
	if passed != len(sums) {
		fmt.Fprintln(stdout, "FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "OK")
	return 0
}
