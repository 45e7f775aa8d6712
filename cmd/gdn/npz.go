package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"codeberg.org/sbinet/npyio/npz"
)

// array is one array of an .npz file, its values in C order as float64.
type array struct {
	name  string
	dtype string // "float32" or "float64"
	shape []int
	data  []float64
}

// npzFile reads the arrays of an .npz file by name. Arrays may be stored
// as "name.npy" (numpy's savez) or plain "name".
type npzFile struct {
	path string
	r    *npz.Reader
	keys map[string]string // array name -> entry name
}

func openNPZ(path string) (*npzFile, error) {
	r, err := npz.Open(path)
	if err != nil {
		return nil, err
	}
	f := &npzFile{path: path, r: r, keys: map[string]string{}}
	for _, k := range r.Keys() {
		f.keys[strings.TrimSuffix(k, ".npy")] = k
	}
	return f, nil
}

func (f *npzFile) Close() error { return f.r.Close() }

func (f *npzFile) has(name string) bool { _, ok := f.keys[name]; return ok }

// errMissing is wrapped by read's error for an array not in the file.
var errMissing = errors.New("missing")

// read returns the named array, which must be float32 or float64. A
// Fortran-ordered array is reordered to C order.
func (f *npzFile) read(name string) (*array, error) {
	key, ok := f.keys[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, errMissing)
	}
	h := f.r.Header(key)
	if h == nil {
		return nil, fmt.Errorf("%s: not a readable .npy array", name)
	}
	typ := strings.Trim(h.Descr.Type, `'"`)
	a := &array{name: name, shape: append([]int(nil), h.Descr.Shape...)}
	kind := strings.TrimLeft(typ, "<>=|")
	switch kind {
	case "f4":
		a.dtype = "float32"
		var v []float32
		if err := f.r.Read(key, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		a.data = make([]float64, len(v))
		for i, x := range v {
			a.data[i] = float64(x)
		}
	case "f8":
		a.dtype = "float64"
		if err := f.r.Read(key, &a.data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	default:
		return nil, fmt.Errorf("%s: dtype %s (numpy %q), want float32 or float64", name, numpyName(kind), typ)
	}
	n := 1
	for _, d := range a.shape {
		n *= d
	}
	if len(a.data) != n {
		return nil, fmt.Errorf("%s: %d values for shape %v", name, len(a.data), a.shape)
	}
	if h.Descr.Fortran && len(a.shape) > 1 {
		a.data = fortranToC(a.data, a.shape)
	}
	return a, nil
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

// fortranToC reorders column-major data of the given shape to row-major.
func fortranToC(src []float64, shape []int) []float64 {
	dst := make([]float64, len(src))
	idx := make([]int, len(shape))
	for c := range dst { // c walks C order; idx is its multi-index
		f, stride := 0, 1
		for d := range shape {
			f += idx[d] * stride
			stride *= shape[d]
		}
		dst[c] = src[f]
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return dst
}

// nest returns data (C order) as nested slices of the given shape, which
// npyio writes as an array of that shape. The slices share data.
func nest(data []float64, shape []int) any {
	switch len(shape) {
	case 0:
		return data[0]
	case 1:
		return data
	}
	inner := 1
	for _, d := range shape[1:] {
		inner *= d
	}
	switch len(shape) {
	case 2:
		out := make([][]float64, shape[0])
		for i := range out {
			out[i] = data[i*inner : (i+1)*inner]
		}
		return out
	case 3:
		out := make([][][]float64, shape[0])
		for i := range out {
			out[i] = nest(data[i*inner:(i+1)*inner], shape[1:]).([][]float64)
		}
		return out
	case 4:
		out := make([][][][]float64, shape[0])
		for i := range out {
			out[i] = nest(data[i*inner:(i+1)*inner], shape[1:]).([][][]float64)
		}
		return out
	}
	panic(fmt.Sprintf("nest: %d dimensions", len(shape)))
}

// writeNPZ writes the arrays, float64, to path as numpy's savez would
// (entries "name.npy"), whole or not at all: it writes a temporary file in
// the same directory and renames it over path only once every byte is on
// disk.
func writeNPZ(path string, arrays []*array) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := npz.NewWriter(tmp)
	for _, a := range arrays {
		if err := w.Write(a.name+".npy", nest(a.data, a.shape)); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
