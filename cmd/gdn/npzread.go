package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The .npz reader. An .npz file is a zip archive of .npy arrays; every
// number in it (the zip directory's sizes, the .npy header's shape and
// header length) may be hostile. Nothing is allocated from a number in the
// file before it has been checked: openNPZ reads the zip directory only;
// header reads and checks one array's .npy header (at most maxHeader
// bytes) against its zip entry; read decodes the data, through a reader
// capped at the declared size, into a slice the caller has accounted for
// (see gradCase.need).

// array is one array of an .npz file, its values in C order as float64.
type array struct {
	name  string
	dtype string // "float32" or "float64"
	shape []int
	data  []float64
}

// npyHeader is one array's checked .npy header.
type npyHeader struct {
	descr   string // numpy's type string, e.g. "<f8"
	dtype   string // "float32" or "float64"; other numpy types are refused
	order   binary.ByteOrder
	size    int // bytes per element
	fortran bool
	shape   []int
	n       int   // elements, the product of shape
	offset  int64 // bytes before the data: magic, version, header
}

// bytes is the size of the data the header declares.
func (h *npyHeader) bytes() int64 { return int64(h.n) * int64(h.size) }

// npzFile reads the arrays of an .npz file by name. Arrays may be stored
// as "name.npy" (numpy's savez) or plain "name"; an archive that holds a
// name twice (two "q.npy", or "q" and "q.npy") is ambiguous, and reading
// that name is an error.
type npzFile struct {
	path    string
	c       io.Closer // nil when reading from memory
	entries map[string][]*zip.File
}

// openNPZ opens the .npz file at path and reads its zip directory.
func openNPZ(path string) (*npzFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	z, err := newNPZ(f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	z.path, z.c = path, f
	return z, nil
}

// newNPZ reads the zip directory of an .npz archive of size bytes from r.
func newNPZ(r io.ReaderAt, size int64) (*npzFile, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("not an .npz file (a zip archive of .npy arrays): %w", err)
	}
	f := &npzFile{entries: map[string][]*zip.File{}}
	for _, e := range zr.File {
		name := strings.TrimSuffix(e.Name, ".npy")
		f.entries[name] = append(f.entries[name], e)
	}
	return f, nil
}

func (f *npzFile) Close() error {
	if f.c == nil {
		return nil
	}
	return f.c.Close()
}

// has reports whether the archive holds an entry for name (perhaps twice:
// header and read report that).
func (f *npzFile) has(name string) bool { return len(f.entries[name]) > 0 }

// names lists the array names in the archive, sorted.
func (f *npzFile) names() []string {
	out := make([]string, 0, len(f.entries))
	for n := range f.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// errMissing is wrapped by header's and read's error for an array not in
// the file.
var errMissing = errors.New("missing")

// errPanic is wrapped by read's error when decoding panicked: a bug of
// this reader, which the fuzz test looks for.
var errPanic = errors.New("internal error")

// entry returns name's one zip entry.
func (f *npzFile) entry(name string) (*zip.File, error) {
	es := f.entries[name]
	switch len(es) {
	case 0:
		return nil, fmt.Errorf("%s: %w", name, errMissing)
	case 1:
		return es[0], nil
	}
	keys := make([]string, len(es))
	for i, e := range es {
		keys[i] = strconv.Quote(e.Name)
	}
	return nil, fmt.Errorf("%s: the archive holds %d entries for it (%s): ambiguous, keep one", name, len(es), strings.Join(keys, ", "))
}

// maxHeader bounds an .npy header's length in bytes; numpy's own reader
// refuses headers longer than 10000 bytes by default.
const maxHeader = 1 << 16

// maxDims bounds the number of dimensions, as numpy does.
const maxDims = 32

// header reads and checks name's .npy header against its zip entry: a
// float32 or float64 type, a shape whose element and byte counts fit in
// int, and a data size that is what the entry holds. Nothing is decoded.
func (f *npzFile) header(name string) (*npyHeader, error) {
	_, h, err := f.lookup(name)
	return h, err
}

// lookup returns name's zip entry and checked header.
func (f *npzFile) lookup(name string) (*zip.File, *npyHeader, error) {
	e, err := f.entry(name)
	if err != nil {
		return nil, nil, err
	}
	h, err := readHeader(e)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return e, h, nil
}

func readHeader(e *zip.File) (*npyHeader, error) {
	rc, err := e.Open()
	if err != nil {
		return nil, fmt.Errorf("zip entry %q: %w", e.Name, err)
	}
	defer rc.Close()
	h, err := parsePrelude(io.LimitReader(rc, 12+maxHeader))
	if err != nil {
		return nil, err
	}
	if have := int64(e.UncompressedSize64) - h.offset; e.UncompressedSize64 > math.MaxInt64 || have != h.bytes() {
		return nil, fmt.Errorf("the header declares %d bytes of data (%s %s), but its zip entry holds %d bytes after the %d-byte header",
			h.bytes(), h.dtype, pyShape(h.shape), have, h.offset)
	}
	return h, nil
}

// parsePrelude reads the .npy magic, version and header from r.
func parsePrelude(r io.Reader) (*npyHeader, error) {
	var pre [8]byte
	if n, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("not an .npy array (%d bytes)", n)
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("not an .npy array (no \\x93NUMPY magic)")
	}
	major, minor := pre[6], pre[7]
	if major < 1 || major > 3 || minor != 0 {
		return nil, fmt.Errorf(".npy format version %d.%d, want 1.0, 2.0 or 3.0", major, minor)
	}
	var hlen int
	off := int64(10)
	if major == 1 {
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf(".npy header length: %v", err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	} else {
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf(".npy header length: %v", err)
		}
		n := binary.LittleEndian.Uint32(b[:])
		if n > maxHeader {
			return nil, fmt.Errorf(".npy header of %d bytes, more than %d", n, maxHeader)
		}
		hlen = int(n)
		off = 12
	}
	buf := make([]byte, hlen)
	if n, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf(".npy header length %d points past the entry's end (%d header bytes there)", hlen, n)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return nil, err
	}
	h.offset = off + int64(hlen)
	return h, nil
}

// parseHeader parses the header dictionary, a Python literal such as
//
//	{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
//
// followed by spaces and a newline: exactly the keys descr, fortran_order
// and shape, in any order, each once.
func parseHeader(b []byte) (*npyHeader, error) {
	p := &pyParser{b: b}
	h := &npyHeader{}
	seen := map[string]bool{}
	if !p.eat('{') {
		return nil, p.fail("'{'")
	}
	for !p.eat('}') {
		key, ok := p.str()
		if !ok {
			return nil, p.fail("a quoted key or '}'")
		}
		if seen[key] {
			return nil, fmt.Errorf(".npy header: key %q appears twice", key)
		}
		seen[key] = true
		if !p.eat(':') {
			return nil, p.fail("':'")
		}
		switch key {
		case "descr":
			s, ok := p.str()
			if !ok {
				if p.peek() == '[' {
					return nil, errors.New(".npy header: descr is a structured dtype, want float32 or float64")
				}
				return nil, p.fail("a quoted type string for descr")
			}
			h.descr = s
		case "fortran_order":
			switch {
			case p.word("True"):
				h.fortran = true
			case p.word("False"):
			default:
				return nil, p.fail("True or False for fortran_order")
			}
		case "shape":
			shape, err := p.tuple()
			if err != nil {
				return nil, err
			}
			h.shape = shape
		default:
			return nil, fmt.Errorf(".npy header: unknown key %q (want descr, fortran_order and shape)", key)
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return nil, p.fail("',' or '}'")
			}
			break
		}
	}
	p.space()
	if p.i != len(p.b) {
		return nil, fmt.Errorf(".npy header: unexpected %q after the dictionary", clip(p.b[p.i:]))
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return nil, fmt.Errorf(".npy header: no %s key", k)
		}
	}
	if err := h.setType(); err != nil {
		return nil, err
	}
	n := 1
	for i, d := range h.shape {
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return nil, fmt.Errorf("shape %s: more than 2^63 elements (the product overflows at dimension %d)", pyShape(h.shape), i)
		}
		n = int(lo)
	}
	if n > math.MaxInt64/h.size {
		return nil, fmt.Errorf("shape %s: %d elements of %d bytes do not fit in 64 bits", pyShape(h.shape), n, h.size)
	}
	h.n = n
	return h, nil
}

// setType reads h.descr: float32 or float64 in either byte order.
func (h *npyHeader) setType() error {
	kind := strings.TrimLeft(h.descr, "<>=|")
	switch kind {
	case "f4":
		h.dtype, h.size = "float32", 4
	case "f8":
		h.dtype, h.size = "float64", 8
	default:
		return fmt.Errorf("dtype %s (numpy %q), want float32 or float64", numpyName(kind), h.descr)
	}
	switch {
	case strings.HasPrefix(h.descr, ">"):
		h.order = binary.BigEndian
	case strings.HasPrefix(h.descr, "<"):
		h.order = binary.LittleEndian
	case len(h.descr) > len(kind)+1:
		return fmt.Errorf("dtype %q: more than one byte-order mark", h.descr)
	default: // "=" or none: the writer's native order, which numpy never writes for floats
		h.order = binary.NativeEndian
	}
	return nil
}

// pyParser reads the small subset of Python literals .npy headers use.
type pyParser struct {
	b []byte
	i int
}

func (p *pyParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *pyParser) peek() byte {
	p.space()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *pyParser) eat(c byte) bool {
	if p.peek() == c && p.i < len(p.b) {
		p.i++
		return true
	}
	return false
}

func (p *pyParser) word(w string) bool {
	p.space()
	if bytes.HasPrefix(p.b[p.i:], []byte(w)) {
		p.i += len(w)
		return true
	}
	return false
}

// str reads a quoted string without escapes.
func (p *pyParser) str() (string, bool) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", false
	}
	end := bytes.IndexByte(p.b[p.i+1:], q)
	if end < 0 {
		return "", false
	}
	s := p.b[p.i+1 : p.i+1+end]
	if bytes.IndexByte(s, '\\') >= 0 || bytes.IndexByte(s, '\n') >= 0 {
		return "", false
	}
	p.i += end + 2
	return string(s), true
}

// tuple reads a tuple of non-negative integers: (), (n,) or (a, b, ...).
func (p *pyParser) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, p.fail("a tuple for shape")
	}
	shape := []int{}
	for !p.eat(')') {
		p.space()
		start := p.i
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
		if p.i == start {
			return nil, p.fail("a non-negative integer in shape")
		}
		d, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf(".npy header: shape dimension %s does not fit in 64 bits", clip(p.b[start:p.i]))
		}
		if len(shape) == maxDims {
			return nil, fmt.Errorf(".npy header: shape has more than %d dimensions", maxDims)
		}
		shape = append(shape, int(d))
		if !p.eat(',') {
			if !p.eat(')') {
				return nil, p.fail("',' or ')' in shape")
			}
			if len(shape) == 1 {
				return nil, errors.New(".npy header: shape (n) is not a tuple, want (n,)")
			}
			break
		}
	}
	return shape, nil
}

func (p *pyParser) fail(want string) error {
	p.space()
	if p.i >= len(p.b) {
		return fmt.Errorf(".npy header: the dictionary ends early, want %s", want)
	}
	return fmt.Errorf(".npy header: unexpected %q at byte %d, want %s", clip(p.b[p.i:]), p.i, want)
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "..."
	}
	return string(b)
}

// numpyName names a numpy type code for error messages.
func numpyName(code string) string {
	names := map[string]string{
		"f2": "float16", "b1": "bool", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
		"u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "c8": "complex64", "c16": "complex128",
	}
	if n, ok := names[code]; ok {
		return n
	}
	return code
}

// read decodes the named array, checking its header first: float32 or
// float64 values, widened to float64; a Fortran-ordered array is stored in
// C order. It allocates the array's values (8 bytes per element) and a
// fixed-size buffer, no more: the data is read through a reader capped at
// the size the header declares, and the zip entry's checksum is checked.
func (f *npzFile) read(name string) (a *array, err error) {
	defer func() {
		// The last line of defence: the checks above should make this
		// unreachable, and the fuzz test looks for it.
		if r := recover(); r != nil {
			a, err = nil, fmt.Errorf("%s: %w while reading the array: %v", name, errPanic, r)
		}
	}()
	e, h, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	rc, err := e.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, h.offset); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	a = &array{name: name, dtype: h.dtype, shape: h.shape, data: make([]float64, h.n)}
	if err := decode(a.data, io.LimitReader(rc, h.bytes()), h); err != nil {
		return nil, fmt.Errorf("%s: data: %w", name, err)
	}
	// The entry must end here; reading to its end checks its CRC-32.
	var one [1]byte
	if n, err := rc.Read(one[:]); n != 0 || !errors.Is(err, io.EOF) {
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("bytes after the declared data")
		}
		return nil, fmt.Errorf("%s: zip entry %q: %w", name, e.Name, err)
	}
	return a, nil
}

// decode reads h.n values of h's type from r into dst (len h.n), in C
// order whatever h's order.
func decode(dst []float64, r io.Reader, h *npyHeader) error {
	// Fortran order: element f of the stream is at multi-index idx (first
	// dimension fastest); c is its C-order offset, stepped by the C strides.
	var idx, stride []int
	if h.fortran && len(h.shape) > 1 {
		idx = make([]int, len(h.shape))
		stride = make([]int, len(h.shape))
		s := 1
		for d := len(h.shape) - 1; d >= 0; d-- {
			stride[d] = s
			s *= h.shape[d]
		}
	}
	buf := make([]byte, 64<<10)
	c, done := 0, 0
	for done < h.n {
		m := min(len(buf)/h.size, h.n-done)
		chunk := buf[:m*h.size]
		if _, err := io.ReadFull(r, chunk); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("the entry ends after %d of %d values", done, h.n)
			}
			return err
		}
		for i := 0; i < m; i++ {
			var v float64
			if h.size == 4 {
				v = float64(math.Float32frombits(h.order.Uint32(chunk[4*i:])))
			} else {
				v = math.Float64frombits(h.order.Uint64(chunk[8*i:]))
			}
			if idx == nil {
				dst[done+i] = v
				continue
			}
			dst[c] = v
			for d := 0; d < len(idx); d++ {
				idx[d]++
				c += stride[d]
				if idx[d] < h.shape[d] {
					break
				}
				c -= idx[d] * stride[d]
				idx[d] = 0
			}
		}
		done += m
	}
	return nil
}
