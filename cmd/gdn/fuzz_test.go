package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gdnback/gdnback/gdn"
)

// FuzzReadNPZ feeds the .npz reader and grad's input checks arbitrary
// bytes, seeded with the PyTorch fixtures and hand-made archives: no
// panic (nor the reader's recover firing), no allocation beyond what the
// headers declare and the zip entries hold, and what is read has its
// header's shape.
func FuzzReadNPZ(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/torch/*.npz")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(zipBytes(f, []zipEntry{
		{name: "q.npy", data: npyBytes(">f4", true, "(1, 2, 1, 3)", f64s(6))},
		{name: "k", data: npyBytes("<f8", false, "(1, 2, 1, 3)", f64s(6))},
		{name: "v.npy", deflate: true, data: npyBytes("<f8", false, "(1, 2, 2, 2)", f64s(8))},
		{name: "scale.npy", data: npyBytes("<f8", false, "()", f64s(1))},
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		countExec()
		z, err := newNPZ(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, name := range z.names() {
			h, err := z.header(name)
			if err != nil || h.bytes() > 1<<20 {
				continue
			}
			a, err := z.read(name)
			if errors.Is(err, errPanic) {
				t.Fatal(err)
			}
			if err != nil {
				continue
			}
			n := 1
			for _, d := range a.shape {
				n *= d
			}
			if len(a.data) != n || n != h.n {
				t.Fatalf("%s: %d values for shape %v (header: %d)", name, len(a.data), a.shape, h.n)
			}
		}
		c, err := inspectGrad(z)
		if errors.Is(err, errPanic) {
			t.Fatal(err)
		}
		if err != nil {
			return
		}
		for _, r := range []gradRun{{elem: 8, workers: 2}, {elem: 4, backend: gdn.CPU{}, segment: 3, workers: 1}} {
			if need := c.need(r).total(); need < 0 {
				t.Fatalf("need %d for %+v", need, c)
			}
		}
		if c.need(gradRun{elem: 8, workers: 1}).total() <= 4<<20 {
			if err := c.load(z); errors.Is(err, errPanic) {
				t.Fatal(err)
			}
		}
	})
}

// negative finds a negative number in plan's output.
var negative = regexp.MustCompile(`(^|[\s(])-[0-9]`)

// FuzzPlanGGUF feeds gdn plan's GGUF reader and planner arbitrary bytes,
// seeded with metadata-only files of the Gated DeltaNet hybrids: no panic,
// and a plan it prints has no negative size.
func FuzzPlanGGUF(f *testing.F) {
	f.Add(ggufBytes(hybrid("qwen35", "Qwen3.5 27B", 64, 48, 4)))
	f.Add(ggufBytes(hybrid("qwen3next", "Qwen3 Next 80B A3B Instruct", 48, 32, 4)))
	f.Add(ggufBytes(hybrid("qwen35", "x", 1<<30, 1<<30, 1)))
	f.Add(ggufBytes([]ggufKV{{"general.architecture", "llama"}, {"llama.block_count", uint32(32)}}))
	f.Add([]byte("GGUF"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		countExec()
		tmp, err := os.CreateTemp(dir, "*.gguf")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(tmp.Name())
		tmp.Write(b)
		tmp.Close()
		m, err := readGGUF(tmp.Name())
		if errors.Is(err, errPanic) {
			t.Fatal(err)
		}
		if err != nil {
			return
		}
		for _, T := range []int{1, 8192} {
			if m.Hv%m.Hk != 0 || checkPlan(m, T, 1) != nil {
				continue
			}
			var out strings.Builder
			if err := printPlan(&out, m, T, 1, 0, 0); err != nil {
				continue
			}
			if loc := negative.FindStringIndex(out.String()); loc != nil {
				t.Fatalf("a negative size in the plan:\n%s", out.String())
			}
		}
	})
}

// execs counts this process's fuzz executions for countExec.
var execs atomic.Int64

// countExec counts one fuzz execution. With GDN_FUZZ_COUNT set to a path,
// every 1024th execution writes this process's count to PATH.PID: go test
// -fuzz's own count stalls while a worker runs (golang/go#51484), and a
// long run's report wants the number of inputs actually tried.
func countExec() {
	n := execs.Add(1)
	if path := os.Getenv("GDN_FUZZ_COUNT"); path != "" && n%1024 == 0 {
		os.WriteFile(fmt.Sprintf("%s.%d", path, os.Getpid()), []byte(fmt.Sprint(n)), 0o644)
	}
}
