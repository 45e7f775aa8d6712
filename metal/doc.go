// Package metal runs the gated delta rule's forward and backward as Metal
// compute kernels: on Apple GPUs through darwinkit, and on any OS through
// the CPU executor of package metal/exec, which compiles the very same bytes
// of gdn.metal as C++20. Both have the reference's semantics and layouts
// (package gdn): scalar and KDA gates, head sizes 16, 32, 64, 128 and 256
// (others are refused before anything is dispatched), value heads broadcast
// over q/k heads under both mappings, q, k and v as strided views (the fused
// qkv buffer of Qwen3-Next and Qwen3.5 stays one buffer), several sequences,
// an initial state, state snapshots and their gradients, and the
// checkpointed backward with segment length C (ceil(sqrt(T)) by default,
// the last segment partial) writing the packed [dq|dk|dv|dg|dbeta|dstate].
//
// Open returns a Backend: the GPU where there is one, the executor
// elsewhere, or either by name. Backend implements gdn.Backend, and
// `go test ./metal` runs it on the whole case matrix of package verify.
//
// # Design
//
// Row j of the state M (a value index) evolves on its own: u_j, the delta
// d_j, y_j, and the backward's dd_j need only row j and the token's k, q
// and gate; the sums over rows (dq, dk, dg, dbeta) never feed back into the
// recurrence. So each simdgroup holds 4 rows of M in registers, lane l
// holding columns l, l+32, ... (S_k/32 per row, 16 floats at S 128), and the
// only cross-lane operation of a forward step is one simd_sum of a float4
// (u) and one more for y. The state never leaves registers in the forward.
// A threadgroup is up to 8 simdgroups (32 rows); S_v/32 threadgroups cover
// one (head, seq) at S_v 128, so the grid is (S_v/(4*nsg), H_v, n_seqs).
//
// The backward is one command buffer of 1 + 2*n_ck dispatches: gdn_scan
// replays the forward and stores a checkpoint every C tokens; then, segment
// by segment from the last, gdn_bwd_seg replays the segment from its
// checkpoint (storing the state before each token, and v - u; gdn's doc
// states the convention) and runs the backward through it with dM in
// registers, writing dv and, per token, each threadgroup's
// partial column sums of dq, dk, dg and dbeta (summed across its
// simdgroups through threadgroup memory, behind one barrier per token,
// alternating two staging buffers); gdn_bwd_red sums the partials over row
// blocks, and dq and dk over the value heads and sequences that share a q/k
// head, in a fixed order. There are no float atomics anywhere: the
// gradients are bit-identical from run to run and under any thread order
// (the executor checks this under several schedules). dM carries from one
// segment to the one before through that segment's checkpoint slot, dead
// once replayed.
//
// The scratch is one buffer that the Backend owns, grows to the largest
// call and reuses for every later call; layers run one after another, so a
// model needs one. ScratchBytes gives its size per (head, seq) for the
// memory planner:
//
//	4 * ((ceil(T/C) + C) * S_k*S_v  +  C * S_v  +  C * nrb * (3*S_k + 1))
//
// # The 27B shape
//
// Qwen3.5-27B: S 128, 16 q/k heads, 48 value heads, T 8192, n_seqs 1,
// C 91, n_ck 91. Figures for the upstream design (the ggml fork's
// GATED_DELTA_NET_BACK Metal kernel) are from its code review; its byte
// counts are estimates from that description, not measurements.
//
//	                     this package                       upstream
//	forward dispatch     (4, 48, 1) x 256 threads           -
//	backward dispatches  183 in one command buffer:         48 x 128 threads
//	                     scan (4, 48, 1) x 256; per
//	                     segment bwd_seg (4, 48, 1) x 256
//	                     (24,640 B threadgroup memory) and
//	                     bwd_red (<=91, 48, 1) x 128
//	scratch              11.95 MiB per (head, seq),         11.56 MiB per head inside
//	                     573.8 MiB for all 48, one          each op's output: 555 MiB
//	                     buffer for every layer             per op, 1.08 GiB when two
//	                                                        layers' outputs overlap
//	device bytes per     forward ~2.1 KB (inputs and y;     state rows in device scratch:
//	token, (head, seq)   the state stays in registers);     about 14 S_v^2-float passes
//	                     backward ~159 KB: the replayed     per token (replay store; load;
//	                     state stored once and loaded once  Mp and dM stores; column
//	                     (2 x 64 KiB), inputs read three    passes C, D, dg, E), ~0.9 MB;
//	                     times, per-token partial sums      dq/dk by device atomics
//	                     (6.2 KB out, 12.3 KB back in)      after a zeroing pass
//
// # The chunk kernels
//
// With Options.Algo = gdn.Chunk the Backend runs gdn's chunkwise (WY) form
// instead (gdn_chunk_fwd, gdn_chunk_bwd, gdn_chunk_red in gdn.metal), held
// to gdn's Chunk algorithm line by line and to the float64 reference over
// the whole case matrix. One threadgroup runs one (head, seq) pair over all
// its chunks of L tokens (gdn's chunk boundaries: every snapshot token ends
// a chunk). A chunk's rows live in the pair's part of the scratch, every
// matrix padded to Lp = L rounded up to 8 rows of zeros: the products with
// the state (u0 = kd M0^T, y0 = qd M0^T, M += D^T kl, and in the backward
// dd, w, dqd, dP, dA, dkd and dM0) are 8x8 simdgroup_matrix products, each
// output tile summed by one simdgroup in a fixed order; the solve and the
// back substitution run one value column per thread, the pair terms A and
// P one (r, s) pair per thread, the decays as gdn's running products of
// exp(g) flushed below the smallest normal float, and the backward's pair
// terms one key channel per thread. There is no threadgroup memory and no
// atomic; the gradients are bit-identical from run to run. The backward
// keeps the state before every chunk (pass 1), runs the chunks from the
// last (pass 2), and writes dq and dk per pair for gdn_chunk_red to sum
// over the value heads and sequences sharing a q/k head. Its scratch is
// ChunkScratchBytes per (head, seq).
//
// At the 27B shape (S 128, H_k 16, H_v 48, T 8192, L 64, computed from the
// code, not measured):
//
//	                     chunk kernels                      recurrent kernels
//	forward dispatch     (1, 48, 1) x 128 threads, no       (4, 48, 1) x 256 threads
//	                     threadgroup memory, 128 chunks
//	backward dispatches  2: bwd (1, 48, 1) x 128 threads,   183 (above)
//	                     red (8192, 16, 1) x 128
//	scratch per          16.75 MiB (804 MiB for all 48):    11.95 MiB (573.8 MiB)
//	(head, seq)          769.5 KiB of chunk rows (801 KiB
//	                     with KDA; the forward's only
//	                     scratch), 8 MiB of chunk-start
//	                     states, 8 MiB of dq/dk per pair
//	flops per token      forward ~144 k (scalar gate),      forward 115 k, backward
//	and (head, seq)      ~230 k (KDA: the pair decays are   ~510 k
//	                     recomputed per channel, L^3 S_k/6
//	                     per chunk); backward ~580 k
//	                     (~670 k KDA); about 60% of it in
//	                     8x8 matrix products
//	device bytes per     forward ~14 KB of chunk rows       forward ~2.1 KB, backward
//	token, (head, seq)   written and read back (q, k, v,    ~159 KB
//	                     kd, qd, kl, u, y, d, A, P, the
//	                     state twice per chunk) and ~48 KB
//	                     of 8x8 tile loads, which caches
//	                     serve; backward about 4x that
//
// The chunk kernels trade the recurrent kernels' T sequential steps per
// pair for T/L, with 48 threadgroups at the 27B shape (one per value head),
// so their speed on a GPU rests on the 8x8 products; it has not been
// measured on one yet. The upstream design has no chunked kernel.
//
// Speed cannot be measured off a Mac; BenchmarkForward and BenchmarkBackward
// (go test -bench . ./metal) measure the kernels on one, and `gdn bench
// -backend metal` prints the same figures.
//
// # The CPU executor
//
// The executor (package metal/exec) compiles gdn.metal behind a prelude
// that defines MSL's qualifiers, vector types, simd_* collectives, 8x8
// simdgroup matrices (loads and products in each lane, the store a
// collective that checks every lane holds the same tile) and barriers,
// and runs each threadgroup with one OS thread per GPU thread,
// one at a time between synchronisation points, in an order a Schedule
// fixes. A missing barrier makes the results depend on that order, so the
// tests plant one in a copy of gdn.metal and see the outputs differ between
// schedules, while the file as it is gives bit-identical outputs under all
// of them. Lines ending in a "// barrier:NAME" comment are the barriers the
// tests remove.
package metal
