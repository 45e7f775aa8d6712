// Command gdn runs the gated delta rule's backward (Gated DeltaNet, KDA)
// outside a training framework: it verifies every backend on the case
// matrix, computes gradients of tensors saved from PyTorch in fla's layout,
// plans the backward's scratch memory for a shape or a GGUF model, and
// measures a backend's throughput.
//
// Usage:
//
//	gdn verify [-backend cpu|metal|all] [-algo recurrent|chunk|all] [-L n] [-run REGEX] [-long]
//	gdn grad -in case.npz -out result.npz [-heads interleave|tile] [-precision f64|f32] [-backend cpu|metal] [-C n] [-algo recurrent|chunk] [-L n]
//	gdn plan [-S n -hk n -hv n -T n -seqs n -C n -L n -layers n | -gguf FILE]
//	gdn bench [-backend cpu|metal|metal:cuda|all] [-algo recurrent|chunk|all] [-L n] [-S n -hk n -hv n -T n -seqs n -kda -C n -threads n -count n] [-json FILE]
//	gdn help [COMMAND]
//
// Run 'gdn COMMAND -h' for a command's flags and an example.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: its one-line summary and its entry point,
// which parses args and returns the exit status.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// order is the order in which help lists the commands.
var order = []string{"verify", "grad", "plan", "bench"}

func init() {
	commands["verify"] = command{"run the case matrix on a backend, test-backend-ops style", cmdVerify}
	commands["grad"] = command{"gradients of fla-layout tensors read from .npz, written to .npz", cmdGrad}
	commands["plan"] = command{"backward scratch memory for a shape or a GGUF model", cmdPlan}
	commands["bench"] = command{"forward and backward throughput of a backend at a shape", cmdBench}
}

// run dispatches a subcommand and returns the exit status: 0 on success, 1
// when the command ran and found a failure, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && name == "help" {
			c, ok := commands[args[1]]
			if !ok {
				fmt.Fprintf(stderr, "gdn help: unknown command %q\n", args[1])
				usage(stderr)
				return 2
			}
			// The command's own -h, written to stdout.
			c.run([]string{"-h"}, stdout, stdout)
			return 0
		}
		usage(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "gdn: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`gdn: the gated delta rule's backward (Gated DeltaNet, KDA), verified,
cross-checked against PyTorch, planned and measured.

Usage:
  gdn COMMAND [flags]

Commands:
`)
	for _, n := range order {
		fmt.Fprintf(&b, "  %-8s %s\n", n, commands[n].summary)
	}
	b.WriteString(`  help     this text; 'gdn help COMMAND' explains a command

Run 'gdn COMMAND -h' for a command's flags and an example.
`)
	io.WriteString(w, b.String())
}

// newFlags makes a subcommand's flag set. Its usage message is text (the
// synopsis, what it does and an example) followed by the flags.
func newFlags(name, text string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, text)
		fmt.Fprint(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, returning (status, false) when the command
// should stop: 0 after -h, 2 after a bad flag. Positional arguments are an
// error: every subcommand takes flags only.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "gdn %s: unexpected argument %q (flags only; see gdn %s -h)\n", fs.Name(), fs.Arg(0), fs.Name())
		return 2, false
	}
	return 0, true
}
