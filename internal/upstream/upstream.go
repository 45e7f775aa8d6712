// Package upstream holds the figures of the upstream design, the ggml
// fork's GATED_DELTA_NET_BACK Metal kernel as its code review describes it,
// that this project's plans and figures set beside their own.
package upstream

import "github.com/gdnback/gdnback/gdn"

// ScratchStates is the number of S_k x S_v states the upstream Metal
// kernel keeps per (head, seq) inside its op's output, for T tokens and
// segment length C (at least 1): n_ck + C + 3, with n_ck = ceil(T/C)
// checkpoints.
func ScratchStates(T, C int) int { return gdn.Segments(T, C) + C + 3 }
