// gdn.metal: the gated delta rule (Gated DeltaNet, KDA) on Apple GPUs, f32.
//
// Forward (gdn_scan, mode 0): y and the state snapshots. Backward, the host
// encodes 1 + 2*n_ck dispatches into one command buffer:
//
//   gdn_scan     mode 1: replay the forward, store the state at the start
//                of every segment of C tokens (the checkpoints);
//   for each segment c, last first:
//     gdn_bwd_seg  replay segment c from its checkpoint, storing each state,
//                  then run the backward through it: dv directly, and each
//                  threadgroup's partial column sums of dq, dk, dg and dbeta
//                  per token;
//     gdn_bwd_red  sum the partials in a fixed order into dq, dk (over the
//                  value heads and sequences that share a q/k head), dg and
//                  dbeta.
//
// Every row j of the state M (a value index) evolves on its own: u_j, d_j,
// y_j and the backward's dd_j only need row j, and the sums over rows (dq,
// dk, dg, dbeta) do not feed back into the recurrence. So each simdgroup
// holds GDN_R rows of M in registers, each lane GDN_R x NC of their columns
// (column i = lane + 32*c), and the only cross-lane operation per token is a
// simd_sum. Threadgroups never communicate inside a dispatch; there are no
// atomics, and every sum runs in a fixed order, so results are bit-identical
// from run to run.
//
// Buffers: 0 the args, 1 src (every input, as strided views), 2 dst (the
// outputs), 3 scr (the host-owned scratch), threadgroup memory 0 (the
// backward's staging of partial sums). The CPU executor compiles this very
// file as C++20 behind its own <metal_stdlib>. A barrier whose line ends in
// "// barrier:NAME" is one the tests remove from a copy, to check that the
// executor notices.

#include <metal_stdlib>
using namespace metal;

#define GDN_R 4  // rows of M per simdgroup: one float4 per lane in every simd_sum
#define GDN_NW 32 // SIMD width

// A strided view into src: element (i0, i1, i2, i3) is at
// off + i0*nb[0] + i1*nb[1] + i2*nb[2] + i3*nb[3] (ggml order, in elements).
struct gdn_view {
    int off;
    int nb[4];
};

struct gdn_args {
    // shape
    int sk, sv, hk, hv, T, seqs, seqs_qk, gw;
    int rep;        // hv / hk
    int seq_rep;    // seqs / seqs_qk
    int interleave; // q/k head of value head h: h / rep (1) or h % hk (0)
    int snapshots;  // state slots the forward returns
    float scale;
    // threadgroup layout: sv = nrb * nsg * GDN_R
    int nsg;        // simdgroups per threadgroup
    int nrb;        // row blocks (threadgroups) per (head, seq)
    // inputs in src
    gdn_view q, k, v, g, beta, state, dy;
    int has_state;
    int dstates_off; // dense [sk, sv, hv, seqs, snapshots], or -1 for none
    // forward outputs in dst
    int y_off, snap_off;
    // backward outputs in dst: the packed [dq|dk|dv|dg|dbeta|dstate]
    int dq_off, dk_off, dv_off, dg_off, dbeta_off, dstate_off;
    // checkpointing
    int C, nck;      // segment length and number of segments
    int seg, t0, t1; // the segment of this dispatch and its tokens [t0, t1)
    int mode;        // gdn_scan: 0 forward (y, snapshots), 1 checkpoints
    // scratch offsets in scr (elements)
    int ck_off;   // [nck][pairs][sv][sk] checkpoints; slot c+1 carries dM into segment c
    int st_off;   // [C][pairs][sv][sk] the replayed segment's states
    int w_off;    // [C][pairs][sv] v - u of the replayed segment
    int part_off; // [C][pairs][nrb][pw] partial sums per token
    int pw;       // 3*sk + 1: dq, dk, dg columns and dbeta
};

static inline float gdn_at(device const float * src, constant gdn_view & w, int i0, int i1, int i2, int i3) {
    return src[w.off + i0*w.nb[0] + i1*w.nb[1] + i2*w.nb[2] + i3*w.nb[3]];
}

static inline int gdn_qk_head(constant gdn_args & args, int h) {
    return args.interleave ? h / args.rep : h % args.hk;
}

// One token's inputs for this lane's columns.
template <short NC>
struct gdn_tok {
    float q[NC], k[NC], a[NC];
    float beta;
};

template <short NC>
static inline void gdn_load_tok(thread gdn_tok<NC> & x, constant gdn_args & args, device const float * src,
                                int hq, int sq, int h, int s, int t, int lane) {
    const float ga = args.gw == 1 ? exp(gdn_at(src, args.g, 0, h, t, s)) : 0.0f;
    for (short c = 0; c < NC; ++c) {
        const int i = lane + GDN_NW*c;
        const bool ok = i < args.sk;
        x.q[c] = ok ? gdn_at(src, args.q, i, hq, t, sq) : 0.0f;
        x.k[c] = ok ? gdn_at(src, args.k, i, hq, t, sq) : 0.0f;
        x.a[c] = args.gw == 1 ? ga : (ok ? exp(gdn_at(src, args.g, i, h, t, s)) : 0.0f);
    }
    x.beta = gdn_at(src, args.beta, 0, h, t, s);
}

// Every kernel takes the same ten parameters in the same order: the args,
// the three buffers, the threadgroup memory and the five builtins. The CPU
// executor calls a kernel through that one signature (see gdnrt.h), so a
// kernel declares builtins it does not read: gdn_scan leaves shmem, tpitg
// and ntg unused, gdn_bwd_red shmem, ntg, tiisg and sgitg.

// gdn_scan runs the forward over every token of one (head, seq) for the
// rows of one threadgroup. Grid (nrb, hv, seqs), nsg simdgroups.
template <short NC>
kernel void gdn_scan(
        constant gdn_args & args  [[buffer(0)]],
        device const float * src  [[buffer(1)]],
        device       float * dst  [[buffer(2)]],
        device       float * scr  [[buffer(3)]],
        threadgroup  float * shmem [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const int sk = args.sk, sv = args.sv, T = args.T;
    const int rb = tgpig.x, h = tgpig.y, s = tgpig.z;
    const int hq = gdn_qk_head(args, h), sq = s / args.seq_rep;
    const int pairs = args.hv*args.seqs, pair = s*args.hv + h;
    const int ss = sk*sv;
    const int j0 = (rb*args.nsg + sgitg)*GDN_R; // this simdgroup's first row
    const int lane = tiisg;

    float M[GDN_R][NC];
    for (short r = 0; r < GDN_R; ++r) {
        for (short c = 0; c < NC; ++c) {
            const int i = lane + GDN_NW*c;
            M[r][c] = (args.has_state && i < sk) ? gdn_at(src, args.state, i, j0 + r, h, s) : 0.0f;
        }
    }

    // The token's inputs do not depend on the state, so the loads of token
    // t+1 are issued before token t's arithmetic (x, v: this token; xn, vn:
    // the next), and their latency hides behind it. The arithmetic is the
    // same, in the same order.
    gdn_tok<NC> x, xn;
    float v[GDN_R], vn[GDN_R];
    if (T > 0) {
        gdn_load_tok<NC>(xn, args, src, hq, sq, h, s, 0, lane);
        for (short r = 0; r < GDN_R; ++r) vn[r] = gdn_at(src, args.v, j0 + r, h, 0, s);
    }
    for (int t = 0; ; ++t) {
        if (args.mode == 1) {
            // Checkpoint c is the state before token c*C.
            if (t % args.C == 0) {
                device float * ck = scr + args.ck_off + ((t/args.C)*pairs + pair)*ss;
                for (short r = 0; r < GDN_R; ++r) {
                    for (short c = 0; c < NC; ++c) {
                        const int i = lane + GDN_NW*c;
                        if (i < sk) ck[(j0 + r)*sk + i] = M[r][c];
                    }
                }
                if (t/args.C == args.nck - 1) break;
            }
        } else if (t == T) {
            break;
        }
        x = xn;
        for (short r = 0; r < GDN_R; ++r) v[r] = vn[r];
        if (t + 1 < T) {
            gdn_load_tok<NC>(xn, args, src, hq, sq, h, s, t + 1, lane);
            for (short r = 0; r < GDN_R; ++r) vn[r] = gdn_at(src, args.v, j0 + r, h, t + 1, s);
        }

        // Mp = M diag(a), u_j = Mp[j] . k
        float4 up = float4(0.0f);
        for (short r = 0; r < GDN_R; ++r) {
            for (short c = 0; c < NC; ++c) {
                M[r][c] = M[r][c]*x.a[c];
                up[r] = fma(M[r][c], x.k[c], up[r]);
            }
        }
        const float4 u = simd_sum(up);

        // d = beta (v - u), M = Mp + d k^T, y_j = scale M[j] . q
        float4 yp = float4(0.0f);
        for (short r = 0; r < GDN_R; ++r) {
            const float d = x.beta*(v[r] - u[r]);
            for (short c = 0; c < NC; ++c) {
                M[r][c] = fma(d, x.k[c], M[r][c]);
                yp[r] = fma(M[r][c], x.q[c], yp[r]);
            }
        }
        if (args.mode == 0) {
            const float4 y = simd_sum(yp);
            if (lane < GDN_R) {
                dst[args.y_off + ((s*T + t)*args.hv + h)*sv + j0 + lane] = args.scale*y[lane];
            }
            const int slot = T - 1 - t;
            if (slot < args.snapshots) {
                device float * sn = dst + args.snap_off + (slot*pairs + pair)*ss;
                for (short r = 0; r < GDN_R; ++r) {
                    for (short c = 0; c < NC; ++c) {
                        const int i = lane + GDN_NW*c;
                        if (i < sk) sn[(j0 + r)*sk + i] = M[r][c];
                    }
                }
            }
        }
    }
}

// gdn_bwd_seg runs the backward through segment args.seg = [t0, t1) of one
// (head, seq) for the rows of one threadgroup. Grid (nrb, hv, seqs), nsg
// simdgroups, threadgroup memory 2*nsg*pw floats.
template <short NC>
kernel void gdn_bwd_seg(
        constant gdn_args & args  [[buffer(0)]],
        device const float * src  [[buffer(1)]],
        device       float * dst  [[buffer(2)]],
        device       float * scr  [[buffer(3)]],
        threadgroup  float * shmem [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const int sk = args.sk, sv = args.sv, T = args.T;
    const int rb = tgpig.x, h = tgpig.y, s = tgpig.z;
    const int hq = gdn_qk_head(args, h), sq = s / args.seq_rep;
    const int pairs = args.hv*args.seqs, pair = s*args.hv + h;
    const int ss = sk*sv;
    const int j0 = (rb*args.nsg + sgitg)*GDN_R;
    const int lane = tiisg;
    const int t0 = args.t0, n = args.t1 - args.t0;
    const int pw = args.pw;

    device float * ck = scr + args.ck_off + (args.seg*pairs + pair)*ss;
    device float * st = scr + args.st_off;
    device float * wv = scr + args.w_off;

    // 1. The segment's checkpoint, the state before token t0.
    float M[GDN_R][NC];
    for (short r = 0; r < GDN_R; ++r) {
        for (short c = 0; c < NC; ++c) {
            const int i = lane + GDN_NW*c;
            M[r][c] = i < sk ? ck[(j0 + r)*sk + i] : 0.0f;
        }
    }

    // 2. Replay: st[tl] = the state before token t0+tl, w[tl] = v - u.
    // Each lane stores and later reloads only its own elements of st.
    gdn_tok<NC> x;
    for (int tl = 0; tl < n; ++tl) {
        const int t = t0 + tl;
        device float * m = st + (tl*pairs + pair)*ss;
        for (short r = 0; r < GDN_R; ++r) {
            for (short c = 0; c < NC; ++c) {
                const int i = lane + GDN_NW*c;
                if (i < sk) m[(j0 + r)*sk + i] = M[r][c];
            }
        }
        gdn_load_tok<NC>(x, args, src, hq, sq, h, s, t, lane);
        float4 up = float4(0.0f);
        for (short r = 0; r < GDN_R; ++r) {
            for (short c = 0; c < NC; ++c) {
                M[r][c] = M[r][c]*x.a[c];
                up[r] = fma(M[r][c], x.k[c], up[r]);
            }
        }
        const float4 u = simd_sum(up);
        float4 w;
        for (short r = 0; r < GDN_R; ++r) {
            w[r] = gdn_at(src, args.v, j0 + r, h, t, s) - u[r];
            const float d = x.beta*w[r];
            for (short c = 0; c < NC; ++c) {
                M[r][c] = fma(d, x.k[c], M[r][c]);
            }
        }
        if (lane < GDN_R) {
            wv[(tl*pairs + pair)*sv + j0 + lane] = w[lane];
        }
    }
    // Orders: the w values stored above by lanes 0..GDN_R-1 before every lane
    // of the simdgroup reads them in the backward below.
    threadgroup_barrier(mem_flags::mem_device); // barrier:replay

    // 3. dM = dL/dM_{t1-1}: zero after the last token, else what segment
    // seg+1 left in its checkpoint slot.
    float dM[GDN_R][NC];
    {
        device const float * carry = scr + args.ck_off + ((args.seg + 1)*pairs + pair)*ss;
        const bool last = args.seg == args.nck - 1;
        for (short r = 0; r < GDN_R; ++r) {
            for (short c = 0; c < NC; ++c) {
                const int i = lane + GDN_NW*c;
                dM[r][c] = (!last && i < sk) ? carry[(j0 + r)*sk + i] : 0.0f;
            }
        }
    }

    // 4. Backward, token by token from the last.
    device float * part = scr + args.part_off;
    const int tid = tpitg.x, nthr = ntg.x;
    for (int tl = n - 1; tl >= 0; --tl) {
        const int t = t0 + tl;
        // term dM, snapshot part: slot T-1-t is M_t.
        const int slot = T - 1 - t;
        if (args.dstates_off >= 0 && slot < args.snapshots) {
            device const float * ds = src + args.dstates_off + (slot*pairs + pair)*ss;
            for (short r = 0; r < GDN_R; ++r) {
                for (short c = 0; c < NC; ++c) {
                    const int i = lane + GDN_NW*c;
                    if (i < sk) dM[r][c] += ds[(j0 + r)*sk + i];
                }
            }
        }
        gdn_load_tok<NC>(x, args, src, hq, sq, h, s, t, lane);
        float gy[GDN_R], w[GDN_R];
        for (short r = 0; r < GDN_R; ++r) {
            gy[r] = args.scale*gdn_at(src, args.dy, j0 + r, h, t, s);
            w[r] = wv[(tl*pairs + pair)*sv + j0 + r];
        }

        // term dM: dM[j] += scale gy_j q; term dd: dd_j = dM[j] . k
        float4 ddp = float4(0.0f);
        for (short r = 0; r < GDN_R; ++r) {
            for (short c = 0; c < NC; ++c) {
                dM[r][c] = fma(gy[r], x.q[c], dM[r][c]);
                ddp[r] = fma(dM[r][c], x.k[c], ddp[r]);
            }
        }
        const float4 dd = simd_sum(ddp);

        float pq[NC], pk[NC], pg[NC];
        for (short c = 0; c < NC; ++c) {
            pq[c] = 0.0f;
            pk[c] = 0.0f;
            pg[c] = 0.0f;
        }
        float pb = 0.0f;
        device const float * mprev = st + (tl*pairs + pair)*ss;
        for (short r = 0; r < GDN_R; ++r) {
            const float d = x.beta*w[r];
            const float du = -x.beta*dd[r];         // term du
            pb = fma(dd[r], w[r], pb);              // term dbeta
            for (short c = 0; c < NC; ++c) {
                const int i = lane + GDN_NW*c;
                const float mp = (i < sk ? mprev[(j0 + r)*sk + i] : 0.0f)*x.a[c];
                const float mt = fma(d, x.k[c], mp);
                pq[c] = fma(gy[r], mt, pq[c]);                     // term dq
                pk[c] = fma(mp, du, fma(dM[r][c], d, pk[c]));      // term dk
                dM[r][c] = fma(du, x.k[c], dM[r][c]);              // term dMp
                pg[c] = fma(dM[r][c], mp, pg[c]);                  // term dg
                dM[r][c] = dM[r][c]*x.a[c];                        // term dS_prev
            }
            if (lane == r) {
                dst[args.dv_off + ((s*T + t)*args.hv + h)*sv + j0 + r] = x.beta*dd[r]; // term dv
            }
        }

        // Stage this simdgroup's partial sums; buffers alternate by token so
        // that one barrier per token suffices.
        threadgroup float * sp = shmem + ((tl & 1)*args.nsg + sgitg)*pw;
        for (short c = 0; c < NC; ++c) {
            const int i = lane + GDN_NW*c;
            if (i < sk) {
                sp[i] = pq[c];
                sp[sk + i] = pk[c];
                sp[2*sk + i] = pg[c];
            }
        }
        if (lane == 0) sp[3*sk] = pb;
        // Orders: every simdgroup's staged partials (written just above) before
        // the cross-simdgroup sums below read them; and, with the buffers
        // alternating, the reads of token tl+2's sums before the writes of
        // token tl.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:stage
        threadgroup const float * sb = shmem + (tl & 1)*args.nsg*pw;
        device float * pout = part + ((tl*pairs + pair)*args.nrb + rb)*pw;
        for (int e = tid; e < pw; e += nthr) {
            float acc = 0.0f;
            for (int gi = 0; gi < args.nsg; ++gi) acc += sb[gi*pw + e];
            pout[e] = acc;
        }
    }

    // 5. dM is now dL/dM_{t0-1}: the initial state's gradient after the
    // first segment, else the carry into segment seg-1, kept in this
    // segment's checkpoint slot (read in step 1, dead since).
    device float * out = args.seg == 0 ? dst + args.dstate_off + pair*ss : ck;
    for (short r = 0; r < GDN_R; ++r) {
        for (short c = 0; c < NC; ++c) {
            const int i = lane + GDN_NW*c;
            if (i < sk) out[(j0 + r)*sk + i] = dM[r][c];
        }
    }
}

// gdn_bwd_red sums segment args.seg's partials. Grid (t1-t0, hv, seqs); a
// threadgroup of at least sk threads, thread i owns column i. Threadgroup
// (tl, h, s) writes dg and dbeta of value head h, sequence s, token t0+tl,
// and, when h < hk and s < seqs_qk, dq and dk of q/k head h, q/k sequence s:
// the sum over the value heads and sequences reading it, in increasing
// (sequence, value head) order, of the sums over row blocks.
kernel void gdn_bwd_red(
        constant gdn_args & args  [[buffer(0)]],
        device const float * src  [[buffer(1)]],
        device       float * dst  [[buffer(2)]],
        device       float * scr  [[buffer(3)]],
        threadgroup  float * shmem [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const int sk = args.sk, T = args.T, pw = args.pw, nrb = args.nrb;
    const int tl = tgpig.x, h = tgpig.y, s = tgpig.z;
    const int t = args.t0 + tl;
    const int pairs = args.hv*args.seqs;
    const int i = tpitg.x;
    device const float * part = scr + args.part_off;
    device const float * pp = part + (tl*pairs + s*args.hv + h)*nrb*pw;
    const int row = (s*T + t)*args.hv + h;

    if (args.gw > 1) {
        if (i < sk) {
            float acc = 0.0f;
            for (int b = 0; b < nrb; ++b) acc += pp[b*pw + 2*sk + i];
            dst[args.dg_off + row*sk + i] = acc;
        }
    } else if (i == 0) {
        float acc = 0.0f;
        for (int b = 0; b < nrb; ++b) {
            for (int x = 0; x < sk; ++x) acc += pp[b*pw + 2*sk + x];
        }
        dst[args.dg_off + row] = acc;
    }
    if (i == 0) {
        float acc = 0.0f;
        for (int b = 0; b < nrb; ++b) acc += pp[b*pw + 3*sk];
        dst[args.dbeta_off + row] = acc;
    }
    if (h < args.hk && s < args.seqs_qk && i < sk) {
        float aq = 0.0f, ak = 0.0f;
        for (int s2 = s*args.seq_rep; s2 < (s + 1)*args.seq_rep; ++s2) {
            for (int m = 0; m < args.rep; ++m) {
                const int h2 = args.interleave ? h*args.rep + m : h + args.hk*m;
                device const float * p2 = part + (tl*pairs + s2*args.hv + h2)*nrb*pw;
                for (int b = 0; b < nrb; ++b) {
                    aq += p2[b*pw + i];
                    ak += p2[b*pw + sk + i];
                }
            }
        }
        const int o = ((s*T + t)*args.hk + h)*sk + i;
        dst[args.dq_off + o] = aq;
        dst[args.dk_off + o] = ak;
    }
}

typedef decltype(gdn_scan<1>) gdn_kernel_t;

template [[host_name("gdn_scan_nc1")]] kernel gdn_kernel_t gdn_scan<1>;
template [[host_name("gdn_scan_nc2")]] kernel gdn_kernel_t gdn_scan<2>;
template [[host_name("gdn_scan_nc4")]] kernel gdn_kernel_t gdn_scan<4>;
template [[host_name("gdn_scan_nc8")]] kernel gdn_kernel_t gdn_scan<8>;

template [[host_name("gdn_bwd_seg_nc1")]] kernel gdn_kernel_t gdn_bwd_seg<1>;
template [[host_name("gdn_bwd_seg_nc2")]] kernel gdn_kernel_t gdn_bwd_seg<2>;
template [[host_name("gdn_bwd_seg_nc4")]] kernel gdn_kernel_t gdn_bwd_seg<4>;
template [[host_name("gdn_bwd_seg_nc8")]] kernel gdn_kernel_t gdn_bwd_seg<8>;

// ---- The chunkwise (WY) kernels: the same outputs over chunks of L tokens
// (gdn/chunk.go, derivation/05-chunkwise.md), with the products against
// the state as 8x8 simdgroup matrix products. One threadgroup runs one
// (value head, sequence) pair over all its chunks; its chunk's working rows
// live in the pair's part of the host-owned scratch (gdn_chunk_work), every
// matrix padded to Lp = L rounded up to 8 rows with zero rows, so that the
// products run over whole 8x8 tiles. Each output tile of a product belongs
// to one simdgroup, which sums it in a fixed order; every other sum runs in
// a fixed order in one thread; there are no atomics.
//
//   gdn_chunk_fwd  y and the snapshots. Grid (1, hv, seqs).
//   gdn_chunk_bwd  pass 1: the state before every chunk; pass 2, chunk by
//                  chunk from the last: dv, dg, dbeta and dstate directly,
//                  dq and dk per pair into the scratch. Grid (1, hv, seqs).
//   gdn_chunk_red  dq and dk: the sum over the value heads and sequences
//                  that share a q/k head. Grid (T, hk, seqs_qk).

struct gdn_chunk_args {
    int sk, sv, hk, hv, T, seqs, seqs_qk, gw;
    int rep, seq_rep, interleave, snapshots;
    float scale;
    int L, Lp;    // chunk length, and L rounded up to 8
    int nc;       // chunks
    int nce, e;   // the first nce chunks are L tokens of [0, e); then one token each
    int nsg;      // simdgroups per threadgroup
    gdn_view q, k, v, g, beta, state, dy;
    int has_state;
    int dstates_off; // dense [sk, sv, hv, seqs, snapshots] in src, or -1 for none
    int y_off, snap_off;
    int dq_off, dk_off, dv_off, dg_off, dbeta_off, dstate_off;
    // scratch (elements): [pairs][pp] work areas, [pairs][nc][sv][sk] the
    // states before every chunk, [pairs][T][sk] dq and dk per pair
    int pp, bnd_off, pdq_off, pdk_off;
};

// One pair's working rows (see ChunkScratchBytes for the count).
struct gdn_cw {
    device float *q, *k, *kd, *qd, *kl, *dkd, *dqd, *w, *dk, *dq, *dgc; // [Lp][sk]
    device float *v, *d, *u, *y, *c, *dd, *du;                         // [Lp][sv]
    device float *A, *P, *dA, *dP;                                     // [Lp][Lp]
    device float *dec;                                                 // [Lp][gw]
    device float *beta;                                                // [Lp]
    device float *lam, *dlam;                                          // [sk]
    device float *M, *dM;                                              // [sv][sk]
};

static inline gdn_cw gdn_chunk_work(constant gdn_chunk_args & a, device float * p) {
    const int lk = a.Lp*a.sk, lv = a.Lp*a.sv, ll = a.Lp*a.Lp, ss = a.sk*a.sv;
    gdn_cw w;
    w.q = p; p += lk; w.k = p; p += lk; w.kd = p; p += lk; w.qd = p; p += lk;
    w.kl = p; p += lk; w.dkd = p; p += lk; w.dqd = p; p += lk; w.w = p; p += lk;
    w.dk = p; p += lk; w.dq = p; p += lk; w.dgc = p; p += lk;
    w.v = p; p += lv; w.d = p; p += lv; w.u = p; p += lv; w.y = p; p += lv;
    w.c = p; p += lv; w.dd = p; p += lv; w.du = p; p += lv;
    w.A = p; p += ll; w.P = p; p += ll; w.dA = p; p += ll; w.dP = p; p += ll;
    w.dec = p; p += a.Lp*a.gw;
    w.beta = p; p += a.Lp;
    w.lam = p; p += a.sk; w.dlam = p; p += a.sk;
    w.M = p; p += ss; w.dM = p;
    return w;
}

// gdn_chunk_span gives chunk c's tokens [t0, t1), as gdn's chunkStarts:
// chunks of L over [0, e), then every snapshot token a chunk of its own.
static inline int2 gdn_chunk_span(constant gdn_chunk_args & a, int c) {
    if (c < a.nce) {
        return int2(c*a.L, min(a.e, (c + 1)*a.L));
    }
    const int t = a.e + (c - a.nce);
    return int2(t, t + 1);
}

// gdn_decay is Γ_rs = a_{s+1} ... a_r of key channel i (dec holds the
// decays a_t = exp(g_t)): the running product, set to zero below the
// smallest normal float, as gdn's decays.
static inline float gdn_decay(device const float * dec, int gw, int i, int s, int r) {
    const int col = gw > 1 ? i : 0;
    float x = 1.0f;
    for (int t = s + 1; t <= r; ++t) {
        x *= dec[t*gw + col];
        if (x < 1.17549435e-38f) x = 0.0f;
    }
    return x;
}

// gdn_tile_load loads the 8x8 tile at (r0, c0) of a row-major matrix with
// row stride ld, or of the transpose of one (tr).
static inline void gdn_tile_load(thread simdgroup_float8x8 & x, device const float * m, int ld, bool tr, int r0, int c0) {
    if (tr) {
        simdgroup_load(x, m + c0*ld + r0, ld, ulong2(0, 0), true);
    } else {
        simdgroup_load(x, m + r0*ld + c0, ld);
    }
}

// gdn_gemm: C (rows x cols, row stride ldc) = (acc ? C : 0) + A1 B1 + A2 B2,
// with A1 rows x K1, B1 K1 x cols (likewise A2, B2; K2 may be 0), each read
// as gdn_tile_load reads it. All dimensions are multiples of 8. Output tile
// number x belongs to simdgroup x mod nsg, which sums it over K in order.
static void gdn_gemm(device float * C, int ldc, int rows, int cols, bool acc,
                     device const float * a1, int lda1, bool ta1, device const float * b1, int ldb1, bool tb1, int K1,
                     device const float * a2, int lda2, bool ta2, device const float * b2, int ldb2, bool tb2, int K2,
                     int sg, int nsg) {
    const int tc = cols/8, nt = (rows/8)*tc;
    for (int x = sg; x < nt; x += nsg) {
        const int r0 = (x/tc)*8, c0 = (x%tc)*8;
        simdgroup_float8x8 cm = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        if (acc) simdgroup_load(cm, C + r0*ldc + c0, ldc);
        simdgroup_float8x8 am, bm;
        for (int k0 = 0; k0 < K1; k0 += 8) {
            gdn_tile_load(am, a1, lda1, ta1, r0, k0);
            gdn_tile_load(bm, b1, ldb1, tb1, k0, c0);
            simdgroup_multiply_accumulate(cm, am, bm, cm);
        }
        for (int k0 = 0; k0 < K2; k0 += 8) {
            gdn_tile_load(am, a2, lda2, ta2, r0, k0);
            gdn_tile_load(bm, b2, ldb2, tb2, k0, c0);
            simdgroup_multiply_accumulate(cm, am, bm, cm);
        }
        simdgroup_store(cm, C + r0*ldc + c0, ldc);
    }
}

// The thread of a threadgroup and the pair it runs.
struct gdn_ct {
    int tid, nthr, sg, nsg;
    int h, s, hq, sq, pair;
};

// gdn_chunk_gather copies tokens [t0, t0+n) into the chunk's rows (zero
// rows from n to Lp): q, k, v, beta, the decays exp(g) and, for the
// backward, c = scale dy.
static void gdn_chunk_gather(constant gdn_chunk_args & a, device const float * src, gdn_cw w, gdn_ct x,
                             int t0, int n, bool bwd) {
    const int sk = a.sk, sv = a.sv, Lp = a.Lp;
    for (int e = x.tid; e < Lp*sk; e += x.nthr) {
        const int r = e / sk, i = e % sk, t = t0 + r;
        const bool ok = r < n;
        w.q[e] = ok ? gdn_at(src, a.q, i, x.hq, t, x.sq) : 0.0f;
        w.k[e] = ok ? gdn_at(src, a.k, i, x.hq, t, x.sq) : 0.0f;
        if (a.gw > 1) w.dec[e] = ok ? exp(gdn_at(src, a.g, i, x.h, t, x.s)) : 0.0f;
    }
    for (int e = x.tid; e < Lp*sv; e += x.nthr) {
        const int r = e / sv, j = e % sv, t = t0 + r;
        const bool ok = r < n;
        w.v[e] = ok ? gdn_at(src, a.v, j, x.h, t, x.s) : 0.0f;
        if (bwd) w.c[e] = ok ? a.scale*gdn_at(src, a.dy, j, x.h, t, x.s) : 0.0f;
    }
    for (int r = x.tid; r < Lp; r += x.nthr) {
        const bool ok = r < n;
        w.beta[r] = ok ? gdn_at(src, a.beta, 0, x.h, t0 + r, x.s) : 0.0f;
        if (a.gw == 1) w.dec[r] = ok ? exp(gdn_at(src, a.g, 0, x.h, t0 + r, x.s)) : 0.0f;
    }
    // Orders: the gathered rows (written by every thread above) before the
    // pair terms read them, and the previous chunk's last reads of them
    // (ordered by that chunk's last barrier) before nothing else.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_gather
}

// gdn_chunk_pairs (gdn's pairs): kd = Λ ⊙ k, qd = Λ ⊙ q, kl_s = Γ_{n-1,s} ⊙ k_s,
// lam = Λ_{n-1}, A_rs (s < r) and P_rs (s <= r), zero elsewhere.
static void gdn_chunk_pairs(constant gdn_chunk_args & a, gdn_cw w, gdn_ct x, int n) {
    const int sk = a.sk, Lp = a.Lp, gw = a.gw;
    for (int e = x.tid; e < Lp*sk; e += x.nthr) {
        const int r = e / sk, i = e % sk;
        if (r < n) {
            const float lr = gdn_decay(w.dec, gw, i, -1, r);
            w.kd[e] = lr*w.k[e];
            w.qd[e] = lr*w.q[e];
            w.kl[e] = gdn_decay(w.dec, gw, i, r, n - 1)*w.k[e];
            if (r == n - 1) w.lam[i] = lr;
        } else {
            w.kd[e] = 0.0f;
            w.qd[e] = 0.0f;
            w.kl[e] = 0.0f;
        }
    }
    for (int e = x.tid; e < Lp*Lp; e += x.nthr) {
        const int r = e / Lp, s = e % Lp;
        float av = 0.0f, pv = 0.0f;
        if (r < n && s <= r) {
            device const float * kr = w.k + r*sk;
            device const float * qr = w.q + r*sk;
            device const float * ks = w.k + s*sk;
            const float g0 = gw == 1 ? gdn_decay(w.dec, 1, 0, s, r) : 0.0f;
            for (int i = 0; i < sk; ++i) {
                const float gk = (gw == 1 ? g0 : gdn_decay(w.dec, gw, i, s, r))*ks[i];
                av = fma(kr[i], gk, av);
                pv = fma(qr[i], gk, pv);
            }
            if (s == r) av = 0.0f;
        }
        w.A[e] = av;
        w.P[e] = pv;
    }
    // Orders: kd, qd, kl, lam, A and P (written above, each element by one
    // thread) before the products and the solve read them.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_pairs
}

// gdn_chunk_u0: u0 = kd M0^T into w.u and, for the forward, y0 = qd M0^T
// into w.y (products with the state before the chunk).
static void gdn_chunk_u0(constant gdn_chunk_args & a, gdn_cw w, gdn_ct x, device const float * M0, bool fwd) {
    const int sk = a.sk, sv = a.sv, Lp = a.Lp;
    gdn_gemm(w.u, sv, Lp, sv, false, w.kd, sk, false, M0, sk, true, sk, w.kd, sk, false, M0, sk, true, 0, x.sg, x.nsg);
    if (fwd) gdn_gemm(w.y, sv, Lp, sv, false, w.qd, sk, false, M0, sk, true, sk, w.qd, sk, false, M0, sk, true, 0, x.sg, x.nsg);
    // Orders: the product tiles (each stored by one simdgroup) before the
    // solve reads them by columns, and the reads of M0 before the state's
    // update overwrites it.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_u0
}

// gdn_chunk_solve (gdn's solve and outputs): column j of one thread,
// u_r = u0_r + sum_{s<r} A_rs d_s, d_r = beta_r (v_r - u_r); w.u_r becomes
// v_r - u_r. With y_out, y_r = scale (y0_r + sum_{s<=r} P_rs d_s) goes to
// dst. With Mn, Mn = M0 diag(Λ_{n-1}), the first half of the state update.
static void gdn_chunk_solve(constant gdn_chunk_args & a, gdn_cw w, gdn_ct x, int n, int t0,
                            device float * dst, bool y_out, device const float * M0, device float * Mn) {
    const int sk = a.sk, sv = a.sv, Lp = a.Lp;
    for (int j = x.tid; j < sv; j += x.nthr) {
        for (int r = 0; r < n; ++r) {
            float u = w.u[r*sv + j];
            for (int s = 0; s < r; ++s) u = fma(w.A[r*Lp + s], w.d[s*sv + j], u);
            const float vu = w.v[r*sv + j] - u;
            w.u[r*sv + j] = vu;
            w.d[r*sv + j] = w.beta[r]*vu;
            if (y_out) {
                float y = w.y[r*sv + j];
                for (int s = 0; s <= r; ++s) y = fma(w.P[r*Lp + s], w.d[s*sv + j], y);
                dst[a.y_off + ((x.s*a.T + t0 + r)*a.hv + x.h)*sv + j] = a.scale*y;
            }
        }
        for (int r = n; r < Lp; ++r) w.d[r*sv + j] = 0.0f;
    }
    if (Mn) {
        for (int e = x.tid; e < sv*sk; e += x.nthr) Mn[e] = M0[e]*w.lam[e % sk];
    }
    // Orders: d (each column by one thread) before the products read it by
    // tiles, and Mn's scaling before the product adds to it.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_solve
}

// gdn_chunk_state: Mn += D^T kl, the rest of the state update.
static void gdn_chunk_state(constant gdn_chunk_args & a, gdn_cw w, gdn_ct x, device float * Mn) {
    const int sk = a.sk, sv = a.sv, Lp = a.Lp;
    gdn_gemm(Mn, sk, sv, sk, true, w.d, sv, true, w.kl, sk, false, Lp, w.d, sv, true, w.kl, sk, false, 0, x.sg, x.nsg);
    // Orders: the new state's tiles before the threads copy it out (the
    // snapshots) and before the next chunk's products read it.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_state
}

static inline gdn_ct gdn_chunk_thread(constant gdn_chunk_args & a, uint3 tgpig, ushort3 tpitg, ushort3 ntg, ushort sgitg) {
    gdn_ct x;
    x.tid = tpitg.x;
    x.nthr = ntg.x;
    x.sg = sgitg;
    x.nsg = a.nsg;
    x.h = tgpig.y;
    x.s = tgpig.z;
    x.hq = a.interleave ? x.h / a.rep : x.h % a.hk;
    x.sq = x.s / a.seq_rep;
    x.pair = x.s*a.hv + x.h;
    return x;
}

// gdn_chunk_fwd runs the forward of one (head, seq) chunk by chunk.
kernel void gdn_chunk_fwd(
        constant gdn_chunk_args & args [[buffer(0)]],
        device const float * src  [[buffer(1)]],
        device       float * dst  [[buffer(2)]],
        device       float * scr  [[buffer(3)]],
        threadgroup  float * shmem [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const gdn_ct x = gdn_chunk_thread(args, tgpig, tpitg, ntg, sgitg);
    const int sk = args.sk, ss = args.sk*args.sv, pairs = args.hv*args.seqs;
    const gdn_cw w = gdn_chunk_work(args, scr + x.pair*args.pp);
    for (int e = x.tid; e < ss; e += x.nthr) {
        w.M[e] = args.has_state ? gdn_at(src, args.state, e % sk, e / sk, x.h, x.s) : 0.0f;
    }
    for (int c = 0; c < args.nc; ++c) {
        const int2 sp = gdn_chunk_span(args, c);
        const int n = sp.y - sp.x;
        gdn_chunk_gather(args, src, w, x, sp.x, n, false);
        gdn_chunk_pairs(args, w, x, n);
        gdn_chunk_u0(args, w, x, w.M, true);
        gdn_chunk_solve(args, w, x, n, sp.x, dst, true, w.M, w.M);
        gdn_chunk_state(args, w, x, w.M);
        const int slot = args.T - sp.y;
        if (slot < args.snapshots) {
            device float * sn = dst + args.snap_off + (slot*pairs + x.pair)*ss;
            for (int e = x.tid; e < ss; e += x.nthr) sn[e] = w.M[e];
        }
    }
}

// gdn_chunk_bwd runs the backward of one (head, seq) chunk by chunk from
// the last (gdn's backwardChunk).
kernel void gdn_chunk_bwd(
        constant gdn_chunk_args & args [[buffer(0)]],
        device const float * src  [[buffer(1)]],
        device       float * dst  [[buffer(2)]],
        device       float * scr  [[buffer(3)]],
        threadgroup  float * shmem [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const gdn_ct x = gdn_chunk_thread(args, tgpig, tpitg, ntg, sgitg);
    const int sk = args.sk, sv = args.sv, Lp = args.Lp, gw = args.gw, T = args.T;
    const int ss = sk*sv, pairs = args.hv*args.seqs;
    const gdn_cw w = gdn_chunk_work(args, scr + x.pair*args.pp);
    device float * bnd = scr + args.bnd_off + x.pair*args.nc*ss;
    device float * pdq = scr + args.pdq_off + x.pair*T*sk;
    device float * pdk = scr + args.pdk_off + x.pair*T*sk;

    // Pass 1: bnd[c] = the state before chunk c.
    for (int e = x.tid; e < ss; e += x.nthr) {
        bnd[e] = args.has_state ? gdn_at(src, args.state, e % sk, e / sk, x.h, x.s) : 0.0f;
    }
    for (int c = 0; c + 1 < args.nc; ++c) {
        const int2 sp = gdn_chunk_span(args, c);
        const int n = sp.y - sp.x;
        gdn_chunk_gather(args, src, w, x, sp.x, n, false);
        gdn_chunk_pairs(args, w, x, n);
        gdn_chunk_u0(args, w, x, bnd + c*ss, false);
        gdn_chunk_solve(args, w, x, n, sp.x, dst, false, bnd + c*ss, bnd + (c + 1)*ss);
        gdn_chunk_state(args, w, x, bnd + (c + 1)*ss);
    }

    // Pass 2: dM = dL/dM at the end of chunk c, from the last chunk.
    for (int e = x.tid; e < ss; e += x.nthr) w.dM[e] = 0.0f;
    for (int c = args.nc - 1; c >= 0; --c) {
        const int2 sp = gdn_chunk_span(args, c);
        const int t0 = sp.x, n = sp.y - sp.x;
        device const float * M0 = bnd + c*ss;
        const int slot = T - sp.y;
        if (args.dstates_off >= 0 && slot < args.snapshots) {
            device const float * ds = src + args.dstates_off + (slot*pairs + x.pair)*ss;
            for (int e = x.tid; e < ss; e += x.nthr) w.dM[e] += ds[e];
        }
        gdn_chunk_gather(args, src, w, x, t0, n, true);
        gdn_chunk_pairs(args, w, x, n);
        gdn_chunk_u0(args, w, x, M0, false);
        gdn_chunk_solve(args, w, x, n, t0, dst, false, M0, nullptr);

        // term chunk-dstate and chunk-dy (gdn's backState, backY):
        //   dd = kl dM^T + P^T c     w = D dM     dqd = c M0     dP = c D^T
        //   dlam = sum_j dM[j] ⊙ M0[j]
        gdn_gemm(w.dd, sv, Lp, sv, false, w.kl, sk, false, w.dM, sk, true, sk, w.P, Lp, true, w.c, sv, false, Lp, x.sg, x.nsg);
        gdn_gemm(w.w, sk, Lp, sk, false, w.d, sv, false, w.dM, sk, false, sv, w.d, sv, false, w.dM, sk, false, 0, x.sg, x.nsg);
        gdn_gemm(w.dqd, sk, Lp, sk, false, w.c, sv, false, M0, sk, false, sv, w.c, sv, false, M0, sk, false, 0, x.sg, x.nsg);
        gdn_gemm(w.dP, Lp, Lp, Lp, false, w.c, sv, false, w.d, sv, true, sv, w.c, sv, false, w.d, sv, true, 0, x.sg, x.nsg);
        for (int i = x.tid; i < sk; i += x.nthr) {
            float acc = 0.0f;
            for (int j = 0; j < sv; ++j) acc = fma(w.dM[j*sk + i], M0[j*sk + i], acc);
            w.dlam[i] = acc;
        }
        // Orders: dd, w, dqd, dP and dlam before their readers below, and
        // every read of dM above before it is scaled below.
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dstate

        // term chunk-dsolve (gdn's backSolve), column j of one thread, rows
        // from the last: dv = beta dd, du = -beta dd, dd_s += A_rs du_r.
        // And dM0 = dM diag(Λ_{n-1}) before the products add to it.
        for (int j = x.tid; j < sv; j += x.nthr) {
            for (int r = n - 1; r >= 0; --r) {
                const float dd = w.dd[r*sv + j], b = w.beta[r];
                const float du = -b*dd;
                w.du[r*sv + j] = du;
                dst[args.dv_off + ((x.s*T + t0 + r)*args.hv + x.h)*sv + j] = b*dd;
                for (int s = 0; s < r; ++s) w.dd[s*sv + j] = fma(w.A[r*Lp + s], du, w.dd[s*sv + j]);
            }
            for (int r = n; r < Lp; ++r) w.du[r*sv + j] = 0.0f;
        }
        for (int e = x.tid; e < ss; e += x.nthr) w.dM[e] *= w.lam[e % sk];
        // Orders: du and the final dd (each column by one thread) before
        // the products and dbeta read them, and dM's scaling before the
        // products add to it.
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_bsolve

        //   dA = du D^T     dkd = du M0     dM0 += c^T qd + du^T kd
        //   dbeta_r = dd_r . (v_r - u_r)
        gdn_gemm(w.dM, sk, sv, sk, true, w.c, sv, true, w.qd, sk, false, Lp, w.du, sv, true, w.kd, sk, false, Lp, x.sg, x.nsg);
        gdn_gemm(w.dA, Lp, Lp, Lp, false, w.du, sv, false, w.d, sv, true, sv, w.du, sv, false, w.d, sv, true, 0, x.sg, x.nsg);
        gdn_gemm(w.dkd, sk, Lp, sk, false, w.du, sv, false, M0, sk, false, sv, w.du, sv, false, M0, sk, false, 0, x.sg, x.nsg);
        for (int r = x.tid; r < n; r += x.nthr) {
            float acc = 0.0f;
            for (int j = 0; j < sv; ++j) acc = fma(w.dd[r*sv + j], w.u[r*sv + j], acc);
            dst[args.dbeta_off + (x.s*T + t0 + r)*args.hv + x.h] = acc;
        }
        // Orders: dA and dkd (tiles of the simdgroups) before the threads
        // of the pair terms read them by columns.
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dpairs

        // term chunk-dpairs (gdn's backPairs), key channel i of thread
        // nthr-1-i (sk <= nthr): dk, dq and the gate's gradient through
        // every decay Γ_rs, each Γ_rs ⊙ dΓ_rs reaching the g_t with
        // s < t <= r by a running sum down r. (Channels from the last
        // thread: on the simdgroups with the fewest product tiles above,
        // which finish first, so that the executor sees a missing
        // barrier:chunk_dpairs.)
        const int i = x.nthr - 1 - x.tid;
        if (i < sk) {
            for (int r = 0; r < Lp; ++r) {
                w.dk[r*sk + i] = 0.0f;
                w.dq[r*sk + i] = 0.0f;
                w.dgc[r*sk + i] = 0.0f;
            }
            for (int s = -1; s < n; ++s) {
                float acc = 0.0f;
                for (int r = n - 1; r > s; --r) {
                    const float gam = gdn_decay(w.dec, gw, i, s, r);
                    const float kr = w.k[r*sk + i], qr = w.q[r*sk + i];
                    float dgam;
                    if (s < 0) {
                        const float dkd = w.dkd[r*sk + i], dqd = w.dqd[r*sk + i];
                        w.dk[r*sk + i] += gam*dkd;
                        w.dq[r*sk + i] += gam*dqd;
                        dgam = kr*dkd + qr*dqd;
                        if (r == n - 1) dgam += w.dlam[i];
                    } else {
                        const float av = w.dA[r*Lp + s], pv = w.dP[r*Lp + s];
                        const float ks = w.k[s*sk + i];
                        const float gk = gam*ks;
                        w.dk[r*sk + i] += av*gk;
                        w.dq[r*sk + i] += pv*gk;
                        const float cc = av*kr + pv*qr;
                        w.dk[s*sk + i] += gam*cc;
                        dgam = ks*cc;
                        if (r == n - 1) {
                            const float ws = w.w[s*sk + i];
                            w.dk[s*sk + i] += gam*ws;
                            dgam += ks*ws;
                        }
                    }
                    acc += gam*dgam;
                    w.dgc[r*sk + i] += acc;
                }
                if (s >= 0) {
                    // r = s: Γ_ss = 1 and no gate enters.
                    const float pv = w.dP[s*Lp + s];
                    w.dq[s*sk + i] += pv*w.k[s*sk + i];
                    w.dk[s*sk + i] += pv*w.q[s*sk + i];
                    if (s == n - 1) w.dk[s*sk + i] += w.w[s*sk + i];
                }
            }
            for (int r = 0; r < n; ++r) {
                pdq[(t0 + r)*sk + i] = w.dq[r*sk + i];
                pdk[(t0 + r)*sk + i] = w.dk[r*sk + i];
                if (gw > 1) dst[args.dg_off + ((x.s*T + t0 + r)*args.hv + x.h)*sk + i] = w.dgc[r*sk + i];
            }
        }
        // Orders: the per-channel gate gradients before the scalar gate's
        // sum over channels reads them, and this chunk's reads of its rows
        // before the next chunk's gather overwrites them (and of dM before
        // its snapshot gradient is added).
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dg
        if (gw == 1) {
            for (int r = x.tid; r < n; r += x.nthr) {
                float acc = 0.0f;
                for (int i = 0; i < sk; ++i) acc += w.dgc[r*sk + i];
                dst[args.dg_off + (x.s*T + t0 + r)*args.hv + x.h] = acc;
            }
        }
    }
    for (int e = x.tid; e < ss; e += x.nthr) dst[args.dstate_off + x.pair*ss + e] = w.dM[e];
}

// gdn_chunk_red sums dq and dk of q/k head h, q/k sequence s, token t over
// the value heads and sequences that read it, in increasing (sequence,
// value head) order. Grid (T, hk, seqs_qk); thread i owns column i.
kernel void gdn_chunk_red(
        constant gdn_chunk_args & args [[buffer(0)]],
        device const float * src  [[buffer(1)]],
        device       float * dst  [[buffer(2)]],
        device       float * scr  [[buffer(3)]],
        threadgroup  float * shmem [[threadgroup(0)]],
        uint3   tgpig [[threadgroup_position_in_grid]],
        ushort3 tpitg [[thread_position_in_threadgroup]],
        ushort3 ntg   [[threads_per_threadgroup]],
        ushort  tiisg [[thread_index_in_simdgroup]],
        ushort  sgitg [[simdgroup_index_in_threadgroup]]) {
    const int sk = args.sk, T = args.T;
    const int t = tgpig.x, h = tgpig.y, s = tgpig.z;
    for (int i = tpitg.x; i < sk; i += ntg.x) {
        float aq = 0.0f, ak = 0.0f;
        for (int s2 = s*args.seq_rep; s2 < (s + 1)*args.seq_rep; ++s2) {
            for (int m = 0; m < args.rep; ++m) {
                const int h2 = args.interleave ? h*args.rep + m : h + args.hk*m;
                const int o = ((s2*args.hv + h2)*T + t)*sk + i;
                aq += scr[args.pdq_off + o];
                ak += scr[args.pdk_off + o];
            }
        }
        const int o = ((s*T + t)*args.hk + h)*sk + i;
        dst[args.dq_off + o] = aq;
        dst[args.dk_off + o] = ak;
    }
}
