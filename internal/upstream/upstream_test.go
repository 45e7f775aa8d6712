package upstream

import "testing"

// The review's figure at the 27B shape: T 8192, C 91 gives 91 checkpoints,
// so 91 + 91 + 3 = 185 states; T 100, C 7 gives ceil(100/7) = 15.
func TestScratchStates(t *testing.T) {
	for _, c := range []struct{ T, C, want int }{{8192, 91, 185}, {100, 7, 25}, {1, 1, 5}} {
		if got := ScratchStates(c.T, c.C); got != c.want {
			t.Errorf("ScratchStates(%d, %d) = %d, want %d", c.T, c.C, got, c.want)
		}
	}
}
