package metal

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/verify"
)

// table27B returns the numbers of the 27B table in text, from the line
// holding start to the first line that is blank or, when end is not "",
// holds end; numbers as written ("24,640", "11.95"), sorted, duplicates
// removed.
func table27B(t *testing.T, text, start, stop string) []string {
	t.Helper()
	i := strings.Index(text, start)
	if i < 0 {
		t.Fatalf("no line holding %q", start)
	}
	lines := strings.Split(text[i:], "\n")
	var nums []string
	re := regexp.MustCompile(`\d+(,\d{3})*(\.\d+)?`)
	for _, l := range lines {
		if strings.TrimSpace(strings.TrimLeft(l, "/")) == "" || (stop != "" && strings.Contains(l, stop)) {
			break
		}
		nums = append(nums, re.FindAllString(l, -1)...)
	}
	slices.Sort(nums)
	return slices.Compact(nums)
}

// TestTable27B: the 27B table of this package's doc and README.md's state
// the same figures, and the figures of these kernels are the code's.
func TestTable27B(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	d := table27B(t, string(doc), "this package                       upstream", "")
	r := table27B(t, string(readme), "| | these kernels | upstream |", "")
	// README's header row and separator hold no numbers; doc.go's layout
	// has none of its own either, so the two sets must be equal.
	if !slices.Equal(d, r) {
		t.Errorf("the 27B tables differ:\n doc.go:    %v\n README.md: %v", d, r)
	}
	const S, T, C, hv = 128, 8192, 91, 48
	l := layoutFor(S, S)
	mib := func(b int) string { return fmt.Sprintf("%.4g", float64(b)/(1<<20)) }
	sb := ScratchBytes(S, S, T, C)
	for _, want := range []string{
		fmt.Sprint(l.nrb), fmt.Sprint(l.nsg * simdWidth), // forward grid (nrb, 48, 1) x nsg*32
		fmt.Sprint(1 + 2*C), // dispatches
		fmt.Sprintf("%d,%03d", l.shared()/1000, l.shared()%1000), // threadgroup memory, as 24,640
		mib(sb), mib(sb * hv), // scratch
	} {
		if !slices.Contains(d, want) {
			t.Errorf("the 27B table lacks %s, which the code gives (table: %v)", want, d)
		}
	}
}

// TestChunkTable27B: the chunk kernels' 27B figures in this package's doc
// are the code's: the groups, grids, threads and threadgroup memory of the
// plans' dispatches (chunkSplitFor, forward and backward), and the scratch
// of ChunkScratchBytes, ChunkScratchPairs and the forward's plan.
func TestChunkTable27B(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	d := table27B(t, string(doc), "chunk kernels                      recurrent kernels", "")
	const S, T, L, hk, hv = 128, 8192, 64, 16, 48
	mib := func(b int) string { return fmt.Sprintf("%.4g", float64(b)/(1<<20)) }
	gib := func(b int) string { return fmt.Sprintf("%.3f", float64(b)/(1<<30)) } // 1 to 10 GiB here, as gdn plan prints them
	grp := func(b int) string {
		if b < 1000 {
			return fmt.Sprint(b)
		}
		return fmt.Sprintf("%d,%03d", b/1000, b%1000)
	}
	var want []string
	for _, gw := range []int{1, S} {
		s := gdn.Shape{Sk: S, Sv: S, Hk: hk, Hv: hv, T: T, Seqs: 1, SeqsQK: 1, GateWidth: gw, Snapshots: 1}
		b, n := ChunkScratchBytes(s, L), ChunkScratchPairs(s, L)
		want = append(want, mib(b), gib(b*n), fmt.Sprint(n))
		if gw > 1 {
			continue
		}
		want = append(want, gib(b*hv))
		g := chunkGeomFor(s, gdn.Options{ChunkLen: L})
		f := 4 * g.nc * chunkAreaElems(S, S, gw, g.Lp, false)
		want = append(want, mib(f), gib(f*hv))
		fs, bs := chunkSplitFor(s, g, false), chunkSplitFor(s, g, true)
		if fs.ng != 1 {
			t.Errorf("the forward at 27B runs %d groups; the table says one", fs.ng)
		}
		if words := map[int]string{1: "one group", 2: "two groups", 3: "three groups"}; !strings.Contains(string(doc), fmt.Sprintf("%s of %d value heads", words[bs.ng], bs.hkg*hv/hk)) {
			t.Errorf("the table does not say the backward's %d groups of %d value heads", bs.ng, bs.hkg*hv/hk)
		}
		rep := hv / hk
		for _, n := range []int{
			g.nc, S / fs.vb, fs.hkg * rep, // forward grids (nc | S/vb, 48, 1)
			5 * bs.ng, bs.hkg * rep, S / bs.vb, bs.vb, (T + chunkRedRows - 1) / chunkRedRows, bs.hkg, // backward: dispatches, grids
			maxSimdgroups * simdWidth,
		} {
			want = append(want, fmt.Sprint(n))
		}
		want = append(want, grp(chunkPrepShared(S, g.Lp, 1)), grp(chunkPrepShared(S, g.Lp, S)), grp(chunkShared(S, g.Lp, fs.vb)), grp(chunkShared(S, g.Lp, bs.vb)), grp(chunkPairsShared(g.Lp)))
	}
	for _, w := range want {
		if !slices.Contains(d, w) {
			t.Errorf("the chunk kernels' 27B table lacks %s, which the code gives (table: %v)", w, d)
		}
	}
}

// TestKernelNames: the hosts build a pipeline for every kernel a plan
// dispatches, the recurrent kernels' and the chunk kernels' (the darwin
// host once listed the recurrent kernels only, and a chunk call on a Mac
// would have found no pipeline).
func TestKernelNames(t *testing.T) {
	names, err := kernelNames(source)
	if err != nil {
		t.Fatal(err)
	}
	c := verify.Case{Family: "x", Sk: 32, Sv: 32, Hk: 2, Rep: 2, T: 9, Seqs: 1, C: 3, KDA: true, Seed: 1}
	p := verify.Build[float32](c)
	chunk := p.Opt
	chunk.Algo, chunk.ChunkLen = gdn.Chunk, 4
	seen := map[string]bool{}
	for _, opt := range []gdn.Options{p.Opt, chunk} {
		for _, bwd := range []bool{false, true} {
			for _, sp := range []chunkSplit{{}, {hkg: 1, ng: 2, vb: chunkRows}} {
				pl, err := newPlan(&p.In, p.DY, p.DStates, opt, bwd, sp)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range pl.dispatch {
					seen[d.kernel] = true
					if !slices.Contains(names, d.kernel) {
						t.Errorf("a plan dispatches %s, which has no pipeline (kernelNames: %v)", d.kernel, names)
					}
				}
			}
		}
	}
	if len(seen) < 6 {
		t.Errorf("the plans dispatched only %v", seen)
	}
}
