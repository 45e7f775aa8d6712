package cells

import "testing"

// TestPrograms runs every notebook program (nb:main region) of the
// package: each panics when its check fails.
func TestPrograms(t *testing.T) {
	for _, p := range programs {
		t.Run(p.name, func(t *testing.T) {
			if p.long && testing.Short() {
				t.Skip("long; -short")
			}
			p.fn()
		})
	}
}
