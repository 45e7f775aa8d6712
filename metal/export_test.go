package metal

import (
	"fmt"
	"strings"
)

// WithoutBarrier returns kernel source src with its threadgroup_barrier
// marked "// barrier:NAME" replaced by a comment, for the tests that plant
// a missing barrier; it is an error unless exactly one line is so marked.
func WithoutBarrier(src []byte, name string) ([]byte, error) {
	marker := "// barrier:" + name
	lines := strings.Split(string(src), "\n")
	planted := 0
	for i, l := range lines {
		if strings.Contains(l, "threadgroup_barrier(") && strings.HasSuffix(strings.TrimSpace(l), marker) {
			lines[i] = "    // planted bug: the barrier is missing"
			planted++
		}
	}
	if planted != 1 {
		return nil, fmt.Errorf("found %d barriers marked %q in the source, want 1", planted, marker)
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// SetChunkWalkRows makes b's chunk calls walk the state in blocks of vb
// value rows (8 or 16) whatever chunkSplitFor would choose; 0 restores its
// choice.
func SetChunkWalkRows(b *Backend, vb int) { b.split.vb = vb }
