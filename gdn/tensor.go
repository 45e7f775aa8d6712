package gdn

import (
	"fmt"
	"math"
	"unsafe"
)

// Float is the element type of every tensor: float64 is the truth for
// gradient checks, float32 is what kernels are compared with.
type Float interface {
	float32 | float64
}

// Tensor is a read-only strided view of Data in ggml's dimension order:
// Ne[0] is the fastest-varying dimension. Element (i0, i1, i2, i3) is
//
//	Data[Off + i0*Nb[0] + i1*Nb[1] + i2*Nb[2] + i3*Nb[3]]
//
// Strides Nb count elements, not bytes (ggml's nb divided by the element
// size). A stride may be zero (the same element read again) or negative; the
// functions of this package check that every element a view names lies
// inside Data, and never write through a Tensor.
type Tensor[F Float] struct {
	Data []F
	Ne   [4]int
	Nb   [4]int
	Off  int
}

// Contiguous returns the dense view of data with shape ne, ne[0] fastest.
// It does not check len(data); the functions that take the view do.
func Contiguous[F Float](data []F, ne [4]int) Tensor[F] {
	return Tensor[F]{Data: data, Ne: ne, Nb: denseStrides(ne)}
}

// denseStrides are the element strides of a dense tensor of shape ne.
func denseStrides(ne [4]int) [4]int {
	return [4]int{1, ne[0], ne[0] * ne[1], ne[0] * ne[1] * ne[2]}
}

// Permute returns the view whose dimension d is dimension axes[d] of t; the
// data is shared, not copied. It is how ggml's ggml_permute views are made:
// for example Permute(t, [4]int{0, 2, 1, 3}) swaps heads and tokens.
//
// Permute panics if axes is not a permutation of 0, 1, 2, 3: like a
// mismatched dimension in gonum, that is a programmer's error, not data.
func Permute[F Float](t Tensor[F], axes [4]int) Tensor[F] {
	var seen [4]bool
	for _, a := range axes {
		if a < 0 || a > 3 || seen[a] {
			panic(fmt.Sprintf("gdn: Permute: axes %v are not a permutation of 0, 1, 2, 3", axes))
		}
		seen[a] = true
	}
	p := t
	for d, a := range axes {
		p.Ne[d] = t.Ne[a]
		p.Nb[d] = t.Nb[a]
	}
	return p
}

// At returns element (i0, i1, i2, i3). It does no bounds checking of its own
// beyond Go's slice check; call it only on a view that has passed validation.
func (t Tensor[F]) At(i0, i1, i2, i3 int) F {
	return t.Data[t.Off+i0*t.Nb[0]+i1*t.Nb[1]+i2*t.Nb[2]+i3*t.Nb[3]]
}

// Dense copies the view into a new contiguous slice, ne[0] fastest.
//
// Dense panics, naming the dimension, if the view is not one the functions
// of this package accept (a size below 1, or an element outside Data): a
// programmer's error, like an index out of range. The functions that take
// views return the same problem as an error.
func (t Tensor[F]) Dense() []F {
	if err := checkView("Dense", t, [4]int{-1, -1, -1, -1}, dimNames{"dim 0", "dim 1", "dim 2", "dim 3"}); err != nil {
		panic("gdn: " + err.Error())
	}
	out := make([]F, t.Ne[0]*t.Ne[1]*t.Ne[2]*t.Ne[3])
	n := 0
	for i3 := 0; i3 < t.Ne[3]; i3++ {
		for i2 := 0; i2 < t.Ne[2]; i2++ {
			for i1 := 0; i1 < t.Ne[1]; i1++ {
				n += t.row(out[n:n+t.Ne[0]], i1, i2, i3)
			}
		}
	}
	return out
}

// row copies the row (·, i1, i2, i3) into dst (len(dst) == Ne[0]) and
// returns its length.
func (t Tensor[F]) row(dst []F, i1, i2, i3 int) int {
	base := t.Off + i1*t.Nb[1] + i2*t.Nb[2] + i3*t.Nb[3]
	if t.Nb[0] == 1 {
		return copy(dst, t.Data[base:base+len(dst)])
	}
	for i := range dst {
		dst[i] = t.Data[base+i*t.Nb[0]]
	}
	return len(dst)
}

// MaxElems bounds every size this package computes, in elements: no
// tensor, output or scratch may exceed it, so that no product of
// dimensions can overflow int and no request is absurd.
const MaxElems = 1 << 40

const maxElems = MaxElems

// dimNames name ggml's four dimensions for one tensor, for error messages.
type dimNames [4]string

// checkView reports, naming the tensor and the dimension, a view whose shape
// differs from want (want[d] < 0 accepts any size) or that reads outside
// Data. It returns nil for a good view.
func checkView[F Float](name string, t Tensor[F], want [4]int, dims dimNames) error {
	for d := 0; d < 4; d++ {
		if t.Ne[d] < 1 {
			return fmt.Errorf("%s: ne[%d] (%s) = %d, want at least 1", name, d, dims[d], t.Ne[d])
		}
		if t.Ne[d] > maxElems {
			return fmt.Errorf("%s: ne[%d] (%s) = %d is too large", name, d, dims[d], t.Ne[d])
		}
		if want[d] >= 0 && t.Ne[d] != want[d] {
			return fmt.Errorf("%s: ne[%d] (%s) = %d, want %d", name, d, dims[d], t.Ne[d], want[d])
		}
	}
	if t.Off < 0 {
		return fmt.Errorf("%s: offset %d is negative", name, t.Off)
	}
	for d := 0; d < 4; d++ {
		nb := t.Nb[d]
		if nb > maxElems || nb < -maxElems {
			return fmt.Errorf("%s: nb[%d] (%s stride) = %d is too large", name, d, dims[d], nb)
		}
		// Check before multiplying, so that the product cannot overflow.
		if t.Ne[d] > 1 && (nb > maxElems/(t.Ne[d]-1) || nb < -maxElems/(t.Ne[d]-1)) {
			return fmt.Errorf("%s: dimension %d (%s) spans more than 2^40 elements (ne %d, nb %d)", name, d, dims[d], t.Ne[d], nb)
		}
	}
	if t.Off > maxElems {
		return fmt.Errorf("%s: offset %d is too large", name, t.Off)
	}
	// The lowest and highest element the view names: each dimension adds
	// (ne-1)*nb to one end or the other.
	lo, hi := t.extent()
	if lo < 0 {
		return fmt.Errorf("%s: strides %v with offset %d read before the start of the data (element %d)", name, t.Nb, t.Off, lo)
	}
	if hi >= len(t.Data) {
		return fmt.Errorf("%s: strides %v with offset %d read element %d, past the end of the data (len %d)", name, t.Nb, t.Off, hi, len(t.Data))
	}
	return nil
}

// extent returns the lowest and highest index of Data that a view checked
// by checkView reads.
func (t Tensor[F]) extent() (lo, hi int) {
	lo, hi = t.Off, t.Off
	for d := 0; d < 4; d++ {
		span := (t.Ne[d] - 1) * t.Nb[d]
		if span > 0 {
			hi += span
		} else {
			lo += span
		}
	}
	return lo, hi
}

// memRange is the memory [lo, hi) that a slice or a view's elements occupy.
type memRange struct{ lo, hi uintptr }

func sliceRange[F Float](x []F) memRange {
	if len(x) == 0 {
		return memRange{}
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	return memRange{p, p + uintptr(len(x))*unsafe.Sizeof(x[0])}
}

func viewRange[F Float](t Tensor[F]) memRange {
	if t.Data == nil {
		return memRange{}
	}
	lo, hi := t.extent()
	return sliceRange(t.Data[lo : hi+1])
}

func (r memRange) overlaps(o memRange) bool {
	return r.lo < r.hi && o.lo < o.hi && r.lo < o.hi && o.lo < r.hi
}

// checkOverlap refuses an output buffer that shares memory with another
// output or with what an input view reads: the op would read what it has
// overwritten, or write one result over another. outs and ins are named
// by names (outputs first).
func checkOverlap(outNames []string, outs []memRange, inNames []string, ins []memRange) error {
	for i, o := range outs {
		for j := i + 1; j < len(outs); j++ {
			if o.overlaps(outs[j]) {
				return fmt.Errorf("gdn: %s: output buffer overlaps the %s output buffer", outNames[i], outNames[j])
			}
		}
		for j, in := range ins {
			if o.overlaps(in) {
				return fmt.Errorf("gdn: %s: output buffer overlaps the elements input %s reads", outNames[i], inNames[j])
			}
		}
	}
	return nil
}

// inputRanges are the memory the inputs' views read, named.
func (in *Inputs[F]) ranges() ([]string, []memRange) {
	return []string{"q", "k", "v", "g", "beta", "state"},
		[]memRange{viewRange(in.Q), viewRange(in.K), viewRange(in.V), viewRange(in.G), viewRange(in.Beta), viewRange(in.State)}
}

// mulSizes multiplies sizes, reporting false when the product exceeds
// maxElems.
func mulSizes(n ...int) (int, bool) {
	p := 1
	for _, x := range n {
		if x < 0 || (x > 0 && p > maxElems/x) {
			return 0, false
		}
		p *= x
	}
	return p, true
}

// sizeOf is the size of an F in bytes.
func sizeOf[F Float]() int {
	var x F
	if _, ok := any(x).(float32); ok {
		return 4
	}
	return 8
}

// Convert returns a new slice of x's values converted to G: float32 to
// float64 exactly, float64 to float32 rounded to nearest.
func Convert[G, F Float](x []F) []G {
	out := make([]G, len(x))
	for i, v := range x {
		out[i] = G(v)
	}
	return out
}

// exp returns e^g in F, computed in float64 so that float32 and float64
// agree to the last bit of float32.
func exp[F Float](g F) F { return F(math.Exp(float64(g))) }
