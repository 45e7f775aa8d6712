package verify

import (
	"github.com/gdnback/gdnback/gdn"
)

// MaxChunkRMS bounds the float64 Chunk algorithm against the float64
// recurrence: the relative RMS error (RMSRatio) of every output. The two
// compute the same function in different orders, so they differ by
// rounding only.
const MaxChunkRMS = 1e-12

// ChunkAgainstRecurrent runs case c in float64 with both algorithms (the
// case's own chunk length for Chunk) and returns the relative RMS error
// (RMSRatio) of the chunked y, states and each gradient against the
// recurrence's, named y, states, dq, dk, dv, dg, dbeta and dstate.
func ChunkAgainstRecurrent(c Case) ([]Check, error) {
	p := Build[float64](c)
	rec := p.Opt
	rec.Algo = gdn.Recurrent
	chk := p.Opt
	chk.Algo = gdn.Chunk
	var out [2]struct {
		f *gdn.ForwardResult[float64]
		g *gdn.Grads[float64]
	}
	for i, opt := range []gdn.Options{rec, chk} {
		f, err := gdn.Forward(&p.In, opt)
		if err != nil {
			return nil, err
		}
		g, err := gdn.Backward(&p.In, p.DY, p.DStates, opt)
		if err != nil {
			return nil, err
		}
		out[i].f, out[i].g = f, g
	}
	r, k := out[0], out[1]
	checks := []Check{
		{Name: "chunk64(y)", Value: RMSRatio(r.f.Y, k.f.Y), Limit: MaxChunkRMS},
		{Name: "chunk64(states)", Value: RMSRatio(r.f.States, k.f.States), Limit: MaxChunkRMS},
	}
	want, got := r.g.Blocks(), k.g.Blocks()
	for i, name := range gdn.BlockNames {
		checks = append(checks, Check{Name: "chunk64(" + name + ")", Value: RMSRatio(want[i], got[i]), Limit: MaxChunkRMS})
	}
	return checks, nil
}

// chunkChecks adds ChunkAgainstRecurrent's checks of the case to res.
func (res *Result) chunkChecks(c Case) {
	checks, err := ChunkAgainstRecurrent(c)
	if err != nil {
		res.Err = err
		return
	}
	for _, ch := range checks {
		res.add(ch.Name, ch.Value, ch.Limit)
	}
}
