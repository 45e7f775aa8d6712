package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// cudaLeftOut is the note of a "-backend all" run where metal:cuda cannot
// open, with its reason; cudaLeftOutAny stands for it, whatever the reason.
var cudaLeftOut = regexp.MustCompile(`(?m)^note: metal:cuda left out: .*$`)

const cudaLeftOutAny = "note: metal:cuda left out: (this machine's reason)"

// readmeExample is one "$ gdn ..." line of a code block in README.md and the
// output printed under it.
type readmeExample struct {
	line int      // line number of the command in README.md
	args []string // the arguments after "gdn"
	head int      // "| head -N": compare the first N lines only (0: all)
	want string
}

// readmeExamples parses the console examples of README.md: inside a fenced
// block, a line "$ gdn ARGS [| head -N] [# comment]" followed by its output,
// up to the next "$ " line or the end of the block.
func readmeExamples(t *testing.T) []readmeExample {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out   []readmeExample
		cur   *readmeExample
		inBlk bool
		n     int
	)
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		s := sc.Text()
		switch {
		case strings.HasPrefix(s, "```"):
			flush()
			inBlk = !inBlk
		case !inBlk:
		case strings.HasPrefix(s, "$ "):
			flush()
			if !strings.HasPrefix(s, "$ gdn ") {
				continue
			}
			cmd := strings.TrimPrefix(s, "$ gdn ")
			if i := strings.Index(cmd, "  #"); i >= 0 {
				cmd = cmd[:i]
			}
			ex := readmeExample{line: n}
			if i := strings.Index(cmd, "| head -"); i >= 0 {
				h, err := strconv.Atoi(strings.TrimSpace(cmd[i+len("| head -"):]))
				if err != nil {
					t.Fatalf("README.md:%d: %q: %v", n, s, err)
				}
				ex.head, cmd = h, cmd[:i]
			}
			ex.args = strings.Fields(cmd)
			cur = &ex
		case cur != nil:
			cur.want += s + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadmeExamples runs every "$ gdn" example of README.md whose output
// does not depend on the machine and demands exactly the output README
// shows, so that README's examples stay real output of the current code.
// Examples of gdn bench print timings and are only checked to run.
func TestReadmeExamples(t *testing.T) {
	exs := readmeExamples(t)
	dir := t.TempDir()
	// The files README's examples name, made where the examples run.
	fixture, err := os.ReadFile(filepath.Join("testdata", "torch", "scalar_interleave_f64.npz"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"scalar_interleave_f64.npz": fixture}
	noDo := goodCase()
	delete(noDo, "do")
	if files["case.npz"], err = os.ReadFile(writeCase(t, noDo)); err != nil {
		t.Fatal(err)
	}
	if files["qwen35-27b-metadata.gguf"], err = os.ReadFile(writeGGUF(t, hybrid("qwen35", "Qwen3.5 27B", 64, 48, 4))); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)

	checked := map[string]int{}
	for _, ex := range exs {
		name := strings.Join(ex.args, " ")
		t.Run(name, func(t *testing.T) {
			if ex.args[0] == "bench" {
				// Timings differ from run to run: run a small shape of the
				// same command instead of comparing its figures.
				var o bytes.Buffer
				if st := run([]string{"bench", "-S", "16", "-hk", "1", "-hv", "2", "-T", "8", "-count", "1"}, &o, &o); st != 0 {
					t.Fatalf("README.md:%d: gdn bench at a small shape: status %d\n%s", ex.line, st, o.String())
				}
				return
			}
			var o bytes.Buffer // stdout and stderr interleaved, as a terminal shows them
			run(ex.args, &o, &o)
			got := o.String()
			if ex.head > 0 {
				lines := strings.SplitAfter(got, "\n")
				if len(lines) > ex.head {
					got = strings.Join(lines[:ex.head], "")
				}
			}
			want := ex.want
			if cudaLeftOut.MatchString(want) {
				// The README shows a machine without an NVIDIA GPU; why
				// metal:cuda cannot open (no driver, a driver that sees no
				// device, no NVRTC) is this machine's, and where it opens,
				// the command runs one backend more than the README shows.
				if !cudaLeftOut.MatchString(got) {
					t.Skipf("README.md:%d: this machine runs metal:cuda; the example is of one without an NVIDIA GPU", ex.line)
				}
				want = cudaLeftOut.ReplaceAllString(want, cudaLeftOutAny)
				got = cudaLeftOut.ReplaceAllString(got, cudaLeftOutAny)
			}
			if got != want {
				t.Errorf("README.md:%d: $ gdn %s\nREADME shows:\n%s\nthe command prints:\n%s", ex.line, name, ex.want, got)
			}
			checked[ex.args[0]]++
		})
	}
	// README documents every subcommand with real output; a lost example
	// (a changed prompt, a broken fence) must not pass silently.
	for _, c := range []string{"help", "verify", "grad", "plan"} {
		if checked[c] == 0 {
			t.Errorf("README.md has no checked \"$ gdn %s\" example", c)
		}
	}
}
