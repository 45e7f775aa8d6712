package main

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gdnback/gdnback/gdn"
)

// Hostile .npz files, built byte by byte in the tests.

// npyHead is an .npy v1 prelude around the header dictionary dict, padded
// with spaces and a newline as numpy pads it.
func npyHead(dict string) []byte {
	h := dict
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(h)))
	b.WriteString(h)
	return b.Bytes()
}

// npyBytes is a whole .npy array: descr "<f8", ">f4" and so on, shape as
// Python writes it ("(1, 2, 3)"), the values in the order given.
func npyBytes(descr string, fortran bool, shape string, vals []float64) []byte {
	order := "False"
	if fortran {
		order = "True"
	}
	b := bytes.NewBuffer(npyHead(fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, order, shape)))
	var bo binary.ByteOrder = binary.LittleEndian
	if strings.HasPrefix(descr, ">") {
		bo = binary.BigEndian
	}
	for _, v := range vals {
		if strings.HasSuffix(descr, "f4") {
			binary.Write(b, bo, float32(v))
		} else {
			binary.Write(b, bo, v)
		}
	}
	return b.Bytes()
}

// f64s returns n values, small and varied.
func f64s(n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = 0.1 * float64(i%7-3)
	}
	return x
}

// zipEntry is one entry of a hand-made zip archive. With size set, the
// directory claims that many uncompressed bytes whatever data holds.
type zipEntry struct {
	name    string
	data    []byte
	deflate bool
	size    *uint64
	crc     *uint32
}

func zipBytes(t testing.TB, entries []zipEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, e := range entries {
		fh := &zip.FileHeader{Name: e.name, Method: zip.Store}
		body := e.data
		if e.deflate {
			fh.Method = zip.Deflate
			var c bytes.Buffer
			fw, _ := flate.NewWriter(&c, flate.BestSpeed)
			fw.Write(e.data)
			fw.Close()
			body = c.Bytes()
		}
		fh.CRC32 = crc32.ChecksumIEEE(e.data)
		if e.crc != nil {
			fh.CRC32 = *e.crc
		}
		fh.UncompressedSize64 = uint64(len(e.data))
		if e.size != nil {
			fh.UncompressedSize64 = *e.size
		}
		fh.CompressedSize64 = uint64(len(body))
		ww, err := w.CreateRaw(fh)
		if err != nil {
			t.Fatal(err)
		}
		ww.Write(body)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// npzOf opens an archive of the given entries (in name order) in memory.
func npzOf(t testing.TB, entries map[string][]byte) *npzFile {
	t.Helper()
	var es []zipEntry
	for _, n := range sortedKeys(entries) {
		es = append(es, zipEntry{name: n, data: entries[n]})
	}
	z := zipBytes(t, es)
	f, err := newNPZ(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// goodEntries is a valid grad input as .npy entries: B 1, T 2, H 1, HV 2,
// K 3, V 2.
func goodEntries() map[string][]byte {
	return map[string][]byte{
		"q.npy":    npyBytes("<f8", false, "(1, 2, 1, 3)", f64s(6)),
		"k.npy":    npyBytes("<f4", false, "(1, 2, 1, 3)", f64s(6)),
		"v.npy":    npyBytes(">f8", false, "(1, 2, 2, 2)", f64s(8)),
		"g.npy":    npyBytes("<f8", true, "(1, 2, 2)", f64s(4)),
		"beta.npy": npyBytes("<f8", false, "(1, 2, 2)", f64s(4)),
		"do.npy":   npyBytes("<f8", false, "(1, 2, 2, 2)", f64s(8)),
	}
}

// writeEntries writes an archive of goodEntries edited by edit (entries
// in name order, any extra ones after) into a new directory and returns
// its path.
func writeEntries(t testing.TB, edit func(m map[string][]byte), extra ...zipEntry) string {
	t.Helper()
	m := goodEntries()
	if edit != nil {
		edit(m)
	}
	var es []zipEntry
	for _, n := range sortedKeys(m) {
		es = append(es, zipEntry{name: n, data: m[n]})
	}
	es = append(es, extra...)
	path := filepath.Join(t.TempDir(), "case.npz")
	if err := os.WriteFile(path, zipBytes(t, es), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func u64(x uint64) *uint64 { return &x }
func u32(x uint32) *uint32 { return &x }

// hostileCase is one broken input and what gdn grad must say about it.
type hostileCase struct {
	name  string
	edit  func(m map[string][]byte)
	extra []zipEntry
	args  []string // extra flags
	want  []string // in stderr, in order of appearance not required
}

func hostileCases() []hostileCase {
	const q = "(1, 2, 1, 3)"
	zeros := make([]byte, 64<<20)
	state := f64s(4096)
	goodQ := npyBytes("<f8", false, q, f64s(6))
	return []hostileCase{
		// Class 1: malformed .npy headers.
		{name: "header dict does not parse", edit: func(m map[string][]byte) {
			m["q.npy"] = append(npyHead("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 1, 3), "), make([]byte, 48)...)
		}, want: []string{"q: .npy header: the dictionary ends early, want a quoted key or '}'"}},
		{name: "header length points past the header", edit: func(m map[string][]byte) {
			b := npyBytes("<f8", false, q, f64s(6))
			binary.LittleEndian.PutUint16(b[8:], 5000)
			m["q.npy"] = b
		}, want: []string{"q: .npy header length 5000 points past the entry's end"}},
		{name: "shape too large to allocate", edit: func(m map[string][]byte) {
			m["q.npy"] = npyBytes("<f8", false, "(1048576, 1048576, 1, 8)", f64s(6))
		}, want: []string{"q: the header declares 70368744177664 bytes of data (float64 (1048576, 1048576, 1, 8)), but its zip entry holds 48 bytes"}},
		{name: "Fortran shape overflows int", edit: func(m map[string][]byte) {
			m["q.npy"] = npyBytes("<f8", true, "(4611686018427387904, 4, 1, 3)", f64s(6))
		}, want: []string{"q: shape (4611686018427387904, 4, 1, 3): more than 2^63 elements (the product overflows at dimension 1)"}},
		{name: "element bytes overflow", edit: func(m map[string][]byte) {
			m["v.npy"] = npyBytes("<f8", false, "(1, 2, 2, 1152921504606846976)", f64s(8))
		}, want: []string{"v: shape (1, 2, 2, 1152921504606846976): 4611686018427387904 elements of 8 bytes do not fit in 64 bits"}},
		{name: "dimension beyond int64", edit: func(m map[string][]byte) {
			m["q.npy"] = npyBytes("<f8", false, "(1, 99999999999999999999, 1, 3)", f64s(6))
		}, want: []string{"q: .npy header: shape dimension 99999999999999999999 does not fit in 64 bits"}},
		{name: "negative dimension", edit: func(m map[string][]byte) {
			m["k.npy"] = npyBytes("<f8", false, "(1, -2, 1, 3)", f64s(6))
		}, want: []string{"k: .npy header: unexpected \"-2, 1, 3), }"}},
		{name: "structured dtype", edit: func(m map[string][]byte) {
			m["beta.npy"] = append(npyHead("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1, 2, 2), }"), make([]byte, 32)...)
		}, want: []string{"beta: .npy header: descr is a structured dtype, want float32 or float64"}},
		{name: "integer dtype", edit: func(m map[string][]byte) {
			m["beta.npy"] = append(npyHead("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2, 2), }"), make([]byte, 32)...)
		}, want: []string{`beta: dtype int64 (numpy "<i8"), want float32 or float64`}},
		{name: "unknown key", edit: func(m map[string][]byte) {
			m["g.npy"] = append(npyHead("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 2), 'x': 1}"), make([]byte, 32)...)
		}, want: []string{`g: .npy header: unknown key "x"`}},
		{name: "no shape key", edit: func(m map[string][]byte) {
			m["do.npy"] = append(npyHead("{'descr': '<f8', 'fortran_order': False}"), make([]byte, 64)...)
		}, want: []string{"do: .npy header: no shape key"}},
		{name: "key twice", edit: func(m map[string][]byte) {
			m["do.npy"] = append(npyHead("{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2, 2)}"), make([]byte, 64)...)
		}, want: []string{`do: .npy header: key "descr" appears twice`}},
		{name: "no magic", edit: func(m map[string][]byte) {
			m["v.npy"] = []byte("PK not numpy at all, just some bytes")
		}, want: []string{`v: not an .npy array (no \x93NUMPY magic)`}},
		{name: "version 9", edit: func(m map[string][]byte) {
			b := npyBytes("<f8", false, "(1, 2, 2, 2)", f64s(8))
			b[6] = 9
			m["v.npy"] = b
		}, want: []string{"v: .npy format version 9.0, want 1.0, 2.0 or 3.0"}},
		{name: "empty entry", edit: func(m map[string][]byte) { m["v.npy"] = nil }, want: []string{"v: not an .npy array (0 bytes)"}},
		{name: "not a zip", extra: nil, args: []string{"-in", "/dev/null"}, want: []string{"/dev/null: not an .npz file"}},

		// Class 2: sizes beyond the entry, the file or the memory.
		{name: "3 KB file declares 8 GiB", edit: func(m map[string][]byte) {
			m["v.npy"] = npyBytes("<f8", false, "(1, 2, 2, 268435456)", f64s(360))
		}, want: []string{"v: the header declares 8589934592 bytes of data (float64 (1, 2, 2, 268435456)), but its zip entry holds 2880 bytes"}},
		{name: "deflate bomb", edit: func(m map[string][]byte) {
			delete(m, "v.npy")
			delete(m, "do.npy")
		}, extra: []zipEntry{
			{name: "v.npy", deflate: true, data: append(npyHead("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 2, 2097152), }"), zeros...)},
			{name: "do.npy", deflate: true, data: append(npyHead("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 2, 2097152), }"), zeros...)}},
			args: []string{"-mem", "256MiB"}, want: []string{"case.npz: B=1 T=2 H=1 HV=2 K=3 V=2097152 needs ", "more than -mem 256MiB; raise -mem if the machine has it"}},
		{name: "zip directory understates a deflate stream", edit: func(m map[string][]byte) { delete(m, "q.npy") },
			extra: []zipEntry{{name: "q.npy", deflate: true, size: u64(uint64(len(goodQ))), data: append(goodQ, zeros...)}},
			want:  []string{`q: zip entry "q.npy": zip: not a valid zip file`}},
		{name: "zip directory overstates the data", edit: func(m map[string][]byte) { delete(m, "q.npy") },
			extra: []zipEntry{{name: "q.npy", deflate: true, size: u64(uint64(len(goodQ) + 48*1023)), data: goodQ}},
			want:  []string{"q: the header declares 48 bytes of data (float64 (1, 2, 1, 3)), but its zip entry holds 49152 bytes"}},
		{name: "checksum", edit: func(m map[string][]byte) { delete(m, "q.npy") },
			extra: []zipEntry{{name: "q.npy", crc: u32(12345), data: npyBytes("<f8", false, q, f64s(6))}},
			want:  []string{`q: zip entry "q.npy": zip: checksum error`}},
		{name: "a large state in a small file", edit: func(m map[string][]byte) {
			m["q.npy"] = npyBytes("<f8", false, "(1, 1, 1, 4096)", state)
			m["k.npy"] = m["q.npy"]
			m["v.npy"] = npyBytes("<f8", false, "(1, 1, 1, 4096)", state)
			m["do.npy"] = m["v.npy"]
			m["g.npy"] = npyBytes("<f8", false, "(1, 1, 1)", f64s(1))
			m["beta.npy"] = m["g.npy"]
		}, args: []string{"-mem", "256MiB"}, want: []string{"B=1 T=1 H=1 HV=1 K=4096 V=4096 needs ", "more than -mem 256MiB"}},

		// Class 3: duplicate names.
		{name: "q.npy twice", extra: []zipEntry{{name: "q.npy", data: npyBytes("<f8", false, q, f64s(6))}},
			want: []string{`q: the archive holds 2 entries for it ("q.npy", "q.npy"): ambiguous, keep one`}},
		{name: "q and q.npy", extra: []zipEntry{{name: "q", data: npyBytes("<f8", false, q, f64s(6))}},
			want: []string{`q: the archive holds 2 entries for it ("q.npy", "q"): ambiguous, keep one`}},

		// Class 4: zero-size dimensions.
		{name: "B = 0", edit: func(m map[string][]byte) { m["q.npy"] = npyBytes("<f8", false, "(0, 2, 1, 3)", nil) },
			want: []string{"q: shape (0, 2, 1, 3) (float64): B = 0, want at least 1"}},
		{name: "HV = 0", edit: func(m map[string][]byte) { m["v.npy"] = npyBytes("<f8", false, "(1, 2, 0, 2)", nil) },
			want: []string{"v: shape (1, 2, 0, 2) (float64): HV = 0, want at least 1"}},
		{name: "V = 0", edit: func(m map[string][]byte) { m["v.npy"] = npyBytes("<f8", false, "(1, 2, 2, 0)", nil) },
			want: []string{"v: shape (1, 2, 2, 0) (float64): V = 0, want at least 1"}},
		{name: "K = 0 in k", edit: func(m map[string][]byte) { m["k.npy"] = npyBytes("<f8", false, "(1, 2, 1, 0)", nil) },
			want: []string{"k: shape (1, 2, 1, 0) (float64): K = 0, want at least 1"}},
	}
}

// TestGradHostile runs gdn grad on each hostile file in a child process and
// checks the exit status (1), that the message names the array, that no
// file is left in the output directory, and that the child's peak memory
// stayed far below what the file declares.
func TestGradHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 64 MiB deflate stream per case; -short skips it")
	}
	const bound = 48 << 20
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := writeEntries(t, tc.edit, tc.extra...)
			dir := t.TempDir()
			out := filepath.Join(dir, "result.npz")
			args := append([]string{"grad", "-in", in, "-out", out}, tc.args...)
			if len(tc.args) >= 2 && tc.args[0] == "-in" {
				args = append([]string{"grad", "-out", out}, tc.args...)
			}
			r := runChild(t, args...)
			if r.status != 1 {
				t.Errorf("status %d, want 1\n%s", r.status, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q\nlacks %q", r.stderr, w)
				}
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("a panic:\n%s", r.stderr)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("files left in the output directory: %v", left)
			}
			if r.maxRSS > bound {
				t.Errorf("peak memory %s, bound %s", fmtBytes(r.maxRSS), fmtBytes(int64(bound)))
			}
			t.Logf("peak memory %s: %s", fmtBytes(r.maxRSS), strings.TrimSpace(r.stderr))
		})
	}
}

// TestReadNPZ reads good arrays of every supported kind back exactly.
func TestReadNPZ(t *testing.T) {
	vals := []float64{1.5, -2, math.Inf(1), 0.25, 3, -0.125}
	f := npzOf(t, map[string][]byte{
		"le8.npy": npyBytes("<f8", false, "(2, 3)", vals),
		"be8.npy": npyBytes(">f8", false, "(2, 3)", vals),
		"le4.npy": npyBytes("<f4", false, "(2, 3)", vals),
		"be4.npy": npyBytes(">f4", false, "(2, 3)", vals),
		"s":       npyBytes("<f8", false, "()", vals[:1]),
		"one.npy": npyBytes("<f8", true, "(6,)", vals),
	})
	for _, n := range []string{"le8", "be8", "le4", "be4", "one"} {
		a, err := f.read(n)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(a.data) != fmt.Sprint(vals) {
			t.Errorf("%s: %v, want %v", n, a.data, vals)
		}
	}
	if a, err := f.read("s"); err != nil || len(a.shape) != 0 || a.data[0] != 1.5 {
		t.Errorf("0-d: %v, %v", a, err)
	}
}

// TestGradMemoryBound: on a real run the child's peak memory stays within
// what need counted (plus the runtime's own), and -mem one byte below the
// need refuses the run before reading it.
func TestGradMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("a run of a few seconds; -short skips it")
	}
	const B, T, H, HV, K, V = 1, 8192, 1, 2, 64, 64
	sh := func(d ...int) string {
		s := make([]string, len(d))
		for i, x := range d {
			s[i] = fmt.Sprint(x)
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	in := writeEntries(t, func(m map[string][]byte) {
		m["q.npy"] = npyBytes("<f4", false, sh(B, T, H, K), f64s(B*T*H*K))
		m["k.npy"] = m["q.npy"]
		m["v.npy"] = npyBytes("<f8", false, sh(B, T, HV, V), f64s(B*T*HV*V))
		m["do.npy"] = m["v.npy"]
		m["g.npy"] = npyBytes("<f8", false, sh(B, T, HV), make([]float64, B*T*HV))
		m["beta.npy"] = npyBytes("<f8", false, sh(B, T, HV), f64s(B*T*HV))
		m["h0.npy"] = npyBytes("<f8", false, sh(B, HV, K, V), f64s(B*HV*K*V))
	})
	f, err := openNPZ(in)
	if err != nil {
		t.Fatal(err)
	}
	c, err := inspectGrad(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct{ prec, algo string }{{"f64", "recurrent"}, {"f32", "recurrent"}, {"f64", "chunk"}} {
		prec := run.prec + "/" + run.algo
		elem := map[string]int{"f64": 8, "f32": 4}[run.prec]
		algo := map[string]gdn.Algo{"recurrent": gdn.Recurrent, "chunk": gdn.Chunk}[run.algo]
		need := c.need(gradRun{elem: elem, workers: runtime.GOMAXPROCS(0), algo: algo}).total()
		out := filepath.Join(t.TempDir(), "r.npz")
		r := runChild(t, "grad", "-in", in, "-out", out, "-precision", run.prec, "-algo", run.algo, "-mem", fmt.Sprint(need))
		if r.status != 0 {
			t.Fatalf("%s: status %d\n%s", prec, r.status, r.stderr)
		}
		const runtimeBase = 32 << 20
		t.Logf("%s: need %s, peak resident %s", prec, fmtBytes(need), fmtBytes(r.maxRSS))
		if r.maxRSS > need+runtimeBase {
			t.Errorf("%s: peak memory %s, more than the need counted, %s, and %s for the runtime", prec, fmtBytes(r.maxRSS), fmtBytes(need), fmtBytes(int64(runtimeBase)))
		}
		r = runChild(t, "grad", "-in", in, "-out", out+"2", "-precision", run.prec, "-algo", run.algo, "-mem", fmt.Sprint(need-1))
		if r.status != 1 || !strings.Contains(r.stderr, "needs "+fmtBytes(need)) {
			t.Errorf("%s: -mem need-1: status %d, %q", prec, r.status, r.stderr)
		}
	}
}

// TestGradOutputChecked: an -out that cannot be written is refused before
// the input is read (here an input that would fail otherwise), naming the
// path given, with nothing left behind.
func TestGradOutputChecked(t *testing.T) {
	bad := writeEntries(t, func(m map[string][]byte) { m["q.npy"] = []byte("broken") })
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	tests := []struct {
		out, want string
	}{
		{filepath.Join(dir, "no/such/dir/r.npz"), "-out " + filepath.Join(dir, "no/such/dir/r.npz") + ": directory " + filepath.Join(dir, "no/such/dir") + ": no such file or directory"},
		{dir, "-out " + dir + " is a directory; name a file"},
		{filepath.Join(file, "r.npz"), "-out " + filepath.Join(file, "r.npz") + ": " + file + " is not a directory"},
		{filepath.Join(ro, "r.npz"), "-out " + filepath.Join(ro, "r.npz") + ": cannot write in directory " + ro + ": permission denied"},
	}
	for _, tt := range tests {
		if tt.out == filepath.Join(ro, "r.npz") && os.Geteuid() == 0 {
			t.Logf("%s: skipped: root writes in a read-only directory", tt.out)
			continue
		}
		r := runChild(t, "grad", "-in", bad, "-out", tt.out)
		if r.status != 1 || r.stderr != "gdn grad: "+tt.want+"\n" {
			t.Errorf("-out %s: status %d, %q\nwant %q", tt.out, r.status, r.stderr, tt.want)
		}
		if r.maxRSS > 48<<20 {
			t.Errorf("-out %s: peak memory %s", tt.out, fmtBytes(r.maxRSS))
		}
	}
	if left, _ := os.ReadDir(ro); len(left) != 0 {
		t.Errorf("left in %s: %v", ro, left)
	}
}

// TestGradNonFinite: NaN and Inf in the inputs are computed with, as the op
// computes with them, and reported on stderr with the arrays they reach;
// the exit status stays 0.
func TestGradNonFinite(t *testing.T) {
	q := f64s(6)
	q[1] = math.NaN()
	beta := f64s(4)
	beta[0], beta[3] = math.Inf(1), math.Inf(-1)
	in := writeEntries(t, func(m map[string][]byte) {
		m["q.npy"] = npyBytes("<f8", false, "(1, 2, 1, 3)", q)
		m["beta.npy"] = npyBytes("<f4", false, "(1, 2, 2)", beta)
	})
	out := filepath.Join(t.TempDir(), "r.npz")
	st, stdout, errOut := runGdn("grad", "-in", in, "-out", out)
	if st != 0 || !strings.Contains(stdout, "wrote "+out) {
		t.Fatalf("status %d\n%s%s", st, stdout, errOut)
	}
	for _, want := range []string{
		"gdn grad: warning: input q holds 1 NaN and 0 Inf of 6 values\n",
		"gdn grad: warning: input beta holds 0 NaN and 2 Inf of 4 values\n",
		"gdn grad: warning: output o holds ",
		"gdn grad: warning: output dq holds ",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "input k ") || strings.Contains(errOut, "input v ") {
		t.Errorf("a finite input reported:\n%s", errOut)
	}
	// A finite case warns of nothing.
	st, _, errOut = runGdn("grad", "-in", writeEntries(t, nil), "-out", out)
	if st != 0 || errOut != "" {
		t.Errorf("finite case: status %d, stderr %q", st, errOut)
	}
}
