// Package gdn is the CPU reference of the gated delta rule (Gated DeltaNet,
// and its per-channel-gate variant KDA), forward and backward, against which
// every other implementation in this project is checked.
//
// # The recurrence
//
// Per value head and sequence, with a state M of S_v rows (value index j) by
// S_k columns (key index i), for each token t:
//
//	a   = exp(g_t)                 one per head, or one per key channel (KDA)
//	Mp  = M diag(a)                the decayed state
//	u   = Mp k_t
//	d   = beta_t (v_t - u)
//	M   = Mp + d k_t^T
//	y_t = scale * M q_t
//
// StepForward is exactly this, one row j at a time. StepBackward runs it
// backwards, one small named function per term (termDM, termDq, termDd,
// termDv, termDu, termDbeta, termDk, termDMp, termDg, termDSPrev, and
// termDstate for the initial state), each
// annotated with the forward line it differentiates, in the manner of
// llm.c's train_gpt2.c. The source regions between "// gdn:term NAME" and
// "// gdn:end" are what the notebooks show.
//
// # Layouts
//
// Inputs are strided views (Tensor) in ggml's order, so q, k and v can be
// row views of one fused qkv buffer, or permuted views; see Inputs for the
// shapes. Value head h reads q/k head h mod H_k (Tile, ggml) or h / r
// (Interleave, fla and Hugging Face), with r = H_v / H_k. Outputs are
// contiguous: y is [S_v, H_v, T, n_seqs], the state slots are
// [S_k, S_v, H_v, n_seqs, snapshots] slot-major, and the backward returns the
// upstream op's packed buffer [dq|dk|dv|dg|dbeta|dstate] (Layout gives the
// offsets) with each block also as its own slice (Grads).
//
// # Checkpointed recompute
//
// The recurrence cannot be run backwards to recover old states (undoing
// M = Mp + d k^T needs (I - beta k k^T)^{-1}, singular when beta |k|^2 = 1,
// and undoing the decay divides by a, which may be e^-20). So Backward
// replays the forward: once to keep a checkpoint every C tokens, then
// segment by segment from the last, keeping the C states of the segment it
// is walking back through (checkpointPass and segmentBackward).
//
// The one convention for states: M_t is the state after token t (M_{-1}
// the initial state), and every buffer of states the backward keeps holds,
// in each slot, the state before a token. Checkpoint c is M_{cC-1}, the
// state before token cC. In the segment that starts at token t0, slot i
// holds M_{t0+i-1}, the state before token t0+i, slot 0 being a copy of
// the checkpoint: segmentBackward's buffer and the Metal kernels' st alike.
// segmentBackward replays in the checkpoint's own slot, which it leaves
// holding the state after the segment's last token (the kernels recompute
// each M_t from the state before it instead). The chunkwise backward keeps
// the state before every chunk.
//
// C defaults to ceil(sqrt(T)), which minimizes the ceil(T/C) + C states
// kept; ScratchStates gives the count. KeepAll (C = T)
// keeps every state instead; both replay the same arithmetic, so their
// results are bit-identical.
//
// # Determinism, precision, errors
//
// Each (value head, sequence) pair runs on its own goroutine (Options.Threads
// bounds them) and writes its own outputs; the dq and dk of a q/k head shared
// by several value heads are summed afterwards in increasing (seq, value head)
// order. The same inputs therefore give bit-identical gradients whatever the
// thread count. The code is generic over float32 and float64: float64 is the
// truth for finite-difference checks, float32 what kernels are compared with.
// Every dot product keeps four partial sums in a fixed order.
//
// Every malformed input (shapes that disagree, H_v not a multiple of H_k, a
// gate width other than 1 or S_k, T = 0, strides or offsets that read outside
// the data, C < 0, output buffers of the wrong length) is an error naming the
// tensor and the dimension; nothing panics and no input is written. NaN and
// Inf in the inputs are not errors: they propagate as IEEE 754 arithmetic
// says, into the outputs of their own (head, seq) and, through dq and dk,
// into the q/k head it shares. Note that the loss is affine in v, q and the
// initial state, so a NaN in v reaches y, dq, dk and dbeta but never a state
// gradient.
//
// On x86 a state entry that only ever decays (a zero column of k, repeated
// strong gates) reaches float32 subnormals, and subnormal arithmetic is tens
// of times slower; Go has no flush-to-zero mode. Results are still right.
//
// # The chunkwise algorithm
//
// Options.Algo = Chunk computes the same outputs and gradients with the
// chunkwise (WY) form that training code runs: per chunk of
// Options.ChunkLength() tokens, pair matrices, one lower-triangular solve
// (by substitution, never an inverse) and products against the state at
// the chunk's start, so that T/L state updates are sequential instead of T
// (chunk.go, chunk_backward.go; derivation/05-chunkwise.md). The backward
// keeps the state before every chunk (ChunkScratchBytes). Decays between
// tokens are running products of exp(g) <= 1, so no gate overflows them. In
// float64 it agrees with the recurrence to rounding; L = 1 is the
// recurrence, token by token.
package gdn
