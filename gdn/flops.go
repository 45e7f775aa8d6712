package gdn

// Flops returns the floating-point operations (each multiply and each add
// counts one; exp is not counted) that Forward and Backward perform for one
// (head, seq) of a call of shape s with options opt, counted from the code
// of the chosen algorithm. Divided by s.T they are the flops per token that
// gdn bench reports.
//
// The recurrence costs 7 S_k S_v per token forward; its backward replays
// the forward twice (checkpoints, then each segment) and runs the 18 S_k S_v
// of StepBackward: about 32 S_k S_v per token. The chunked forward costs
// about 6 S_k S_v + (5 S_k + 4 S_v) L/2 per token, its backward (one pass
// for the chunk-boundary states, then recompute and backward per chunk)
// about 18 S_k S_v + (23 S_k + 12 S_v) L/2. A shape that Shape.Check
// refuses gives 0, 0.
func Flops(s Shape, opt Options) (forward, backward float64) {
	if s.Check() != nil {
		return 0, 0
	}
	sk, sv, T := float64(s.Sk), float64(s.Sv), s.T
	if opt.Algo != Chunk {
		C := opt.SegmentLength(T)
		nck := (T + C - 1) / C
		last := T - (nck-1)*C // tokens of the last segment, not replayed in pass 1
		step := 7*sk*sv + 3*sv
		back := 18*sk*sv + 8*sv
		return float64(T) * step, float64(2*T-last)*step + float64(T)*back
	}
	starts := chunkStarts(T, min(opt.ChunkLength(), T), s.Snapshots)
	for c := 0; c+1 < len(starts); c++ {
		n := float64(starts[c+1] - starts[c])
		P := n * (n - 1) / 2 // strictly lower pairs s < r
		pairs := 4*sk*n + 5*sk*P
		solve := 2*sk*sv*n + 2*sv*P + 2*sv*n
		outputs := 2*sk*sv*n + 2*sv*(P+n) + sv*n
		advance := sk*sv + 2*sk*sv*n
		forward += pairs + solve + outputs + advance
		if c+2 < len(starts) { // pass 1 skips the last chunk
			backward += pairs + solve + advance
		}
		backState := 4*sk*sv*n + 3*sk*sv
		backY := sv*n + 4*sk*sv*n + 4*sv*(P+n)
		backSolve := 5*sv*n + 4*sv*P + 4*sk*sv*n
		backPairs := 13*sk*P + 17*sk*n
		backward += pairs + solve + backState + backY + backSolve + backPairs
	}
	return forward, backward
}
