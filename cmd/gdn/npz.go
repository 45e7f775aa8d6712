package main

import (
	"fmt"
	"os"
	"path/filepath"

	"codeberg.org/sbinet/npyio/npz"
)

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
