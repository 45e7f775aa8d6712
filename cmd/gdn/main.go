// Command gdn verifies the gated delta rule's backward on every backend.
//
// Usage:
//
//	gdn verify [-backend cpu] [-run REGEX] [-long]
//	gdn help
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/gdnback/gdnback/verify"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "verify":
		return cmdVerify(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "gdn: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `gdn: the gated delta rule's backward, verified.

Commands:
  verify   run the case matrix on a backend, test-backend-ops style
  help     this text

Run 'gdn CMD -h' for a command's flags.
`)
}

func cmdVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "cpu", "backend to verify: cpu")
	runRE := fs.String("run", "", "only cases whose name matches this regular expression")
	long := fs.Bool("long", false, "run the long matrix (longer sequences, larger heads)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: gdn verify [-backend cpu] [-run REGEX] [-long]

Runs the case matrix: the float64 reference against finite differences, and
the backend's float32 forward and backward against the float64 reference.
Prints one line per case, GATED_DELTA_NET_BACK(case): OK, then a summary.
Exit status 1 on any failure.

Example:
  gdn verify -run 'broadcast_strided'

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var backends []verify.Backend
	switch *backend {
	case "cpu":
		backends = []verify.Backend{verify.CPU{}}
	default:
		fmt.Fprintf(stderr, "gdn verify: -backend %q: want cpu\n", *backend)
		return 2
	}
	cases := verify.Matrix()
	if *long {
		cases = verify.LongMatrix()
	}
	if *runRE != "" {
		re, err := regexp.Compile(*runRE)
		if err != nil {
			fmt.Fprintf(stderr, "gdn verify: -run: %v\n", err)
			return 2
		}
		cases = verify.Filter(cases, re.MatchString)
	}
	sums := verify.RunAll(backends, cases, func(r verify.Result) {
		fmt.Fprintf(stdout, "  %s\n", r.Line())
	})
	status := 0
	for _, s := range sums {
		s.Lines(stdout)
		if !s.OK() {
			status = 1
		}
	}
	return status
}
