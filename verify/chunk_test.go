package verify

import (
	"fmt"
	"testing"

	"github.com/gdnback/gdnback/gdn"
)

// TestChunkMatchesRecurrence: over every case of the long matrix (which
// holds the matrix), at chunk lengths 1, 7, 16 and 64, the float64 chunked
// forward and backward give the float64 recurrence's y, states and every
// gradient to a relative RMS error of at most MaxChunkRMS.
func TestChunkMatchesRecurrence(t *testing.T) {
	worst := map[string]float64{}
	for _, L := range []int{1, 7, 16, 64} {
		for _, c := range WithAlgo(LongMatrix(), gdn.Chunk, L) {
			checks, err := ChunkAgainstRecurrent(c)
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if len(checks) != 8 {
				t.Fatalf("%s: %d checks, want 8", c, len(checks))
			}
			for _, ch := range checks {
				worst[ch.Name] = max(worst[ch.Name], ch.Value)
				if !ch.OK() {
					t.Errorf("%s: %v", c, ch)
				}
			}
		}
	}
	t.Logf("worst over the long matrix at L 1, 7, 16, 64: %v", fmt.Sprint(worst))
}
