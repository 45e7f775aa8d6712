package verify

import "testing"

func TestCPUMatrix(t *testing.T) {
	for _, c := range Matrix() {
		ref, err := NewReference(c)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		r := Run(CPU{}, ref)
		if !r.OK() {
			t.Errorf("%s", r.Line())
		}
		t.Log(r.Line())
	}
}
