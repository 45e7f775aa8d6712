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
// instead, held to gdn's Chunk algorithm and to the float64 reference over
// the whole case matrix, with chunks of L <= MaxChunkLen tokens (gdn's
// chunk boundaries: every snapshot token ends a chunk). The work is split
// two ways. What a chunk needs without the state runs in parallel over
// chunks, one threadgroup per (chunk, head, seq): gdn_chunk_prep gathers
// the chunk's rows, forms the decays as gdn's running products of exp(g)
// flushed below the smallest normal float, the pair matrices A and P (for
// the scalar gate as products, k k^T and q k^T scaled by the decays; for
// KDA below the diagonal 8x8 tiles as products of k and q scaled by running
// products of the decays, the diagonal tiles pair by pair, a run of columns
// at a time), R = (I + A diag(beta))^-1 by 8x8 blocks (the diagonal blocks
// by forward substitution, the blocks below as products) and the WY factors
// W' = R kd and U' = R v; gdn_chunk_dpairs, after the backward's walk,
// forms the sums over value rows (dP, dA, dq~, dk~, w as products, dlam
// from the walk's shares) and the pair terms through every decay, one
// instance per gate: for the scalar gate dk and dq as tile products of the
// chunk's rows with the pair matrices scaled by the decays (each pair's
// weight formed once), for KDA by blocks of 8 rows: the pairs across blocks
// as 8x8 tile products over channel tiles (each pair's decay factored into
// products of decays within the two blocks and the blocks' totals between
// them), those within a block by a thread a (block, key channel); the
// gate's gradient summed pair by pair (for the scalar gate from E = beta
// (dA A + dP P), for KDA from the blocks' sums, none a difference). The
// walk of the state across chunks runs one threadgroup per block of 16
// value rows (8 where 16 would give a dispatch fewer than 256
// threadgroups), because every row of M (a value index) evolves on its own:
// gdn_chunk_fwd holds its rows of M in threadgroup memory (rows padded
// against bank conflicts) and per chunk forms v - u = U' - W' M^T, y and
// the new rows; gdn_chunk_bwd holds rows of dM and forms dd and the rows of
// dM at the chunk's start, the solve's share of them through W' (du^T kd =
// -(beta ⊙ dd)^T W'), so that its serial path has two products a chunk; du
// = -R^T (beta ⊙ dd), dv, dd' = dd + A^T du and dbeta follow for every
// chunk at once, at the head of the scalar gate's gdn_chunk_dpairs and in a
// kernel of their own for KDA (gdn_chunk_dsolve). Every product of whole
// matrices is an 8x8 simdgroup_matrix product whose output tiles each
// belong to one simdgroup, in blocks of up to 2x2 tiles summed side by
// side, each tile in a fixed order; triangular operands skip their zero
// tiles. gdn_chunk_red sums dq and dk over the value heads and sequences
// sharing a q/k head. There are no atomics; the gradients are bit-identical
// from run to run. The scratch is one area per (chunk, head, seq),
// ChunkScratchBytes per (head, seq). A call whose areas would take more
// than ChunkScratchLimit (2.625 GiB) runs its value heads in groups of
// whole q/k heads, one group's dispatches after another's in one scratch of
// ChunkScratchPairs pairs; the groups give the bits of one run.
//
// Backward is ggml's op: it takes the inputs and forms again what the
// forward formed. ForwardKeep and BackwardKept are the chunk kernels' pair
// that forms A, P and X (R's negation) once, as fla's chunk_kda keeps its
// forward's matrices: the forward writes them to the scratch's first
// floats instead of its areas, the backward's prep reads them there and
// skips its pair products, their decays and the solve. The areas hold
// them no more, so the pair holds the scratch Backward alone holds (with
// one group), and the gradients are Backward's bits (the two preps form
// A, P and X by the same lines). The matrices live in the Backend's one
// scratch, so the backward needs that Backend and the forward's q, k, g,
// beta and chunking; BackwardKept checks that (the inputs by hash) and
// refuses otherwise (ErrKept). By default the scratch keeps one call's
// matrices, which any other call ends; KeepSlots makes room for several
// (a layer's each, ChunkKeptBytes), for a forward over every layer before
// the backward, as many as Backend.MaxKeepSlots says fit (the kernels'
// 32-bit indices, and on a Mac the GPU's largest buffer, which also
// bounds every call's scratch).
//
// At the 27B shape (S 128, H_k 16, H_v 48, T 8192, L 64, scalar gate,
// computed from the code, not measured):
//
//	                     chunk kernels                      recurrent kernels
//	forward dispatches   2: prep (128, 48, 1) x 256 threads  (4, 48, 1) x 256 threads
//	                     with 1,536 B of threadgroup memory
//	                     (the scalar gate's decays); fwd
//	                     (8, 48, 1) x 256 with 20,736 B
//	backward dispatches  5: one group of 48 value heads,    183 (above)
//	                     prep and fwd (the state before
//	                     each chunk, v - u); bwd (8, 48,
//	                     1) x 256 with 20,736 B (blocks
//	                     of 16 rows); dpairs (128, 48, 1)
//	                     x 256 with 18,944 B (its first
//	                     products staged); red (1024, 16,
//	                     1) x 256. KDA: 6, one group of
//	                     48 value heads, dsolve before
//	                     dpairs; KDA's prep with 29,568
//	                     B (its column factors)
//	scratch per          backward 47.16 MiB (2.210 GiB for  11.95 MiB (573.8 MiB)
//	(head, seq)          all 48; KDA 43.12 MiB, 2.021 GiB
//	                     for all 48): per chunk its rows,
//	                     A, P, R, the WY factors, dd, du,
//	                     the state before it and dL/dM
//	                     after it (c = scale dy is in the
//	                     inputs, the scalar gate's kl is
//	                     k scaled by rows, dd goes where
//	                     kd was, du where the scalar
//	                     gate's q or KDA's kl was, v
//	                     where the state goes later, and
//	                     KDA's dL/dM and state where k, q
//	                     and exp(g) were); forward 38.16 MiB
//	                     (1.789 GiB for all 48, one group)
//	flops per token      forward about 150 k (prep 39 k,    forward 115 k, backward
//	and (head, seq)      walk 108 k); backward about 395 k  ~510 k
//	                     (prep 48 k, walk 66 k, backward
//	                     walk 99 k, the solve's gradient
//	                     19 k, pair terms 165 k; KDA's
//	                     pair sums by blocks 29 k in tile
//	                     products across blocks, 8 k
//	                     within them), over four fifths
//	                     in 8x8 products
//	device bytes per     forward about 35 KB, backward      forward ~2.1 KB, backward
//	token, (head, seq)   about 100 KB: each chunk's area    ~159 KB
//	                     written once and read by the walks'
//	                     8 row blocks of a head, so that
//	                     most reads are of lines another
//	                     block has just read
//
// The upstream design has no chunked kernel. docs/h200 and README.md have
// their times on an NVIDIA H200 through metal:cuda.
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
// schedules, or (for the chunk kernels, where the executor's first-come
// hand-off can lose a race the same way under every schedule) differ from
// those of the file as it is, which gives bit-identical outputs under all
// of them. Lines ending in a "// barrier:NAME" comment are the barriers the
// tests remove.
package metal
