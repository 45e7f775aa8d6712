package metal_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// chunkCases is the case matrix with the Chunk algorithm, each case at its
// segment length as chunk length (verify.WithAlgo), so that every case
// runs several chunks and a final partial one. GDN_CHUNK_RUN narrows it to
// the cases whose name matches the regular expression.
func chunkCases(t *testing.T) []verify.Case {
	cs := verify.WithAlgo(metalCases(), gdn.Chunk, 0)
	if re := os.Getenv("GDN_CHUNK_RUN"); re != "" {
		r := regexp.MustCompile(re)
		cs = verify.Filter(cs, r.MatchString)
	}
	if len(cs) == 0 {
		t.Fatal("no chunk cases")
	}
	return cs
}

// TestMetalChunkMatrix runs the chunk kernels on every case of the matrix
// with Algo = Chunk, as TestMetalMatrix runs the recurrent ones: against
// the float64 reference (NMSE), finite differences, and a rerun, bit for
// bit.
func TestMetalChunkMatrix(t *testing.T) {
	b := openMetal(t)
	cases := chunkCases(t)
	start := time.Now()
	var out strings.Builder
	sums := verify.RunAll([]gdn.Backend{b}, cases, func(r verify.Result) {
		fmt.Fprintf(&out, "  %s\n", r.Line())
		if !r.OK() {
			t.Errorf("%s", r.Line())
		}
	})
	sums[0].Lines(&out)
	t.Logf("%d chunk cases on %s in %v:\n%s", len(cases), b.Name(), time.Since(start).Round(time.Second), out.String())
	if s := sums[0]; s.Passed != len(cases) {
		t.Errorf("%d of %d cases passed (%d failed, %d not supported)", s.Passed, len(cases), s.Failed, s.Skipped)
	}
}

// TestMetalChunkAgainstReference compares the chunk kernels with gdn's
// float32 Chunk algorithm, the oracle they implement line by line, and
// with gdn's float32 recurrence: NMSE of every output.
func TestMetalChunkAgainstReference(t *testing.T) {
	b := openMetal(t)
	for _, c := range chunkCases(t) {
		p := verify.Build[float32](c)
		ky, ks, err := b.Forward(&p.In, p.Opt)
		if err != nil {
			t.Fatalf("%s: forward: %v", c, err)
		}
		kg, err := b.Backward(&p.In, p.DY, p.DStates, p.Opt)
		if err != nil {
			t.Fatalf("%s: backward: %v", c, err)
		}
		for _, algo := range []gdn.Algo{gdn.Chunk, gdn.Recurrent} {
			opt := p.Opt
			opt.Algo = algo
			f, err := gdn.Forward(&p.In, opt)
			if err != nil {
				t.Fatal(err)
			}
			g, err := gdn.Backward(&p.In, p.DY, p.DStates, opt)
			if err != nil {
				t.Fatal(err)
			}
			kgr, err := gdn.NewGrads(g.Shape, kg)
			if err != nil {
				t.Fatal(err)
			}
			wb, gb := g.Blocks(), kgr.Blocks()
			want := append([][]float32{f.Y, f.States}, wb[:]...)
			got := append([][]float32{ky, ks}, gb[:]...)
			names := append([]string{"y", "states"}, gdn.BlockNames[:]...)
			for i := range want {
				if n := verify.NMSE(gdn.Convert[float64](want[i]), gdn.Convert[float64](got[i])); !(n <= verify.MaxNMSE) {
					t.Errorf("%s: %s against gdn's float32 %v: NMSE %.3g (limit %.0e)", c, names[i], algo, n, verify.MaxNMSE)
				}
			}
		}
	}
}
