package metal_test

import (
	"bufio"
	"crypto/sha256"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

var (
	bitsWrite = flag.String("bits.write", "", "TestExecutorBits: write the digests of the chunk kernels' outputs through the executor to this file")
	bitsWant  = flag.String("bits.want", "", "TestExecutorBits: compare the digests with this file's, written by -bits.write on another tree")
)

// bitsCases are the cases of TestExecutorBits: one chunk of 64 rows or a
// partial one, both gates, S_k 16 to 256, S_k != S_v, broadcast heads.
func bitsCases() []verify.Case {
	cs := []verify.Case{
		{Family: "bits", Sk: 16, Sv: 16, Hk: 1, Rep: 2, T: 70, Seqs: 1, C: 8, KDA: true, State: true, Seed: 1},
		{Family: "bits", Sk: 32, Sv: 64, Hk: 1, Rep: 1, T: 57, Seqs: 1, C: 8, KDA: true, State: true, Seed: 2},
		{Family: "bits", Sk: 64, Sv: 32, Hk: 1, Rep: 1, T: 64, Seqs: 1, C: 8, KDA: true, State: true, Seed: 3},
		{Family: "bits", Sk: 128, Sv: 32, Hk: 1, Rep: 1, T: 59, Seqs: 1, C: 8, KDA: true, State: true, Seed: 4},
		{Family: "bits", Sk: 256, Sv: 16, Hk: 1, Rep: 1, T: 45, Seqs: 1, C: 8, KDA: true, State: true, Seed: 5},
		{Family: "bits", Sk: 128, Sv: 32, Hk: 1, Rep: 1, T: 61, Seqs: 1, C: 8, State: true, Seed: 6},
		{Family: "bits", Sk: 256, Sv: 16, Hk: 1, Rep: 1, T: 40, Seqs: 1, C: 8, State: true, Seed: 7},
		{Family: "bits", Sk: 16, Sv: 32, Hk: 1, Rep: 2, T: 67, Seqs: 1, C: 8, State: true, Seed: 8},
	}
	return verify.WithAlgo(cs, gdn.Chunk, 64)
}

// TestExecutorBits checks that a change to the chunk kernels keeps their
// bits: it runs the forward and backward of bitsCases through the CPU
// executor and writes a SHA-256 digest of every output (y, the states and
// each gradient block) with -bits.write FILE, or compares them with FILE's
// with -bits.want FILE, naming each output that differs. The kernels'
// changes that only move work between threads and keep every product and
// sum in its order are checked this way before a GPU times them:
//
//	go test ./metal -run TestExecutorBits -bits.write /tmp/before.txt
//	git apply CHANGE.patch
//	go test ./metal -run TestExecutorBits -bits.want /tmp/before.txt
func TestExecutorBits(t *testing.T) {
	if *bitsWrite == "" && *bitsWant == "" {
		t.Skip("neither -bits.write nor -bits.want given")
	}
	b := openExecutor(t)
	var lines []string
	for _, c := range bitsCases() {
		p := verify.Build[float32](c)
		y, st, err := b.Forward(&p.In, p.Opt)
		if err != nil {
			t.Fatalf("%s: forward: %v", c, err)
		}
		g, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Fatalf("%s: backward: %v", c, err)
		}
		sh, err := p.In.Shape(p.Opt)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		gr, err := gdn.NewGrads(sh, g)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		blocks := gr.Blocks()
		outs := append([][]float32{y, st}, blocks[:]...)
		names := append([]string{"y", "states"}, gdn.BlockNames[:]...)
		for i, o := range outs {
			h := sha256.New()
			for _, v := range o {
				u := math.Float32bits(v)
				h.Write([]byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)})
			}
			lines = append(lines, fmt.Sprintf("%s %s %d %x", c, names[i], len(o), h.Sum(nil)[:12]))
		}
	}
	if *bitsWrite != "" {
		if err := os.WriteFile(*bitsWrite, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if *bitsWant == "" {
		return
	}
	f, err := os.Open(*bitsWant)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		want = append(want, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(lines) {
		t.Fatalf("%s: %d outputs, this tree gives %d", *bitsWant, len(want), len(lines))
	}
	for i := range lines {
		if lines[i] != want[i] {
			t.Errorf("output differs from %s:\n  got  %s\n  want %s", *bitsWant, lines[i], want[i])
		}
	}
}
