package main

import (
	"bufio"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gdnback/gdnback/gdn"
)

// Memory accounting: what a run holds at its peak, computed from the
// declared shapes before anything is allocated, so that a hostile or
// mistaken input is refused with the size it would need instead of ending
// in "fatal error: out of memory".

// satMul multiplies non-negative sizes, saturating at math.MaxInt64.
func satMul(n ...int) int64 {
	p := uint64(1)
	for _, x := range n {
		if x < 0 {
			return math.MaxInt64
		}
		hi, lo := bits.Mul64(p, uint64(x))
		if hi != 0 || lo > math.MaxInt64 {
			return math.MaxInt64
		}
		p = lo
	}
	return int64(p)
}

// satAdd adds non-negative sizes, saturating at math.MaxInt64.
func satAdd(n ...int64) int64 {
	var s int64
	for _, x := range n {
		if x >= math.MaxInt64-s {
			return math.MaxInt64
		}
		s += x
	}
	return s
}

// memItem is one part of a run's memory.
type memItem struct {
	what  string
	bytes int64
}

// memNeed is a run's memory at its peak, part by part.
type memNeed []memItem

func (m memNeed) total() int64 {
	var t int64
	for _, it := range m {
		t = satAdd(t, it.bytes)
	}
	return t
}

func (m memNeed) String() string {
	parts := make([]string, 0, len(m))
	for _, it := range m {
		if it.bytes > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", it.what, fmtBytes(it.bytes)))
		}
	}
	return strings.Join(parts, ", ")
}

// gradRun is how a grad run computes: elem bytes per element (8 for the
// float64 CPU reference, 4 otherwise), on a device backend (nil for the CPU
// reference), its segment length option and worker count.
type gradRun struct {
	elem     int
	backend  gdn.Backend
	segment  int
	workers  int
	algo     gdn.Algo // Recurrent or Chunk (CPU only)
	chunkLen int
}

// need is what a grad run on c holds at its peak, from the declared sizes:
// the input arrays as decoded (float64) and as the computation reads them;
// the forward's and the backward's outputs, scratch and per-worker buffers;
// the float64 results written out. It is an upper bound: parts freed early
// are counted as held to the end.
func (c *gradCase) need(r gradRun) memNeed {
	gw := 1
	if c.kda {
		gw = c.K
	}
	nq := satMul(c.B, c.T, c.H, c.K)
	nv := satMul(c.B, c.T, c.HV, c.V)
	ng := satMul(c.B, c.T, c.HV, gw)
	nb := satMul(c.B, c.T, c.HV)
	ns := satMul(c.B, c.HV, c.K, c.V)
	in := satAdd(nq, nq, nv, nv, ng, nb)
	if c.hasH0 {
		in = satAdd(in, ns)
	}
	if c.hasDht {
		in = satAdd(in, ns)
	}
	packed := satAdd(nq, nq, nv, ng, nb, ns)
	out := satAdd(nv, ns, packed, ns) // o, ht, the gradients, dh0 = dstate
	e := int64(r.elem)
	m := memNeed{
		{"inputs", sat(8, in)},
		{"inputs as computed", sat(e, in)},
	}
	if r.backend != nil {
		// One scratch for every (head, seq), as the Metal backend holds it.
		scr := int64(math.MaxInt64) // beyond any backend's indices: refused either way
		if c.T <= gdn.MaxElems && c.K <= gdn.MaxElems && c.V <= gdn.MaxElems {
			s := gdn.Shape{Sk: c.K, Sv: c.V, Hk: c.H, Hv: c.HV, T: c.T, Seqs: c.B, SeqsQK: c.B, GateWidth: gw, Snapshots: 1}
			scr = satMul(max(r.backend.ScratchBytes(s, gdn.Options{Segment: r.segment}), 0), c.HV, c.B)
		}
		m = append(m,
			memItem{"device inputs", sat(2*e, in)},
			memItem{"outputs", sat(2*e, satAdd(nv, ns, packed))},
			memItem{"scratch", scr},
		)
	} else {
		C := gdn.Options{Segment: r.segment}.SegmentLength(c.T)
		w := max(1, min(r.workers, c.HV*c.B))
		sb := gdn.ScratchBytes[float64](c.K, c.V, c.T, C)
		if r.elem == 4 {
			sb = gdn.ScratchBytes[float32](c.K, c.V, c.T, C)
		}
		if r.algo == gdn.Chunk {
			// The state before every chunk, and one chunk's rows and L x L
			// matrices, per worker.
			sb = math.MaxInt
			if satMul(c.T+1, c.K, c.V, 8) < math.MaxInt64 {
				s := gdn.Shape{Sk: c.K, Sv: c.V, Hk: c.H, Hv: c.HV, T: c.T, Seqs: c.B, SeqsQK: c.B, GateWidth: gw, Snapshots: 1}
				L := gdn.Options{ChunkLen: r.chunkLen}.ChunkLength()
				sb = 2 * gdn.ChunkScratchBytes[float32](s, L) // float64 at most twice float32
			}
		}
		perWorker := satAdd(int64(sb), satMul(c.K, c.V, r.elem))
		m = append(m,
			memItem{"outputs", sat(e, satAdd(nv, ns, packed))},
			memItem{"dq/dk partial sums", sat(2*e, satMul(c.K, c.T, c.HV, c.B))},
			memItem{"scratch", sat(int64(w), perWorker)},
		)
	}
	// The results (float64) and the row slices the writer walks them by.
	rows := satAdd(satMul(c.B, c.T, c.HV), satMul(c.B, c.T), int64(c.B), // o, dv, dg, dbeta
		satMul(c.B, c.HV, c.K), satMul(c.B, c.HV), int64(c.B), // ht, dh0
		satMul(c.B, c.T, c.H), satMul(c.B, c.T), int64(c.B)) // dq, dk
	m = append(m, memItem{"results", satAdd(sat(8, out), sat(2*24, rows))})
	return m
}

// sat is satMul for an int64 factor.
func sat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if a < 0 || b < 0 || hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// byteSize is a flag value in bytes, written with a binary unit: 512MiB,
// 16GiB, or a plain number of bytes.
type byteSize int64

var units = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"TB", 40}, {"GB", 30}, {"MB", 20}, {"KB", 10}, {"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}

func (b *byteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	shift := uint(0)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, shift = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.shift
			break
		}
	}
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || x <= 0 || math.IsInf(x, 0) {
		return fmt.Errorf("%q: want a positive size such as 512MiB or 16GiB", s)
	}
	v := x * float64(uint64(1)<<shift)
	if v >= math.MaxInt64 {
		return fmt.Errorf("%q: too large", s)
	}
	*b = byteSize(v)
	return nil
}

// String writes b exactly in TiB, GiB or MiB when one divides it, else to
// four digits.
func (b *byteSize) String() string {
	for _, u := range units[:3] {
		if n := int64(*b); n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return strings.ReplaceAll(fmtBytes(int64(*b)), " ", "")
}

// defaultMem is -mem's default: half the machine's physical memory, or 4
// GiB where it cannot be read.
func defaultMem() int64 {
	if n, ok := physicalMemory(); ok && n > 0 {
		return n / 2
	}
	return 4 << 30
}

// physicalMemory reads MemTotal from /proc/meminfo (Linux).
func physicalMemory() (int64, bool) {
	if runtime.GOOS == "darwin" {
		return darwinMemory()
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb <= 0 || kb > math.MaxInt64>>10 {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}
