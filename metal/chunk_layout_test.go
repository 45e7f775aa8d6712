package metal

import (
	"fmt"
	"testing"
)

// TestChunkAreaLayout checks the host's layout of a chunk area, which the
// kernels take as it is: every part the pass uses lies inside the area,
// parts overlap only where the layout says they share a place, the
// forward walk's and the look-ahead lines' adjacencies hold, and every
// part starts at an even element (the CUDA prelude's 8-byte tile loads).
func TestChunkAreaLayout(t *testing.T) {
	type part struct {
		name string
		off  int32
		n    int
	}
	for _, sk := range []int{16, 32, 64, 128, 256} {
		for _, sv := range []int{16, 64, 256} {
			for _, kda := range []bool{false, true} {
				for _, Lp := range []int{8, 24, 64} {
					for _, bwd := range []bool{false, true} {
						gw := 1
						if kda {
							gw = sk
						}
						name := fmt.Sprintf("sk%d_sv%d_gw%d_Lp%d_bwd%v", sk, sv, gw, Lp, bwd)
						o, n := chunkAreaLayout(sk, sv, gw, Lp, bwd)
						lk, lv, ll, ss := Lp*sk, Lp*sv, Lp*Lp, sk*sv
						parts := []part{
							{"k", o.K, lk}, {"q", o.Q, lk}, {"kd", o.Kd, lk}, {"kl", o.Kl, lk},
							{"wn", o.Wn, lk}, {"qd", o.Qd, lk}, {"v", o.V, lv}, {"un", o.Un, lv},
							{"A", o.A, ll}, {"P", o.P, ll}, {"X", o.X, ll},
							{"beta", o.Beta, Lp}, {"ell", o.Ell, Lp}, {"lam", o.Lam, sk}, {"dec", o.Dec, Lp * gw},
						}
						if bwd {
							parts = append(parts, part{"dd", o.Dd, lv}, part{"M0", o.M0, ss}, part{"dM", o.DM, ss},
								part{"part", o.Part, (sv / chunkRowsMin) * sk})
							if kda { // the pair terms' block sums after the decays, in M0's place
								parts = append(parts, part{"blocks", o.Dec + int32(Lp*gw), 3 * (Lp / 8) * sk})
							}
						}
						// The places the layout shares: the scalar gate's
						// backward has kl = k; KDA's backward puts dM over
						// k and q, M0 (and the block sums) over dec.
						shared := func(a, b string) bool {
							in := func(x string, s ...string) bool {
								for _, y := range s {
									if x == y {
										return true
									}
								}
								return false
							}
							pair := func(s1, s2 []string) bool { return in(a, s1...) && in(b, s2...) || in(a, s2...) && in(b, s1...) }
							switch {
							case bwd && !kda:
								return pair([]string{"k"}, []string{"kl"})
							case bwd && kda:
								return pair([]string{"dM"}, []string{"k", "q"}) || pair([]string{"M0"}, []string{"dec", "blocks"})
							}
							return false
						}
						if n != chunkAreaElems(sk, sv, gw, Lp, bwd) {
							t.Errorf("%s: layout's length %d, chunkAreaElems %d", name, n, chunkAreaElems(sk, sv, gw, Lp, bwd))
						}
						for i, p := range parts {
							if p.off < 0 || int(p.off)+p.n > n {
								t.Errorf("%s: %s [%d, %d) outside the area's %d elements", name, p.name, p.off, int(p.off)+p.n, n)
							}
							if p.off%2 != 0 {
								t.Errorf("%s: %s at odd element %d", name, p.name, p.off)
							}
							for _, r := range parts[i+1:] {
								if p.off < r.off+int32(r.n) && r.off < p.off+int32(p.n) && !shared(p.name, r.name) {
									t.Errorf("%s: %s [%d, %d) overlaps %s [%d, %d)", name, p.name, p.off, int(p.off)+p.n, r.name, r.off, int(r.off)+r.n)
								}
							}
						}
						if o.Qd != o.Wn+int32(lk) {
							t.Errorf("%s: qd at %d does not follow wn at %d", name, o.Qd, o.Wn)
						}
						if o.Kl+int32(lk) != o.Wn {
							t.Errorf("%s: kl at %d is not right before wn at %d", name, o.Kl, o.Wn)
						}
					}
				}
			}
		}
	}
}
