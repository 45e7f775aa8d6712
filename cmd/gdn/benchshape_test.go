package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal"
)

func TestResolveBenchShape(t *testing.T) {
	for _, c := range []struct {
		name  string
		given benchShape
		set   []string
		gpu   bool
		want  benchShape
		note  string
	}{
		{"GPU, nothing set", benchShape{}, nil, true, benchShape{128, 16, 48, 8192},
			"defaults (the 27B model's shape on a GPU): -S 128 -hk 16 -hv 48 -T 8192"},
		{"CPU, nothing set", benchShape{}, nil, false, benchShape{128, 1, 2, 1024},
			"defaults (not every backend is a GPU): -S 128 -hk 1 -hv 2 -T 1024"},
		{"GPU, T set", benchShape{T: 2048}, []string{"T"}, true, benchShape{128, 16, 48, 2048},
			"defaults (the 27B model's shape on a GPU): -S 128 -hk 16 -hv 48"},
		{"CPU, heads set", benchShape{Hk: 2, Hv: 6}, []string{"hk", "hv"}, false, benchShape{128, 2, 6, 1024},
			"defaults (not every backend is a GPU): -S 128 -T 1024"},
		{"GPU, all set", benchShape{64, 2, 4, 100}, []string{"S", "hk", "hv", "T"}, true, benchShape{64, 2, 4, 100}, ""},
		// A flag given as 0 is the user's (rejected by cmdBench), not a
		// request for the default.
		{"CPU, T set to 0", benchShape{}, []string{"T"}, false, benchShape{128, 1, 2, 0},
			"defaults (not every backend is a GPU): -S 128 -hk 1 -hv 2"},
	} {
		set := map[string]bool{}
		for _, s := range c.set {
			set[s] = true
		}
		given := c.given
		got, note := resolveBenchShape(c.given, set, c.gpu)
		if got != c.want || note != c.note {
			t.Errorf("%s: got %+v, %q; want %+v, %q", c.name, got, note, c.want, c.note)
		}
		if given != c.given {
			t.Errorf("%s: given modified", c.name)
		}
	}
}

// fakeKind is a Metal backend of a given kind that refuses every shape:
// enough for gdn bench to pick its defaults and print the shape (then, with
// nothing measured, exit with status 1).
type fakeKind struct {
	gdn.CPU
	kind string
}

func (f fakeKind) Name() string { return "Metal(fake " + f.kind + ")" }
func (f fakeKind) Kind() string { return f.kind }
func (f fakeKind) Supports(s gdn.Shape, _ gdn.Options) error {
	return errors.New("fake: refuses every shape")
}

func TestAllGPU(t *testing.T) {
	gpu, cuda, ex := fakeKind{kind: metal.GPU}, fakeKind{kind: metal.CUDA}, fakeKind{kind: metal.Executor}
	for _, c := range []struct {
		bs   []gdn.Backend
		want bool
	}{
		{[]gdn.Backend{gpu}, true},
		{[]gdn.Backend{cuda}, true},
		{[]gdn.Backend{gpu, cuda}, true},
		{[]gdn.Backend{ex}, false},
		{[]gdn.Backend{gdn.CPU{}}, false},
		{[]gdn.Backend{gdn.CPU{}, gpu}, false},
		{nil, false},
	} {
		if got := allGPU(c.bs); got != c.want {
			t.Errorf("allGPU(%v) = %v, want %v", c.bs, got, c.want)
		}
	}
}

// TestBenchGPUDefaults: gdn bench -backend metal on a GPU measures the 27B
// shape unless flags say otherwise, and names the defaults it took; on the
// executor the small shape.
func TestBenchGPUDefaults(t *testing.T) {
	for _, c := range []struct {
		kind string
		args []string
		want []string
	}{
		{metal.GPU, []string{"-algo", "chunk"}, []string{
			"defaults (the 27B model's shape on a GPU): -S 128 -hk 16 -hv 48 -T 8192\n",
			"shape: S 128, H_k 16, H_v 48, T 8192, n_seqs 1, gate scalar; C 91 (n_ck 91); best of 3\n"}},
		{metal.GPU, []string{"-algo", "chunk", "-kda", "-T", "1024"}, []string{
			"defaults (the 27B model's shape on a GPU): -S 128 -hk 16 -hv 48\n",
			"shape: S 128, H_k 16, H_v 48, T 1024, n_seqs 1, gate kda;"}},
		{metal.Executor, nil, []string{
			"defaults (not every backend is a GPU): -S 128 -hk 1 -hv 2 -T 1024\n",
			"shape: S 128, H_k 1, H_v 2, T 1024, n_seqs 1, gate scalar;"}},
	} {
		withMetal(t, fakeKind{kind: c.kind})
		st, out, errOut := runGdn(append([]string{"bench", "-backend", "metal"}, c.args...)...)
		// The fake refuses the shape: nothing is measured, so status 1.
		if st != 1 || !strings.Contains(errOut, "no backend takes this shape") {
			t.Errorf("%s %v: status %d (want 1)\n%s%s", c.kind, c.args, st, out, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s %v: output lacks %q:\n%s", c.kind, c.args, w, out)
			}
		}
	}
	// Given flags are checked before the defaults: -T 0 is an error.
	if st, _, errOut := runGdn("bench", "-T", "0"); st != 2 || !strings.Contains(errOut, "-T 0: want at least 1") {
		t.Errorf("-T 0: status %d, %q", st, errOut)
	}
	// -hk from the user against the GPU default -hv 48.
	withMetal(t, fakeKind{kind: metal.GPU})
	if st, _, errOut := runGdn("bench", "-backend", "metal", "-hk", "5"); st != 2 || !strings.Contains(errOut, "-hv 48 is not a multiple of -hk 5") {
		t.Errorf("-hk 5 on a GPU: status %d, %q", st, errOut)
	}
}

// TestBenchJSON: -json appends one object per measurement, with the
// figures the text shows.
func TestBenchJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.jsonl")
	if err := os.WriteFile(path, []byte("{\"earlier\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, out, errOut := runGdn("bench", "-S", "16", "-hk", "1", "-hv", "2", "-T", "20", "-C", "5", "-count", "1", "-threads", "1", "-kda", "-algo", "all", "-L", "8", "-json", path)
	if st != 0 {
		t.Fatalf("status %d\n%s%s", st, out, errOut)
	}
	if strings.Contains(out, "defaults") {
		t.Errorf("every shape flag given, yet a defaults line:\n%s", out)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var recs []benchRecord
	for n := 0; sc.Scan(); n++ {
		if n == 0 {
			if sc.Text() != "{\"earlier\": 1}" {
				t.Errorf("the file's first line was overwritten: %q", sc.Text())
			}
			continue
		}
		var r benchRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		// The keys scripts/h200/chunk_table.py reads (peak_bytes only
		// comes from metal:cuda).
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"backend", "algo", "pass", "S", "hk", "hv", "T", "seqs", "gate", "ms"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("line %d lacks the key %q: %s", n+1, k, sc.Text())
			}
		}
		recs = append(recs, r)
	}
	want := []struct {
		algo, pass string
		C, L       int
		scratch    bool
	}{
		{"recurrent", "forward", 5, 0, false},
		{"recurrent", "backward", 5, 0, true},
		{"recurrent", "backward_keep_all", 20, 0, true},
		{"chunk", "forward", 0, 8, false},
		{"chunk", "backward", 0, 8, true},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r.Backend != "CPU, threads 1" || r.Algo != w.algo || r.Pass != w.pass || r.C != w.C || r.L != w.L ||
			r.S != 16 || r.Hk != 1 || r.Hv != 2 || r.T != 20 || r.Seqs != 1 || r.Gate != "kda" ||
			!(r.MS > 0) || r.Stat != "best" || r.Runs != 1 || !(r.FlopsToken > 0) || (r.ScratchBytes > 0) != w.scratch {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
	}
	// The checkpointed backward's scratch is the one the text prints
	// (TestBench derives 10.62 KiB at C 5: ((4 + 5 + 1) * 256 + 6*16 +
	// 4*16) * 4 bytes).
	if !strings.Contains(out, "scratch 10.62 KiB per (head, seq)") || recs[1].ScratchBytes != 10880 {
		t.Errorf("checkpointed scratch %d bytes, want 10880 (10.62 KiB)", recs[1].ScratchBytes)
	}
	if st, _, errOut := runGdn("bench", "-S", "16", "-T", "4", "-count", "1", "-json", filepath.Join(t.TempDir(), "no", "such", "dir.jsonl")); st != 1 || !strings.Contains(errOut, "-json") {
		t.Errorf("-json into a missing folder: status %d, %q", st, errOut)
	}
}
