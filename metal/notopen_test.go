package metal

import (
	"errors"
	"math"
	"testing"

	"github.com/gdnback/gdnback/gdn"
	"github.com/gdnback/gdnback/metal/exec"
)

// TestNotOpen: a Backend that Open did not make (the zero value, or nil)
// returns ErrNotOpen from every method that would run something, instead
// of panicking.
func TestNotOpen(t *testing.T) {
	var in gdn.Inputs[float32]
	for _, b := range []*Backend{{}, nil} {
		if name := b.Name(); name != "Metal(not open)" {
			t.Errorf("Name() = %q", name)
		}
		if k := b.Kind(); k != "" {
			t.Errorf("Kind() = %q", k)
		}
		if n := b.ScratchLen(); n != 0 {
			t.Errorf("ScratchLen() = %d", n)
		}
		if _, _, err := b.Forward(&in, gdn.Options{}); !errors.Is(err, ErrNotOpen) {
			t.Errorf("Forward: %v", err)
		}
		if _, err := b.Backward(&in, gdn.Tensor[float32]{}, nil, gdn.Options{}); !errors.Is(err, ErrNotOpen) {
			t.Errorf("Backward: %v", err)
		}
		if err := b.Supports(gdn.Shape{Sk: 128, Sv: 128}, gdn.Options{}); !errors.Is(err, ErrNotOpen) {
			t.Errorf("Supports: %v", err)
		}
		if err := b.SetSchedule(exec.Schedule{}); !errors.Is(err, ErrNotOpen) {
			t.Errorf("SetSchedule: %v", err)
		}
	}
	if n := ScratchBytes(128, 128, 1<<41, 0); n != math.MaxInt {
		t.Errorf("ScratchBytes at T 2^41 = %d, want math.MaxInt", n)
	}
}
