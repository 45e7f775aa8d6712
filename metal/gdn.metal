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

// gdn_col is where w's elements (i0, i1, *, i3) start: element i2 of them
// is gdn_col(...)[i2*w.nb[2]], gdn_at's element, for a loop over i2 (tokens)
// that forms the rest of the index once.
static inline device const float * gdn_col(device const float * src, constant gdn_view & w, int i0, int i1, int i3) {
    return src + w.off + i0*w.nb[0] + i1*w.nb[1] + i3*w.nb[3];
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
// (gdn/chunk.go, derivation/05-chunkwise.md), with every product of whole
// matrices as 8x8 simdgroup matrix products. Work is split two ways:
//
//   - everything inside a chunk that does not need the state (the gathered
//     rows, the decays, the pair matrices A and P, the WY factors) runs in
//     parallel over chunks, one threadgroup per (chunk, head, seq);
//   - the walk of the state across chunks runs one threadgroup per block
//     of vb = 16 (or 8) value rows of the state, because every row j of M
//     (a value index) evolves on its own: the forward's u_j, d_j, y_j and
//     the backward's dd_j, du_j need only row j of M and dM. Its block of
//     M or dM stays in threadgroup memory for the whole walk.
//
// The sums over value rows (dq, dk, dg, dbeta) run after the walk, again
// in parallel over chunks, from what the walk stored. Each chunk has an
// area of the host-owned scratch (gdn_ca). The host may run the value
// heads in groups, each the value heads of hkg q/k heads, one group's
// dispatches after another's in one scratch (gdn_chunk_thread maps a
// grid's y to the group's heads). Every matrix of an area is padded
// to Lp = L rounded up to 8 rows with zero rows, so that products run over
// whole tiles. Each output tile of a product belongs to one simdgroup,
// which sums it in a fixed order; every other sum runs in a fixed order in
// one thread; there are no atomics.
//
// The solve of the reference (u_r = u0_r + sum_{s<r} A_rs d_s, d_r =
// beta_r (v_r - u_r)) is here in its WY form: with R = (I + A diag(beta))^-1,
// computed by 8x8 blocks in the chunk's prep (forward substitution within
// the diagonal blocks, products below them),
// v - u = R (v - kd M0^T) = U' - W' M0^T with U' = R v and W' = R kd, so
// the walk needs only products. The backward's solve is its transpose:
// du = -R^T (beta ⊙ dd), then dd' = dd + A^T du and dv = -du.
//
//   gdn_chunk_prep    per chunk: gather q, k, v, beta, exp(g); kd, qd,
//                     kl (the scalar gate's backward: ell), lam; A, P; R;
//                     W', U' (and the backward's P^T c, c = scale dy laid
//                     out by the host, gdn_chunk_c).
//                     Grid (nc, hg, seqs).
//   gdn_chunk_fwd     the walk forward: v - u, y and the snapshots (bwd = 0),
//                     or the state before each chunk and v - u for the
//                     backward (bwd = 1). Grid (nvb, hg, seqs).
//   gdn_chunk_bwd     the walk backward from the last chunk: dv and dstate
//                     directly; du, dM at each chunk's end, and the
//                     block's share of dbeta and of dlam. Grid (nvb, hg, seqs).
//   gdn_chunk_dpairs  per chunk: dbeta; dq and dk per (head, seq) in the
//                     chunk's area; dg. Grid (nc, hg, seqs).
//   gdn_chunk_red     dq and dk: the sum over the value heads and sequences
//                     that share a q/k head. Grid (ceil(T / GDN_RED_ROWS),
//                     hkg, seqs_qk).
//
// hg = hkg*rep is the group's value heads (every value head in one group
// where the scratch allows).

#define GDN_LMAX 64   // the longest chunk the kernels take (Lp <= 64)
#define GDN_SKMAX 256 // the largest key head size
// The walk's rows in threadgroup memory are padded: a block of M (or dM)
// has row stride sk + GDN_PADK, read mostly as the transpose M^T, and the
// [Lp][vb] blocks (vb = 8 or 16) have row stride GDN_LB, so that the lanes
// of an 8x8 tile load fall in different memory banks where threadgroup
// memory has 32 of 4 bytes (sk a multiple of 32: a transposed tile's 32
// elements in 32 banks; 24: an untransposed tile's two-element rows in
// distinct banks per half simdgroup).
#define GDN_PADK 4
#define GDN_LB 24
// KDA's prep holds its column factors (the rows of k that the tiles below
// the diagonal take as B, gdn_kda_cols) in threadgroup memory, rows of
// stride sk + GDN_PADK, where the chunk's Lp - 8 rows that a column reads
// fit in 32 KiB (S_k up to 128 at Lp 64); in the scratch where not.
#define GDN_KCOLS_TG(Lp, sk) ((Lp) > 8 && ((Lp) - 8)*((sk) + GDN_PADK) <= 8192)
// Elements a thread loads before it stores them, where a loop by threads
// reads device memory and stores (prep's gather, decays and last loops, the
// walks' loops by threads, the pair terms' loops by rows and runs; see the
// gather in gdn_chunk_prep). 8 was slower on the H200
// (docs/h200/loads-ab.log).
#define GDN_GB 4

struct gdn_chunk_args {
    int sk, sv, hk, hv, T, seqs, seqs_qk, gw;
    int rep, seq_rep, interleave, snapshots;
    float scale;
    int L, Lp;    // chunk length, and L rounded up to 8
    int nc;       // chunks
    int nce, e;   // the first nce chunks are L tokens of [0, e); then one token each
    int vb, nvb;  // value rows per state block of the walk, and blocks (sv / vb)
    int hq0, hkg; // the group: q/k heads [hq0, hq0 + hkg) and their value heads
    gdn_view q, k, v, g, beta, state, dy;
    int has_state;
    int dstates_off; // dense [sk, sv, hv, seqs, snapshots] in src, or -1 for none
    int y_off, snap_off;
    int dq_off, dk_off, dv_off, dg_off, dbeta_off, dstate_off;
    // scratch (elements): [seqs][hkg*rep][nc] chunk areas of pp elements,
    // the group's (gdn_ca; the backward's areas are longer)
    int pp, bwd;
    // the backward's c = scale dy in src from c_off, [seqs][hv][nc][Lp][sv]
    // (see gdn_chunk_c)
    int c_off;
    // kept: 1 where the forward keeps each chunk's A, P and X for the
    // backward (Backend.ForwardKeep), 2 where the backward reads them
    // (Backend.BackwardKept), 0 otherwise. Kept, they are not in the areas
    // but in the scratch's first floats, [group][seqs][hkg*rep][nc][3][Lp][Lp],
    // the group's from kres; the areas then start at aoff (0 otherwise).
    int kept, kres, aoff;
};

// One chunk's area of the scratch (see chunkAreaElems for the count).
struct gdn_ca {
    device float *k, *q, *kd, *kl, *wn, *qd; // [Lp][sk]; wn = -W'; kd and qd end as dk and dq;
                                             // qd follows wn (gdn_chunk_fwd reads them as one);
                                             // the scalar gate's backward has no kl (see ell)
    device float *v, *un;                    // [Lp][sv]: v; -U', then v - u
    device float *du;                        // [Lp][sv]: the backward's du (gdn_dsolve)
    device float *A, *P, *X;                 // [Lp][Lp]; X = -R, then -diag(beta) R
    device float *beta;                      // [Lp]
    device float *ell;                       // [Lp]: the scalar gate's Γ_{n-1,s} (kl_s = ell_s k_s)
    device float *lam;                       // [sk]
    device float *dec;                       // [Lp][gw]: exp(g)
    // the backward only
    device float *dd;                        // [Lp][sv]: P^T c, then dL/dd, then dd' = dd + A^T du,
                                             // in kd's place (below)
    device float *M0, *dM;                   // [sv][sk]: the state before the chunk, dL/dM after it
    device float *part;                      // [nvb][sk]: each block's share of dlam
};

// Every backward area holds kd and dd in one place of max(Lp sk, Lp sv)
// floats: prep's kd (Λ_r k_r) has one reader, the product wn = X kd, after
// which (barrier chunk_wy) prep forms dd = P^T c there; the walk and the
// solve's gradient then read and write dd, and once the solve's gradient
// has read dd' (barrier chunk_ddone, or the end of gdn_chunk_dsolve) the
// pair terms' products write dk's sums there. At the 27B shape that is
// Lp sv floats less an area, 192 MiB of the backward's scratch at T 8192.
//
// No backward area has a place of v's own either: prep's v (read by un =
// X v alone) goes where the walks later write M0 (the scalar gate's) or
// after the decays (KDA's, below), places nothing else takes before the
// walks; and the solve's gradient writes du where the scalar gate's q or
// KDA's kl was (grown to max(Lp sk, Lp sv)), whose last readers are
// prep's products and the walks. The scalar gate's pair terms then
// gather q from the inputs again, into the place of M0 and dM once their
// first products have read those (barrier chunk_dprod); KDA's write K̂
// over du there once the same products have read it. Another Lp sv
// floats less an area at the 27B shape, 192 MiB of the backward's scratch
// at T 8192; the scalar gate's v, M0 and dM, then q, share max(2 sv sk,
// Lp sk, Lp sv). (The gather costs time: on an H100 the scalar backward
// went from 11.56 to 11.99 ms with this change, KDA's, which gathers
// nothing new, from 15.81 to 15.93: docs/h200/no-v-place-ab.log.
// docs/h200/next/no-v-place-dww.patch forms the scalar pair terms' one
// product of dM first and puts du where dM was, with no gather; not timed
// yet.)
//
// KDA's backward areas share two places between what prep writes and what
// the walks write after it, so that its 48 value heads at the 27B shape
// fit one group (2.40 GiB where separate places took 2.96, two groups,
// before dd and du found places of others):
//   - k and q (prep's) and then dM (the backward walk's), in one place of
//     max(2 Lp sk, sv sk) floats;
//   - dec (prep's exp(g)) with v after it and then M0 (the forward
//     walk's), in another of max(Lp gw + max(Lp sv, 3 (Lp/8) sk), sv sk),
//     whose floats from Lp gw the pair terms' block sums take
//     (gdn_dpairs_kda).
// The walks read neither k, q nor dec; the pair terms, once their first
// products have read M0 and dM, gather k, q and exp(g) from the inputs
// again, as prep's gather did (the same values, so the same bits).

static inline gdn_ca gdn_chunk_area(constant gdn_chunk_args & a, device float * scr, int area, int c) {
    device float * p = scr + a.aoff + (area*a.nc + c)*a.pp;
    const int lk = a.Lp*a.sk, lv = a.Lp*a.sv, ll = a.Lp*a.Lp, ss = a.sk*a.sv;
    gdn_ca w;
    // The scalar gate's backward keeps no kl: its kl is k with rows scaled
    // by ell, and the walks scale the other operand instead (kl points at k,
    // which goes where kl goes, before wn, for the walks' look-ahead lines).
    const bool kb = a.bwd && a.gw > 1; // KDA's backward (see gdn_ca)
    // The backward's kd (read by prep's wn = X kd alone) and dd after it
    // share a place (see gdn_ca).
    const int lkd = a.bwd ? max(lk, lv) : lk;
    // The backward's du shares a place with the scalar gate's q or KDA's
    // kl, grown to max(lk, lv) (see gdn_ca); kl at its end, so that kl, wn
    // and qd stay one run of lines for the walks' look-ahead.
    const int lku = max(lk, lv);
    if (a.bwd && a.gw == 1) {
        w.q = p; w.du = p; p += lku;
        w.kd = p; p += lkd; w.k = p; p += lk;
        w.kl = w.k;
    } else {
        w.k = p; w.q = p + lk; w.dM = p; p += kb ? max(2*lk, ss) : 2*lk;
        w.kd = p; p += lkd;
        w.du = p; // (the forward has none)
        if (kb) p += lku - lk;
        w.kl = p; p += lk;
    }
    w.dd = w.kd;
    w.wn = p; p += lk; w.qd = p; p += lk;
    if (!a.bwd) {
        w.v = p; p += lv;
    }
    w.un = p; p += lv;
    if (a.kept != 0) {
        device float * r = scr + a.kres + (area*a.nc + c)*3*ll;
        w.A = r; w.P = r + ll; w.X = r + 2*ll;
    } else {
        w.A = p; p += ll; w.P = p; p += ll; w.X = p; p += ll;
    }
    w.beta = p; p += a.Lp;
    w.ell = p; p += a.Lp;
    w.lam = p; p += a.sk;
    w.dec = p;
    if (kb) {
        // KDA's backward: the decays and prep's v after them, then the
        // state; then the decays again and the pair terms' block sums.
        w.v = p + a.Lp*a.gw;
        w.M0 = p; p += max(a.Lp*a.gw + max(lv, 3*(a.Lp/8)*a.sk), ss);
    } else {
        p += a.Lp*a.gw;
        // The scalar gate's backward: prep's v, then the state and dL/dM,
        // then the pair terms' q (the forward has none of them).
        if (a.bwd) w.v = p;
        w.M0 = p; w.dM = p + ss; p += a.bwd ? max(2*ss, lku) : 2*ss;
    }
    w.part = p;
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

// gdn_flush sets a decay below the smallest normal float to zero, as gdn's
// decays: a running product of exp(g) <= 1 never reaches a subnormal.
static inline float gdn_flush(float x) { return x < 1.17549435e-38f ? 0.0f : x; }

// gdn_line is one float of line l (32 floats, 128 bytes) of p's first nl
// lines, 0 past them: a load that brings the line into the GPU's caches
// ahead of the products that read it (MSL has no prefetch instruction).
// A kernel sums such values into one float, after the loads have long
// arrived, and stores it only where args.nc < 0, which never holds, so
// that no compiler drops the loads.
static inline float gdn_line(device const float * p, int l, int nl) { return l < nl ? p[32*l] : 0.0f; }

// gdn_rows is a thread's share of a walk's [vb][sk] rows (M, dM): key
// channel i = tid mod sk of rows r0, r0 + rs, ... (rs = nthr / sk; sk is a
// power of two up to nthr, and a thread from rs sk on, were there one,
// has none), so that the walks' loops over their rows take no division by
// sk at each step and load a channel's lam once. Where the loops went by
// element e = tid + k nthr (row e / sk, channel e mod sk), the divisions
// and the loads of lam were 9 to 16% of the walks' instructions at the
// 27B shape.
struct gdn_rows {
    int i, r0, rs;
    bool on;
};

static inline gdn_rows gdn_walk_rows(int tid, int nthr, int sk) {
    gdn_rows m;
    m.rs = nthr / sk;
    m.i = tid % sk;
    m.r0 = tid / sk;
    m.on = m.rs > 0 && tid < m.rs*sk;
    return m;
}

// gdn_rows_copy copies the thread's elements of the VB rows of p (row
// stride ldp) to d (row stride ldd): GDN_GB loads before their stores, as
// in prep's gather.
template <int VB, typename PD, typename PS>
static inline void gdn_rows_copy(PD d, int ldd, PS p, int ldp, gdn_rows m) {
    if (!m.on) return;
    for (int r0 = m.r0; r0 < VB; r0 += GDN_GB*m.rs) {
        float v[GDN_GB];
        for (int u = 0; u < GDN_GB; ++u) {
            const int r = r0 + u*m.rs;
            v[u] = r < VB ? p[r*ldp + m.i] : 0.0f;
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int r = r0 + u*m.rs;
            if (r < VB) d[r*ldd + m.i] = v[u];
        }
    }
}

// gdn_tile_load loads the 8x8 tile at (r0, c0) of a row-major matrix with
// row stride ld, or of the transpose of one (tr), from device or
// threadgroup memory.
template <typename P>
static inline void gdn_tile_load(thread simdgroup_float8x8 & x, P m, int ld, bool tr, int r0, int c0) {
    if (tr) {
        simdgroup_load(x, m + c0*ld + r0, ld, ulong2(0, 0), true);
    } else {
        simdgroup_load(x, m + r0*ld + c0, ld);
    }
}

// gdn_tile_store stores the 8x8 tile at (r0, c0) of a row-major matrix
// with row stride ld, or of the transpose of one (tr), as gdn_tile_load
// loads it.
template <typename P>
static inline void gdn_tile_store(thread const simdgroup_float8x8 & x, P m, int ld, bool tr, int r0, int c0) {
    if (tr) {
        simdgroup_store(x, m + c0*ld + r0, ld, ulong2(0, 0), true);
    } else {
        simdgroup_store(x, m + r0*ld + c0, ld);
    }
}

// gdn_mma_rows: c0 += a0 b, then c1 += a1 b, two products that share b
// (a block's two rows of tiles). In MSL, and so on a Mac and in the CPU
// executor, they are two simdgroup_multiply_accumulate. The CUDA prelude
// defines GDNCU_MMA_ROWS and simdgroup_multiply_accumulate_rows, the
// same two products as one instruction of the tensor cores, whose 16 x 8
// products (sm_90) take the two tiles' rows together; each tile's sum is
// the same sum over k.
static inline void gdn_mma_rows(thread simdgroup_float8x8 & c0, thread simdgroup_float8x8 & c1,
                                thread const simdgroup_float8x8 & a0, thread const simdgroup_float8x8 & a1,
                                thread const simdgroup_float8x8 & b) {
#ifdef GDNCU_MMA_ROWS
    simdgroup_multiply_accumulate_rows(c0, c1, a0, a1, b);
#else
    simdgroup_multiply_accumulate(c0, a0, b, c0);
    simdgroup_multiply_accumulate(c1, a1, b, c1);
#endif
}

// gdn_mma_run: cm += A B over k in [kb, ke), A's tiles (r0, k) and B's
// (k, c0) read as gdn_tile_load reads them, in order of k. The loads of up
// to four steps are issued together, so that their latencies overlap,
// then the four products in order.
template <typename PA, typename PB>
static inline void gdn_mma_run(thread simdgroup_float8x8 & cm, PA a, int lda, bool ta, PB b, int ldb, bool tb,
                               int r0, int c0, int kb, int ke) {
    for (int k0 = kb; k0 < ke; k0 += 32) {
        simdgroup_float8x8 am[4], bm[4];
        const int nk = min(4, (ke - k0)/8);
        for (int u = 0; u < 4; ++u) {
            if (u < nk) {
                gdn_tile_load(am[u], a, lda, ta, r0, k0 + 8*u);
                gdn_tile_load(bm[u], b, ldb, tb, k0 + 8*u, c0);
            }
        }
        for (int u = 0; u < 4; ++u) {
            if (u < nk) simdgroup_multiply_accumulate(cm, am[u], bm[u], cm);
        }
    }
}

// gdn_mma_run_rows: gdn_mma_run for two products that share B, cm0 += A0
// B and cm1 += A1 B (both A read as ta says, at the same row r0), through
// gdn_mma_rows, B's tiles loaded once; two steps' loads go together.
template <typename PA, typename PB>
static inline void gdn_mma_run_rows(thread simdgroup_float8x8 & cm0, thread simdgroup_float8x8 & cm1, PA a0, PA a1,
                                    int lda, bool ta, PB b, int ldb, bool tb, int r0, int c0, int kb, int ke) {
    for (int k0 = kb; k0 < ke; k0 += 16) {
        simdgroup_float8x8 am[2][2], bm[2];
        const int nk = min(2, (ke - k0)/8);
        for (int u = 0; u < 2; ++u) {
            if (u < nk) {
                gdn_tile_load(am[u][0], a0, lda, ta, r0, k0 + 8*u);
                gdn_tile_load(am[u][1], a1, lda, ta, r0, k0 + 8*u);
                gdn_tile_load(bm[u], b, ldb, tb, k0 + 8*u, c0);
            }
        }
        for (int u = 0; u < 2; ++u) {
            if (u < nk) gdn_mma_rows(cm0, cm1, am[u][0], am[u][1], bm[u]);
        }
    }
}

#define GDN_FULL  0 // A1 has no structure
#define GDN_LOWER 1 // A1 is lower triangular: tiles (r0, k0) with k0 > r0 are zero
#define GDN_UPPER 2 // A1 is upper triangular: tiles (r0, k0) with k0 < r0 are zero

// gdn_blk: the accumulators of a block of up to 2 x 2 output tiles.
struct gdn_blk {
    simdgroup_float8x8 m[2][2];
};

// gdn_block_mma: one k-step's products of a block, cm.m[i][j] += a[i]
// b[j] for the rows i that take part (on0, on1) and the columns j < bc,
// each tile's sum in its order. The products that share a tile sit in one
// branch, or in one that the other's dominates (a tile's products with
// b[0] before those with b[1]), never each under a guard of its own, so
// that a compiler may share what a product does to an operand (in the CUDA
// prelude: a's two conversions to float64, b's two conversions, and b's
// two shuffles where b is not a loaded tile) between the products that
// read it.
static inline void gdn_block_mma(thread gdn_blk & cm, thread simdgroup_float8x8 * a, thread simdgroup_float8x8 * b,
                                 bool on0, bool on1, int bc) {
    if (on0 && on1) {
        gdn_mma_rows(cm.m[0][0], cm.m[1][0], a[0], a[1], b[0]);
        if (bc == 2) gdn_mma_rows(cm.m[0][1], cm.m[1][1], a[0], a[1], b[1]);
    } else if (on0) {
        simdgroup_multiply_accumulate(cm.m[0][0], a[0], b[0], cm.m[0][0]);
        if (bc == 2) simdgroup_multiply_accumulate(cm.m[0][1], a[0], b[1], cm.m[0][1]);
    } else if (on1) {
        simdgroup_multiply_accumulate(cm.m[1][0], a[1], b[0], cm.m[1][0]);
        if (bc == 2) simdgroup_multiply_accumulate(cm.m[1][1], a[1], b[1], cm.m[1][1]);
    }
}

// gdn_gemm: C (rows x cols, row stride ldc) = (acc ? C : 0) + A1 B1 + A2 B2,
// with A1 rows x K1, B1 K1 x cols (likewise A2, B2; K2 may be 0), each read
// as gdn_tile_load reads it, and A1's zero tiles (tri1) skipped. All
// dimensions are multiples of 8. The output tiles go to the simdgroups in
// blocks of br x bc tiles, 2 x 2 where the blocks still give every
// simdgroup one (else 1 x 2, 2 x 1 or single tiles): block number x
// belongs to simdgroup x mod nsg, whose k-steps, two at a time, load br
// tiles of A and bc of B each for br*bc products, and whose br*bc sums run
// side by side, so that their latencies overlap. Each tile is summed in a
// fixed order, C's then A1 B1's over k then A2 B2's; a tile read (acc) and
// written by its own simdgroup may be C itself. BR and BC bound br and bc:
// a caller may ask for blocks of one row (or column) of tiles, fewer
// accumulators held at once; no tile's order of sums changes. With TC, C
// holds the transpose of the rows x cols result (tile (r, c) at C's (c,
// r), loaded and stored transposed): a product X^T = B^T A^T formed as
// its transpose, whose blocks pair two rows of tiles with one tile of B
// (gdn_mma_rows) where X's own would pair two columns with one of A, and
// whose every element is the same sum of the same products (a b = b a).
template <int BR = 2, int BC = 2, bool TC = false, typename PC, typename PA1, typename PB1, typename PA2, typename PB2>
static void gdn_gemm(PC C, int ldc, int rows, int cols, bool acc,
                     PA1 a1, int lda1, bool ta1, PB1 b1, int ldb1, bool tb1, int K1, int tri1,
                     PA2 a2, int lda2, bool ta2, PB2 b2, int ldb2, bool tb2, int K2,
                     int sg, int nsg) {
    const int tr = rows/8, tc = cols/8;
    const int bc = BC == 2 && tc % 2 == 0 && tr*(tc/2) >= nsg ? 2 : 1;
    const int br = BR == 2 && tr % 2 == 0 && (tr/2)*(tc/bc) >= nsg ? 2 : 1;
    const int nbc = tc/bc, nb = (tr/br)*nbc;
    for (int x = sg; x < nb; x += nsg) {
        const int r0 = (x/nbc)*8*br, c0 = (x%nbc)*8*bc;
        gdn_blk cm;
        for (int i = 0; i < 2; ++i) {
            for (int j = 0; j < 2; ++j) {
                cm.m[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
                if (acc && i < br && j < bc) gdn_tile_load(cm.m[i][j], C, ldc, TC, r0 + 8*i, c0 + 8*j);
            }
        }
        // A1's tiles (r, k0) that are not zero: k0 in [kb, ke) for row r;
        // the block's rows take the union, each tile its own.
        // Two k-steps go together, their tiles loaded before their
        // products.
        const int kb = tri1 == GDN_UPPER ? r0 : 0, ke = tri1 == GDN_LOWER ? min(K1, r0 + 8*br) : K1;
        for (int k0 = kb; k0 < ke; k0 += 16) {
            simdgroup_float8x8 am[2][2], bm[2][2];
            // A whole 2 x 2 block with both k-steps' tiles of A1 present
            // (most k-steps of the walks' products): its loads and products
            // without a guard each, the same products in the same order as
            // below.
            if (br == 2 && bc == 2 && k0 + 16 <= ke &&
                (tri1 != GDN_UPPER || k0 >= r0 + 8) && (tri1 != GDN_LOWER || k0 + 8 <= r0)) {
                for (int u = 0; u < 2; ++u) {
                    for (int i = 0; i < 2; ++i) gdn_tile_load(am[u][i], a1, lda1, ta1, r0 + 8*i, k0 + 8*u);
                    for (int j = 0; j < 2; ++j) gdn_tile_load(bm[u][j], b1, ldb1, tb1, k0 + 8*u, c0 + 8*j);
                }
                for (int u = 0; u < 2; ++u) gdn_block_mma(cm, am[u], bm[u], true, true, 2);
                continue;
            }
            bool on[2][2];
            for (int u = 0; u < 2; ++u) {
                const int k = k0 + 8*u;
                for (int i = 0; i < 2; ++i) {
                    const int r = r0 + 8*i;
                    on[u][i] = k < ke && i < br && (tri1 != GDN_UPPER || k >= r) && (tri1 != GDN_LOWER || k <= r);
                    if (on[u][i]) gdn_tile_load(am[u][i], a1, lda1, ta1, r, k);
                }
                for (int j = 0; j < 2; ++j) {
                    if (k < ke && j < bc) gdn_tile_load(bm[u][j], b1, ldb1, tb1, k, c0 + 8*j);
                }
            }
            for (int u = 0; u < 2; ++u) gdn_block_mma(cm, am[u], bm[u], on[u][0], on[u][1], bc);
        }
        for (int k0 = 0; k0 < K2; k0 += 16) {
            simdgroup_float8x8 am[2][2], bm[2][2];
            if (br == 2 && bc == 2 && k0 + 16 <= K2) { // a whole block, as for A1 B1
                for (int u = 0; u < 2; ++u) {
                    for (int i = 0; i < 2; ++i) gdn_tile_load(am[u][i], a2, lda2, ta2, r0 + 8*i, k0 + 8*u);
                    for (int j = 0; j < 2; ++j) gdn_tile_load(bm[u][j], b2, ldb2, tb2, k0 + 8*u, c0 + 8*j);
                }
                for (int u = 0; u < 2; ++u) gdn_block_mma(cm, am[u], bm[u], true, true, 2);
                continue;
            }
            for (int u = 0; u < 2; ++u) {
                const int k = k0 + 8*u;
                for (int i = 0; i < 2; ++i) {
                    if (k < K2 && i < br) gdn_tile_load(am[u][i], a2, lda2, ta2, r0 + 8*i, k);
                }
                for (int j = 0; j < 2; ++j) {
                    if (k < K2 && j < bc) gdn_tile_load(bm[u][j], b2, ldb2, tb2, k, c0 + 8*j);
                }
            }
            for (int u = 0; u < 2; ++u) {
                const bool on = k0 + 8*u < K2;
                gdn_block_mma(cm, am[u], bm[u], on, on && br == 2, bc);
            }
        }
        for (int i = 0; i < 2; ++i) {
            for (int j = 0; j < 2; ++j) {
                if (i < br && j < bc) gdn_tile_store(cm.m[i][j], C, ldc, TC, r0 + 8*i, c0 + 8*j);
            }
        }
    }
}

// gdn_gemm1 is gdn_gemm with one product.
template <int BR = 2, int BC = 2, bool TC = false, typename PC, typename PA, typename PB>
static inline void gdn_gemm1(PC C, int ldc, int rows, int cols, bool acc,
                             PA a, int lda, bool ta, PB b, int ldb, bool tb, int K, int tri, int sg, int nsg) {
    gdn_gemm<BR, BC, TC>(C, ldc, rows, cols, acc, a, lda, ta, b, ldb, tb, K, tri, a, lda, ta, b, ldb, tb, 0, sg, nsg);
}

// gdn_gemm_up: the tiles of the square n x n product A B (each read as
// gdn_tile_load reads it, K a multiple of 8) on and above its diagonal,
// stored into C, or with tr into C^T (tile (i, j) of A B at (j, i) of C,
// transposed); the tiles below are not formed. Of a diagonal tile only the
// elements above the diagonal (and on it, with diag) are stored: C's other
// triangle keeps what it holds, so that it may hold another matrix. A
// diagonal tile is a tile product too, stored whole into tile (i, i) of
// tmp (row stride ldt, an area nothing else uses meanwhile), whence the
// lanes copy those elements. (Its elements by the lanes, two a lane, each
// a loop of K fma, were kept for KDA's pair terms while they ran 0.5 ms
// slower with the tiles; with the pair terms by blocks the tiles took the
// KDA backward from 21.73 to 21.20 ms, docs/h200/kda-blocks-ab.log.)
template <typename PC, typename PA, typename PB>
static void gdn_gemm_up(PC C, int ldc, int n, PA a, int lda, bool ta, PB b, int ldb, bool tb, int K,
                        bool tr, bool diag, device float * tmp, int ldt, int sg, int nsg, ushort lane) {
    const int nt = n/8;
    for (int x = sg; x < nt*(nt + 1)/2; x += nsg) {
        // tile (i, j), i <= j, numbered row by row
        int i = 0, j = x;
        while (j >= nt - i) {
            j -= nt - i;
            ++i;
        }
        j += i;
        simdgroup_float8x8 cm = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        gdn_mma_run(cm, a, lda, ta, b, ldb, tb, 8*i, 8*j, 0, K);
        if (i < j) {
            gdn_tile_store(cm, C, ldc, tr, 8*i, 8*j);
            continue;
        }
        device float * t = tmp + 8*i*ldt + 8*i;
        simdgroup_store(cm, t, ldt);
        // Orders: the tile's store before the lanes read its elements.
        simdgroup_barrier(mem_flags::mem_device);
        for (int e = lane; e < 64; e += GDN_NW) {
            const int r = e / 8, c = e % 8;
            if (c < r || (c == r && !diag)) continue;
            C[tr ? (8*i + c)*ldc + 8*i + r : (8*i + r)*ldc + 8*i + c] = t[r*ldt + c];
        }
        // Orders: the lanes' reads of the tile before a later product of
        // this simdgroup stores over it.
        simdgroup_barrier(mem_flags::mem_device);
    }
}

// gdn_gemm_tg: C = (acc ? C : 0) + A B, C [64][n] (row stride ldc), A
// [64][K] (lda) and B [K][n] (ldb), all in device memory, n a multiple of 64
// and K of GDN_SBK, A full or lower triangular (tri: GDN_FULL, GDN_LOWER,
// whose zero tiles it skips), by every simdgroup of a threadgroup of 256
// threads together (GDN_TG_STAGED says when a call may take it). Where
// gdn_gemm's simdgroups each load their tiles from device memory at every
// k-step, the threadgroup stages A and B through threadgroup memory (sh,
// two buffers of GDN_STAGE floats), a slice of GDN_SBK columns of A and
// rows of B at a time: every thread loads four elements of each of the
// slice two steps ahead into registers while the simdgroups form the
// products of this one from one buffer, then stores the next slice's
// (loaded a step earlier) into the other, one barrier a slice. (With one
// slice in flight, its loads covered by one step's products, 17% of the
// scalar pair terms' samples waited on them at the store; two in flight
// took the scalar pair terms from 5.43 to 5.26 ms at locked clocks on an
// H100, 27B shape, T 8192: docs/h200/tg-two-slices-ab.log.)
// The output goes in panels of 16 BJ columns, each simdgroup a block of 2
// x BJ tiles of the panel (two A tiles and BJ B tiles a k-step for 2 BJ
// products; BJ 2 or 4). Each tile's sum is gdn_gemm's: C's, then the
// products over k in increasing order.
#define GDN_SBK 16                                  // columns of A (rows of B) a slice
#define GDN_SLA (GDN_SBK + 4)                       // the staged A's row stride
#define GDN_SLB (64 + 4)                            // the staged B's row stride (BJ 4; BJ 2 takes 16 BJ + 4)
#define GDN_STAGE (64*GDN_SLA + GDN_SBK*GDN_SLB)    // floats a buffer
#define GDN_TG_STAGED(rows, n, K, nthr) ((rows) == 64 && (n) % 64 == 0 && (K) % GDN_SBK == 0 && (nthr) == 256)
// One slice step of gdn_gemm_tg: loads slice s + 2 into fa/fb (the
// registers that held slice s, stored two steps ago), forms the products
// of slice s from cur, then stores slice s + 1 (in sa/sb since the step
// before) into nxt.
template <int BJ>
static inline void gdn_tg_step(thread simdgroup_float8x8 (&cm)[2][BJ], device const float * a, int lda,
                               device const float * b, int ldb, int c0, int s, int ns, int tri,
                               threadgroup float * sh, int bi, int bj, int ar, int ac, int brw, int bc,
                               thread float * fa, thread float * fb, thread const float * sa, thread const float * sb) {
    const int lb = 16*BJ + 4;
    threadgroup float * cur = sh + (s % 2)*GDN_STAGE;
    threadgroup float * nxt = sh + ((s + 1) % 2)*GDN_STAGE;
    if (s + 2 < ns) {
        const int k2 = (s + 2)*GDN_SBK;
        for (int u = 0; u < 4; ++u) fa[u] = a[ar*lda + k2 + ac + u];
        for (int u = 0; u < BJ; ++u) fb[u] = b[(k2 + brw)*ldb + c0 + bc + u];
    }
    for (int kk = 0; kk < GDN_SBK; kk += 8) {
        // A's tile (r, k) is zero for k > r where it is lower
        // triangular: the block's rows take part while k <= r.
        const int k = s*GDN_SBK + kk;
        const bool on0 = tri != GDN_LOWER || k <= 16*bi, on1 = tri != GDN_LOWER || k <= 16*bi + 8;
        if (!on1) continue; // neither row (on0 implies on1)
        simdgroup_float8x8 am[2], bm[BJ];
        for (int i = 0; i < 2; ++i) simdgroup_load(am[i], cur + (16*bi + 8*i)*GDN_SLA + kk, GDN_SLA);
        for (int j = 0; j < BJ; ++j) simdgroup_load(bm[j], cur + 64*GDN_SLA + kk*lb + 8*BJ*bj + 8*j, lb);
        for (int j = 0; j < BJ; ++j) {
            if (on0) {
                gdn_mma_rows(cm[0][j], cm[1][j], am[0], am[1], bm[j]);
            } else {
                simdgroup_multiply_accumulate(cm[1][j], am[1], bm[j], cm[1][j]);
            }
        }
    }
    if (s + 1 < ns) {
        for (int u = 0; u < 4; ++u) nxt[ar*GDN_SLA + ac + u] = sa[u];
        for (int u = 0; u < BJ; ++u) nxt[64*GDN_SLA + brw*lb + bc + u] = sb[u];
    }
    // Orders: the next slice's stores before the simdgroups load its
    // tiles, and this slice's tile loads before the step after the next
    // stores over this buffer.
    threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_tgslice
}

template <int BJ>
static void gdn_gemm_tg(device float * C, int ldc, int n, bool acc, device const float * a, int lda,
                        device const float * b, int ldb, int K, int tri, threadgroup float * sh, int tid, int sg) {
    const int ns = K / GDN_SBK;
    const int pw = 16*BJ, lb = pw + 4;                // the panel's width, the staged B's row stride
    const int bi = sg / 2, bj = sg % 2;               // tile rows 2bi, 2bi + 1; tile columns BJ bj to BJ bj + BJ - 1
    const int ar = tid / 4, ac = 4*(tid % 4);         // this thread's row and columns of an A slice
    const int brw = tid / 16, bc = BJ*(tid % 16);     // and of a B slice
    for (int c0 = 0; c0 < n; c0 += pw) {
        simdgroup_float8x8 cm[2][BJ];
        for (int i = 0; i < 2; ++i) {
            for (int j = 0; j < BJ; ++j) {
                cm[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
                if (acc) simdgroup_load(cm[i][j], C + (16*bi + 8*i)*ldc + c0 + 8*BJ*bj + 8*j, ldc);
            }
        }
        // Two slices in flight: a slice's loads are issued two steps
        // before its stores (into the registers of the slice stored at
        // the step before), so that two steps' products cover them.
        float ra0[4], rb0[BJ], ra1[4], rb1[BJ];
        for (int u = 0; u < 4; ++u) ra0[u] = a[ar*lda + ac + u];
        for (int u = 0; u < BJ; ++u) rb0[u] = b[brw*ldb + c0 + bc + u];
        if (ns > 1) {
            for (int u = 0; u < 4; ++u) ra1[u] = a[ar*lda + GDN_SBK + ac + u];
            for (int u = 0; u < BJ; ++u) rb1[u] = b[(GDN_SBK + brw)*ldb + c0 + bc + u];
        }
        for (int u = 0; u < 4; ++u) sh[ar*GDN_SLA + ac + u] = ra0[u];
        for (int u = 0; u < BJ; ++u) sh[64*GDN_SLA + brw*lb + bc + u] = rb0[u];
        // Orders: the first slice's stores before the simdgroups load its
        // tiles (and the previous panel's or call's last reads of buffer 0,
        // ordered by its last barrier, before the stores).
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_tgfirst
        for (int s = 0; s < ns; s += 2) {
            gdn_tg_step<BJ>(cm, a, lda, b, ldb, c0, s, ns, tri, sh, bi, bj, ar, ac, brw, bc, ra0, rb0, ra1, rb1);
            if (s + 1 < ns) {
                gdn_tg_step<BJ>(cm, a, lda, b, ldb, c0, s + 1, ns, tri, sh, bi, bj, ar, ac, brw, bc, ra1, rb1, ra0, rb0);
            }
        }
        for (int i = 0; i < 2; ++i) {
            for (int j = 0; j < BJ; ++j) simdgroup_store(cm[i][j], C + (16*bi + 8*i)*ldc + c0 + 8*BJ*bj + 8*j, ldc);
        }
    }
}

// The thread of a threadgroup and the (head, seq) pair it runs: value head
// h (of the whole call, as the outputs index it), the group's y-th, and
// its chunk areas in the scratch.
struct gdn_ct {
    int tid, nthr, sg, nsg;
    int h, s, hq, sq, pair, area;
};

// gdn_group_head is the value head of the group's y-th: q/k head hq0 +
// y / rep and its (y mod rep)-th value head, so that the value heads of
// one q/k head are the group's neighbours, whatever the head mapping.
static inline int gdn_group_head(constant gdn_chunk_args & a, int y) {
    const int hq = a.hq0 + y / a.rep, m = y % a.rep;
    return a.interleave ? hq*a.rep + m : hq + a.hk*m;
}

static inline gdn_ct gdn_chunk_thread(constant gdn_chunk_args & a, uint3 tgpig, ushort3 tpitg, ushort3 ntg, ushort sgitg) {
    gdn_ct x;
    x.tid = tpitg.x;
    x.nthr = ntg.x;
    x.sg = sgitg;
    x.nsg = ntg.x / GDN_NW;
    x.h = gdn_group_head(a, tgpig.y);
    x.s = tgpig.z;
    x.hq = a.interleave ? x.h / a.rep : x.h % a.hk;
    x.sq = x.s / a.seq_rep;
    x.pair = x.s*a.hv + x.h;
    x.area = x.s*a.hkg*a.rep + tgpig.y;
    return x;
}

// gdn_chunk_c is the backward's c = scale dy of chunk c of x's (head, seq):
// [Lp][sv], zero from the chunk's n rows, as prep gathered it into the chunk
// area before; the host lays it out in src for every value head at once,
// so that the areas, which a group of value heads holds, do not.
static inline device const float * gdn_chunk_c(constant gdn_chunk_args & a, device const float * src, gdn_ct x, int c) {
    return src + a.c_off + ((x.s*a.hv + x.h)*a.nc + c)*a.Lp*a.sv;
}

// gdn_pair_gamma is the scalar gate's Γ_rs = a_{s+1} ... a_r for s < r
// from prep's tile factors: within a diagonal tile (r and s in one tile of
// 8 rows) the running product itself; below it, with R0 the first row of
// r's tile and e the last of s's,
//   Γ_rs = Γ_{r,R0-1} T_RS Γ_{e,s},   T_RS = Γ_{R0-1,e},
// three factors of at most 8, 48 and 7 decays, each a running product,
// flushed as the reference flushes one (a value below the smallest normal
// float is zero). Rounded three times where the running product rounds at
// every step, it is as close to the exact product; it is not the same
// bits.
static inline float gdn_pair_gamma(threadgroup const float * sdec, threadgroup const float * salp,
                                   threadgroup const float * sgt, threadgroup const float * stt, int r, int s) {
    if ((r >> 3) == (s >> 3)) {
        float g = 1.0f;
        for (int u = s + 1; u <= r; ++u) g = gdn_flush(g*sdec[u]);
        return g;
    }
    return gdn_flush(gdn_flush(salp[r]*stt[(r >> 3)*8 + (s >> 3)])*sgt[s]);
}

// gdn_prep_decays: KDA's decays in prep (the scalar gate's are in the
// gather): kd_r = Λ_r ⊙ k_r and qd_r = Λ_r ⊙ q_r with Λ_r = a_0 ... a_r,
// lam = Λ_{n-1}, and kl_s = Γ_{n-1,s} ⊙ k_s with Γ_{n-1,s} = a_{s+1} ...
// a_{n-1}, each a running product. Key channel i's forward products (kd,
// qd, lam) are one thread's and its backward ones (kl) another's, so that
// the two chains run side by side.
static inline void gdn_prep_decays(gdn_ca w, int sk, int Lp, int gw, int n, int tid, int nthr) {
    for (int e = tid; e < 2*sk; e += nthr) {
        const int i = e % sk;
        // GDN_GB rows' loads before their stores (see the gather; Lp is a
        // multiple of 8).
        float g = 1.0f;
        if (e < sk) {
            for (int r0 = 0; r0 < Lp; r0 += GDN_GB) {
                float dv[GDN_GB], kv[GDN_GB], qv[GDN_GB];
                for (int u = 0; u < GDN_GB; ++u) {
                    const int r = r0 + u, f = r*sk + i;
                    dv[u] = r < n ? w.dec[r*gw + i] : 0.0f;
                    kv[u] = r < n ? w.k[f] : 0.0f;
                    qv[u] = r < n ? w.q[f] : 0.0f;
                }
                for (int u = 0; u < GDN_GB; ++u) {
                    const int r = r0 + u, f = r*sk + i;
                    if (r < n) {
                        g = gdn_flush(g*dv[u]);
                        w.kd[f] = g*kv[u];
                        w.qd[f] = g*qv[u];
                    } else {
                        w.kd[f] = 0.0f;
                        w.qd[f] = 0.0f;
                    }
                }
            }
            w.lam[i] = g;
        } else {
            for (int s0 = Lp - 1; s0 >= 0; s0 -= GDN_GB) {
                float dv[GDN_GB], kv[GDN_GB];
                for (int u = 0; u < GDN_GB; ++u) {
                    const int s = s0 - u, f = s*sk + i;
                    dv[u] = s < n ? w.dec[s*gw + i] : 0.0f;
                    kv[u] = s < n ? w.k[f] : 0.0f;
                }
                for (int u = 0; u < GDN_GB; ++u) {
                    const int s = s0 - u, f = s*sk + i;
                    if (s < n) {
                        w.kl[f] = g*kv[u];
                        g = gdn_flush(g*dv[u]);
                    } else {
                        w.kl[f] = 0.0f;
                    }
                }
            }
        }
    }
}

// gdn_kda_cols: KDA prep's factors and its pair sums in the tiles below the
// diagonal (see gdn_chunk_prep): lk, lq and tt in the scratch, wk (the
// column factors, row stride ldw, its first wrows rows written) in
// threadgroup memory where GDN_KCOLS_TG says they fit, else in the scratch
// (wn). Threadgroup or scratch, the products and scalings are the same,
// in the same order.
template <typename PW>
static void gdn_kda_cols(gdn_ca w, PW wk, int ldw, int wrows, int sk, int gw, int Lp, int n, int nt, gdn_ct x,
                         ushort tiisg) {
    device float * lk = w.kl; // k_r ⊙ Γ_{r,e}, e = R0 - 1 the row above r's tile
    device float * lq = w.qd; // q_r ⊙ Γ_{r,e}
    // k_s ⊙ Γ_{e,s} ⊙ T_{S+1} ... T_{S+d-1} for the product of tile (S +
    // d, S), e the last row of s's tile
    device float * tt = w.kd; // [nt][sk]: T_S, the product of tile S's decays
    // tile R's factors, key channel i of one thread, rows from n to the
    // tile's end zero
    // (the tile's eight rows loaded before the stores, as in the
    // gather)
    for (int e = x.tid; e < nt*sk; e += x.nthr) {
        const int R = e / sk, i = e % sk, r0 = 8*R, r1 = min(r0 + 8, n);
        float dv[8], kv[8], qv[8];
        for (int h = 0; h < 8; ++h) {
            const int r = r0 + h;
            dv[h] = r < r1 ? w.dec[r*gw + i] : 0.0f;
            kv[h] = r < r1 ? w.k[r*sk + i] : 0.0f;
            qv[h] = r < r1 ? w.q[r*sk + i] : 0.0f;
        }
        float g = 1.0f;
        for (int h = 0; h < 8; ++h) {
            const int r = r0 + h;
            if (r >= r1) continue;
            g = gdn_flush(g*dv[h]);
            lk[r*sk + i] = g*kv[h];
            lq[r*sk + i] = g*qv[h];
        }
        tt[R*sk + i] = g;
        g = 1.0f;
        for (int h = 7; h >= 0; --h) {
            const int r = r0 + h;
            if (r >= r1) continue;
            if (r < wrows) wk[r*ldw + i] = g*kv[h];
            g = gdn_flush(g*dv[h]);
        }
        for (int r = r1; r < r0 + 8; ++r) {
            lk[r*sk + i] = 0.0f;
            lq[r*sk + i] = 0.0f;
            if (r < wrows) wk[r*ldw + i] = 0.0f;
        }
    }
    // Orders: the factors (each channel of a tile by one thread) before
    // the products read them by tiles.
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup); // barrier:chunk_kfactors

    // The tiles below the diagonal tiles by columns: column S of
    // simdgroup S mod nsg, from tile (S + 1, S) down, S's rows taking
    // T_{S+d} after the product of tile (S + d, S). A column's rows of wk
    // are its simdgroup's alone (the rows of R, lk and lq, and tt are
    // read only), so that the steps need no threadgroup barrier: where
    // every step d ran tile (R, R - d) of simdgroup R mod nsg, then
    // all threads scaled the rows the next step reads, with a barrier
    // after each, that scaling alone (its index divided by 8 S_k and
    // S_k per element) took 14% of KDA prep's samples (Nsight Compute's
    // source counters, an H100, 27B shape); by columns, KDA's prep went
    // from 3.92 to 3.81 ms at locked clocks. The products and the
    // scalings are those of the steps, in the same order, so the bits
    // are.
    for (int S = x.sg; S + 1 < nt; S += x.nsg) {
        PW ws = wk + 8*S*ldw;
        for (int R = S + 1; R < nt; ++R) {
            simdgroup_float8x8 ca = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            simdgroup_float8x8 cp = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            gdn_mma_run_rows(ca, cp, lk, lq, sk, false, wk, ldw, true, 8*R, 8*S, 0, sk);
            simdgroup_store(ca, w.A + 8*R*Lp + 8*S, Lp);
            simdgroup_store(cp, w.P + 8*R*Lp + 8*S, Lp);
            if (R + 1 == nt) break;
            // Orders: the product's reads of S's rows before the lanes
            // scale them.
            simdgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
            // A lane's channels, the tile's eight rows loaded before
            // their stores.
            for (int i = tiisg; i < sk; i += GDN_NW) {
                const float tv = tt[R*sk + i];
                float wv[8];
                for (int h = 0; h < 8; ++h) wv[h] = ws[h*ldw + i];
                for (int h = 0; h < 8; ++h) ws[h*ldw + i] = wv[h]*tv;
            }
            // Orders: the scaled rows before the next product reads
            // them.
            simdgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        }
    }
}

// gdn_kda_diag forms KDA's pair sums within a diagonal tile, for its
// columns [S0, S0 + NS): A_rs = k_r . (Γ_rs ⊙ k_s) for s < r and P_rs =
// q_r . (Γ_rs ⊙ k_s) for s <= r, rows r0 + h of the chunk for h < nr. Key
// channel i of lane i mod 32, Γ_rs a running product per channel down
// the column, each lane's share over its channels summed by simd_sum. A
// lane holds the tile's eight rows of k, q and the decays of one channel
// at a time, and the pairs' sums over its channels: where each column's
// running products loaded the rows below it again for every pair and
// waited on them (11% of KDA prep's samples, Nsight Compute's source
// counters, an H100, 27B shape), a run's rows are loaded once a channel.
// The columns go in runs of NS for the registers (64 sums for the whole
// tile); the products and sums are those of a pair at a time, in the same
// order. KDA's prep went from 3.81 to 3.69 ms at locked clocks (an H100,
// docs/h200/kda-diag-regs-ab.log), though it spills at prep's 80
// registers; the rows as the outer loop, with fewer spills, and other
// runs were slower (docs/h200/kda-diag-rows-ab.log, dbeta-runs-ab.log).
template <int S0, int NS>
static inline void gdn_kda_diag(gdn_ca w, int sk, int gw, int Lp, int r0, int nr, ushort tiisg) {
    // the run's pairs, column s's rows s (P alone) to 7 from the
    // (s - S0)*(8 - S0) - (s - S0)*(s - S0 - 1)/2-th on
    constexpr int NP = NS*(8 - S0) - NS*(NS - 1)/2;
    float pa[NP], pp[NP];
    for (int e = 0; e < NP; ++e) {
        pa[e] = 0.0f;
        pp[e] = 0.0f;
    }
    for (int i = tiisg; i < sk; i += GDN_NW) {
        float ks[NS], gs[NS];
        for (int j = 0; j < NS; ++j) {
            const int s = S0 + j, e = j*(8 - S0) - j*(j - 1)/2;
            const bool ok = s < nr;
            ks[j] = ok ? w.k[(r0 + s)*sk + i] : 0.0f;
            const float qv = ok ? w.q[(r0 + s)*sk + i] : 0.0f;
            pp[e] = fma(qv, ks[j], pp[e]);
            gs[j] = 1.0f;
        }
        for (int r = S0 + 1; r < 8; ++r) {
            const bool ok = r < nr;
            const float kv = ok ? w.k[(r0 + r)*sk + i] : 0.0f;
            const float qv = ok ? w.q[(r0 + r)*sk + i] : 0.0f;
            const float dv = ok ? w.dec[(r0 + r)*gw + i] : 0.0f;
            for (int j = 0; j < NS; ++j) {
                const int s = S0 + j, e = j*(8 - S0) - j*(j - 1)/2 + r - s;
                if (s >= r) continue;
                gs[j] = gdn_flush(gs[j]*dv);
                const float gk = gs[j]*ks[j];
                pa[e] = fma(kv, gk, pa[e]);
                pp[e] = fma(qv, gk, pp[e]);
            }
        }
    }
    int e = 0;
    for (int s = S0; s < S0 + NS; ++s) {
        for (int r = s; r < 8; ++r) {
            const float av = r > s ? simd_sum(pa[e]) : 0.0f;
            const float pv = simd_sum(pp[e]);
            if (tiisg == 0 && r < nr) {
                if (r > s) w.A[(r0 + r)*Lp + r0 + s] = av;
                w.P[(r0 + r)*Lp + r0 + s] = pv;
            }
            ++e;
        }
    }
}

// gdn_gather_qkg loads a thread's GDN_GB elements, from step m0, of the
// chunk's [Lp][sk] rows of q, k and (gate) exp(g): key channel kr.i of rows
// kr.r0 + m kr.rs (gdn_walk_rows), through the inputs' column pointers pq,
// pk and pg (gdn_col), zero from row n (and every g where gate is false).
// Prep's gather and KDA's pair terms, which gather the rows again, both
// load them here, so that both have the same values.
static inline void gdn_gather_qkg(constant gdn_chunk_args & args, gdn_rows kr, device const float * pq,
                                  device const float * pk, device const float * pg, bool gate, int t0, int n,
                                  int m0, thread float * qv, thread float * kv, thread float * gv) {
    for (int u = 0; u < GDN_GB; ++u) {
        const int r = kr.r0 + (m0 + u)*kr.rs, t = t0 + r;
        const bool ok = kr.on && r < n;
        qv[u] = ok ? pq[t*args.q.nb[2]] : 0.0f;
        kv[u] = ok ? pk[t*args.k.nb[2]] : 0.0f;
        gv[u] = gate && ok ? exp(pg[t*args.g.nb[2]]) : 0.0f;
    }
}

// gdn_chunk_prep prepares chunk tgpig.x of one (head, seq): the gathered
// rows, the decays, the pair matrices and the WY factors. BWD (args.bwd)
// is a constant of each instance, gdn_chunk_prep for the forward and
// gdn_chunk_prepb for the backward, as for gdn_chunk_fwd (below).
template <bool BWD>
kernel void gdn_chunk_prep(
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
    const int sk = args.sk, sv = args.sv, Lp = args.Lp, gw = args.gw;
    const gdn_ca w = gdn_chunk_area(args, scr, x.area, tgpig.x);
    const int2 sp = gdn_chunk_span(args, tgpig.x);
    const int t0 = sp.x, n = sp.y - sp.x;
    // A backward after Backend.ForwardKeep finds A, P and X as the
    // forward's prep left them (the same lines below, on the same inputs,
    // so the same bits) and forms none of them again: not the zeros, the
    // pair products, their decays or the solve.
    const bool kept = BWD && args.kept == 2;

    // The scalar gate's decays before the rows: a_r = exp(g_r) in
    // threadgroup memory, then Λ_r = a_0 ... a_r and Γ_{n-1,s} = a_{s+1}
    // ... a_{n-1}, each a running product of one thread (in two
    // simdgroups, side by side), so that the gather below scales k and q
    // as it stores them (kd, qd and the forward's kl; the backward's ell):
    // where 256 threads each ran a channel's chain over the rows it had
    // gathered, loading them back from the scratch, the chains took 13% of
    // the scalar forward's prep and 7% of the backward's (Nsight Compute's
    // source counters, an H100, 27B shape). KDA's decays are per channel
    // and come after its pair terms (gdn_prep_decays).
    threadgroup float * sdec = shmem;        // a_r, [Lp]
    threadgroup float * slam = sdec + Lp;    // Λ_r, [Lp]
    threadgroup float * sgam = slam + Lp;    // Γ_{n-1,s}, [Lp], zero from n
    // The pairs' decays by tiles (gdn_pair_gamma): Γ_{r,R0-1} for row r
    // of tile R (rows R0 to R0 + 7), Γ_{e,s} for s of tile S (e its last
    // row), and the tiles' T_RS = Γ_{R0-1,e}, [Lp/8][8].
    threadgroup float * salp = sgam + Lp;    // Γ_{r,R0-1}, [Lp]
    threadgroup float * sgt = salp + Lp;     // Γ_{e,s}, [Lp]
    threadgroup float * stt = sgt + Lp;      // T_RS, [Lp/8][8]
    for (int r = x.tid; r < Lp; r += x.nthr) {
        const bool ok = r < n;
        w.beta[r] = ok ? gdn_at(src, args.beta, 0, x.h, t0 + r, x.s) : 0.0f;
        if (gw == 1) {
            const float a = ok ? exp(gdn_at(src, args.g, 0, x.h, t0 + r, x.s)) : 0.0f;
            w.dec[r] = a;
            sdec[r] = a;
        }
    }
    if (gw == 1) {
        // Orders: the decays (each by one thread) before the chains read
        // them.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_sdec
        if (x.tid == 0) {
            float g = 1.0f;
            for (int r0 = 0; r0 < n; r0 += GDN_GB) {
                float a[GDN_GB];
                for (int u = 0; u < GDN_GB; ++u) a[u] = r0 + u < n ? sdec[r0 + u] : 1.0f;
                for (int u = 0; u < GDN_GB; ++u) {
                    if (r0 + u >= n) continue;
                    g = gdn_flush(g*a[u]);
                    slam[r0 + u] = g;
                }
            }
        } else if (x.tid == GDN_NW) {
            float g = 1.0f;
            for (int s0 = Lp - 1; s0 >= 0; s0 -= GDN_GB) {
                float a[GDN_GB];
                for (int u = 0; u < GDN_GB; ++u) a[u] = s0 - u < n ? sdec[s0 - u] : 1.0f;
                for (int u = 0; u < GDN_GB; ++u) {
                    const int s1 = s0 - u;
                    sgam[s1] = s1 < n ? g : 0.0f;
                    if (s1 < n) g = gdn_flush(g*a[u]);
                }
            }
        }
        // The tile factors, each a running product of one thread over at
        // most 48 decays (the chains above run 64); the pairs' scaling
        // alone reads them.
        for (int e = x.tid; !kept && e < 2*Lp + Lp; e += x.nthr) {
            float g = 1.0f;
            if (e < Lp) {
                for (int u = e & ~7; u <= e; ++u) g = gdn_flush(g*sdec[u]);
                salp[e] = g;
            } else if (e < 2*Lp) {
                const int s = e - Lp;
                for (int u = s + 1; u <= (s | 7); ++u) g = gdn_flush(g*sdec[u]);
                sgt[s] = g;
            } else {
                const int R = (e - 2*Lp) / 8, S = (e - 2*Lp) % 8;
                for (int u = 8*S + 8; u < 8*R; ++u) g = gdn_flush(g*sdec[u]);
                stt[R*8 + S] = g;
            }
        }
        // Orders: Λ, Γ_{n-1,s} and the tile factors (each by one thread)
        // before the gather and the pairs' scaling read them.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_schain
    }
    // The chunk's rows, zero from n to Lp: q, k, v and KDA's exp(g) (the
    // backward's c = scale dy the host laid out), and for the scalar gate
    // kd_r = Λ_r k_r, qd_r = Λ_r q_r and the forward's kl_s = Γ_{n-1,s} k_s
    // (the backward's kl is k, its rows' Γ_{n-1,s} in ell). A and P start
    // at zero. A thread loads GDN_GB elements of each before it stores any:
    // the compiler keeps a load of src behind an earlier store to the
    // scratch, which may alias it, so that a loop of one element a step
    // waits on memory every step (on the H200, the scalar forward 5.31 to
    // 4.90 ms with the decays, docs/h200/loads-ab.log).
    // v's elements ride with q's and k's in one loop, each thread's loads
    // of all of them before its stores, so that a step waits on memory once
    // where the two loops waited twice (the stores of q and v behind their
    // loads held 15% of the scalar prep's stall samples,
    // docs/h200/ncu-source/summary-57bf35f.log). Element e = tid + m nthr of
    // a [Lp][sk] array is channel tid mod sk of row tid / sk + m (nthr /
    // sk), as sk is a power of two up to nthr (gdn_walk_rows): a thread's
    // channel and its inputs' row pointers are fixed, and a step takes no
    // division and no index products but the row's (the gather held 27% of
    // the scalar prep's instructions, by the same profile).
    const bool skl = gw == 1 && !BWD;
    const gdn_rows kr = gdn_walk_rows(x.tid, x.nthr, sk), vr = gdn_walk_rows(x.tid, x.nthr, sv);
    device const float * pq = gdn_col(src, args.q, kr.i, x.hq, x.sq);
    device const float * pk = gdn_col(src, args.k, kr.i, x.hq, x.sq);
    device const float * pg = gdn_col(src, args.g, kr.i, x.h, x.s);
    device const float * pv = gdn_col(src, args.v, vr.i, x.h, x.s);
    const int nqk = Lp*sk, nv = Lp*sv;
    for (int m0 = 0; m0*x.nthr < max(nqk, nv); m0 += GDN_GB) {
        float qv[GDN_GB], kv[GDN_GB], gv[GDN_GB], vv[GDN_GB];
        gdn_gather_qkg(args, kr, pq, pk, pg, gw > 1, t0, n, m0, qv, kv, gv);
        for (int u = 0; u < GDN_GB; ++u) {
            const int rv = vr.r0 + (m0 + u)*vr.rs;
            vv[u] = vr.on && rv < n ? pv[(t0 + rv)*args.v.nb[2]] : 0.0f;
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = x.tid + (m0 + u)*x.nthr, r = kr.r0 + (m0 + u)*kr.rs;
            if (e < nv) w.v[e] = vv[u];
            if (e >= nqk) continue;
            w.q[e] = qv[u];
            w.k[e] = kv[u];
            if (gw > 1) {
                w.dec[e] = gv[u];
            } else {
                const float l = r < n ? slam[r] : 0.0f;
                w.kd[e] = r < n ? l*kv[u] : 0.0f;
                w.qd[e] = r < n ? l*qv[u] : 0.0f;
                if (skl) w.kl[e] = r < n ? sgam[r]*kv[u] : 0.0f;
            }
        }
    }
    if (gw == 1) {
        for (int i = x.tid; i < sk; i += x.nthr) w.lam[i] = n > 0 ? slam[n - 1] : 1.0f;
        for (int r = x.tid; BWD && r < Lp; r += x.nthr) w.ell[r] = sgam[r];
    }
    for (int e = x.tid; !kept && e < Lp*Lp; e += x.nthr) {
        w.A[e] = 0.0f;
        w.P[e] = 0.0f;
    }
    // Orders: the gathered rows and the zeroed A and P (written by every
    // thread above) before the decays and pair terms read them.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_gather

    // (The scalar gate's decays are in the rows above. KDA's come after its
    // pair terms, whose tiles hold their factors in kl, qd, wn and kd until
    // then.)
    // Pair terms: A_rs = k_r . (Γ_rs ⊙ k_s) for s < r, P_rs = q_r . (Γ_rs ⊙
    // k_s) for s <= r, with Γ_rs = a_{s+1} ... a_r.
    if (gw == 1 && !kept) {
        // The scalar gate: Γ_rs is one number per pair, so A = Γ ⊙ (k k^T)
        // below the diagonal and P = Γ ⊙ (q k^T) on and below it: the tiles
        // of k k^T and k q^T on and above their diagonals, stored
        // transposed, then each element scaled by its Γ_rs from the tile
        // factors (gdn_pair_gamma), GDN_GB elements of a thread loaded
        // before their stores. (A running product down each column, in
        // runs of a thread, read and wrote A and P a column at a time, each
        // lane of a simdgroup in a row of its own.)
        gdn_gemm_up(w.A, Lp, Lp, w.k, sk, false, w.k, sk, true, sk, true, false, w.X, Lp, x.sg, x.nsg, tiisg);
        gdn_gemm_up(w.P, Lp, Lp, w.k, sk, false, w.q, sk, true, sk, true, true, w.X, Lp, x.sg, x.nsg, tiisg);
        // Orders: the products' tiles before the threads scale them.
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_pairsg
        for (int e0 = x.tid; e0 < n*Lp; e0 += GDN_GB*x.nthr) {
            float av[GDN_GB], pv[GDN_GB], gv[GDN_GB];
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = e0 + u*x.nthr, r = e / Lp, s = e % Lp;
                const bool ok = e < n*Lp && s < r;
                gv[u] = ok ? gdn_pair_gamma(sdec, salp, sgt, stt, r, s) : 1.0f;
                av[u] = ok ? w.A[e] : 0.0f;
                pv[u] = ok ? w.P[e] : 0.0f;
            }
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = e0 + u*x.nthr, r = e / Lp, s = e % Lp;
                if (e < n*Lp && s < r) {
                    w.A[e] = av[u]*gv[u];
                    w.P[e] = pv[u]*gv[u];
                }
            }
        }
    }
    // KDA: Γ_rs is a vector per pair, and the pair sums go by 8x8 tiles.
    // For a tile R below a tile S, with e the last row of S and r in R, s
    // in S, Γ_rs = Γ_re ⊙ Γ_es, so that
    //   A_RS = (k_R ⊙ Γ_{R,e}) (k_S ⊙ Γ_{e,S})^T,
    // and P_RS likewise with q_R: products over the key channels on the
    // simdgroup matrices, every factor a product of decays (no division,
    // no exponent of a difference). Γ_{r,e} is a running product over R's
    // rows up to the tile just above R (e = R0 - 1) times the whole decays
    // T_U of the tiles U between S and R; those go to S's factor, which A
    // and P share: S's rows take T_{S+d} after the product of tile (S + d,
    // S). Until the decays below, kl, qd, kd and wn (or threadgroup
    // memory, gdn_kda_cols) hold these factors.
    // The products scale k by the decays without gdn's flush (which is of
    // the decays alone): a value below the smallest normal float stays
    // subnormal where the reference's decay would be zero.
    if (gw > 1) {
        const int nt = (n + 7)/8; // the tiles with rows of the chunk
        // The factors, and the tiles below the diagonal (gdn_kda_cols):
        // wk in threadgroup memory but for the last tile's rows, which no
        // column reads, where they fit; else all of it in wn.
        if (kept) {
            // (the factors and tiles are the forward's, in A and P)
        } else if (GDN_KCOLS_TG(Lp, sk)) {
            gdn_kda_cols(w, shmem, sk + GDN_PADK, 8*(nt - 1), sk, gw, Lp, n, nt, x, tiisg);
        } else {
            gdn_kda_cols(w, w.wn, sk, 8*nt, sk, gw, Lp, n, nt, x, tiisg);
        }
        // Then the diagonal tiles: tile R of simdgroup R mod nsg, its
        // columns in runs (gdn_kda_diag), of one column each for columns 0
        // to 3 and of two for 4 to 7.
        for (int R = x.sg; !kept && R < nt; R += x.nsg) {
            const int r0 = 8*R, nr = min(8, n - r0);
            gdn_kda_diag<0, 1>(w, sk, gw, Lp, r0, nr, tiisg);
            gdn_kda_diag<1, 1>(w, sk, gw, Lp, r0, nr, tiisg);
            gdn_kda_diag<2, 1>(w, sk, gw, Lp, r0, nr, tiisg);
            gdn_kda_diag<3, 1>(w, sk, gw, Lp, r0, nr, tiisg);
            gdn_kda_diag<4, 2>(w, sk, gw, Lp, r0, nr, tiisg);
            gdn_kda_diag<6, 2>(w, sk, gw, Lp, r0, nr, tiisg);
        }
        // Orders: every simdgroup's reads of the factors (kl, qd and kd)
        // before the decays overwrite them.
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_kcols
        gdn_prep_decays(w, sk, Lp, gw, n, x.tid, x.nthr);
    }
    // Orders: A (by columns, tiles or pairs) before the solve reads it by
    // rows, and kd (each channel by one thread) before the products.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_pairs

    // X = -R = -(I + B)^-1 with B = A diag(beta), by 8x8 blocks. With
    // (I + B) R = I, a block of R below the diagonal is R_IJ = -R_II
    // sum_{J<=K<I} B_IK R_KJ, so that
    //   X_IJ = X_II sum_{J<=K<I} B_IK X_KJ,
    // whose operands are the diagonal blocks and the blocks above in
    // column J. The diagonal blocks first, by forward substitution within
    // each, column j of one thread: X_r = -e_r - sum_{j<=s<r} B_rs X_s
    // (zero for r < j and for the padding rows and columns); with them,
    // B_IK for K < I goes transposed into X's tile (K, I), above the
    // diagonal, which the products below read and nothing else does.
    // The column's values stay in registers (xc, row r0 + h): loaded back
    // from the scratch, each row waited on the store of the one above it.
    for (int j = x.tid; !kept && j < Lp; j += x.nthr) {
        const int r0 = j & ~7, jj = j - r0;
        float xc[8];
        for (int h = 0; h < 8; ++h) {
            const int r = r0 + h;
            float xv = 0.0f;
            if (r < n && jj <= h) {
                xv = h == jj ? -1.0f : 0.0f;
                for (int m = 0; m < 8; ++m) {
                    if (m >= jj && m < h) xv = fma(-w.A[r*Lp + r0 + m]*w.beta[r0 + m], xc[m], xv);
                }
            }
            xc[h] = xv;
            w.X[r*Lp + j] = xv;
        }
    }
    for (int e = x.tid; !kept && e < Lp*Lp; e += x.nthr) {
        const int r = e / Lp, c = e % Lp;
        if (c/8 < r/8) w.X[c*Lp + r] = w.A[e]*w.beta[c];
    }
    // Orders: the diagonal blocks (each column by one thread) and B^T
    // before the simdgroups read them by tiles.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_solved

    // The blocks below the diagonal, column J of simdgroup J mod nsg, from
    // the top down: each block's sum reads the blocks of its column above
    // it, which this simdgroup stored.
    for (int J = x.sg; !kept && J < Lp/8 - 1; J += x.nsg) {
        for (int I = J + 1; I < Lp/8; ++I) {
            simdgroup_float8x8 sm = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            gdn_mma_run(sm, w.X, Lp, true, w.X, Lp, false, 8*I, 8*J, 8*J, 8*I);
            simdgroup_float8x8 xd, xm = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            simdgroup_load(xd, w.X + 8*I*Lp + 8*I, Lp);
            simdgroup_multiply_accumulate(xm, xd, sm, xm);
            simdgroup_store(xm, w.X + 8*I*Lp + 8*J, Lp);
            // Orders: the block's store before the lanes of this
            // simdgroup read it, in the next block's sum.
            simdgroup_barrier(mem_flags::mem_device);
        }
    }
    // Orders: X (by tiles) before the products read it, and the reads of
    // B^T before the threads below clear it.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_solve

    // wn = X kd = -W', un = X v = -U' (the walk forms v - u = wn M^T - un,
    // so that neither needs a pass that negates it).
    gdn_gemm1(w.wn, sk, Lp, sk, false, w.X, Lp, false, w.kd, sk, false, Lp, GDN_LOWER, x.sg, x.nsg);
    gdn_gemm1(w.un, sv, Lp, sv, false, w.X, Lp, false, w.v, sv, false, Lp, GDN_LOWER, x.sg, x.nsg);
    // Orders: every read of X by the products before the threads below
    // scale and clear it, and the backward's reads of kd before dd's
    // product writes its place.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_wy
    // For the backward, dd = P^T c, the part of dL/dd that y's gradient
    // gives (term chunk-dy), which the state walk completes; in kd's place
    // (see gdn_ca), beside the threads' scaling of X below, which it does
    // not read.
    if (BWD) {
        gdn_gemm1(w.dd, sv, Lp, sv, false, w.P, Lp, true, gdn_chunk_c(args, src, x, tgpig.x), sv, false, Lp, GDN_UPPER,
                  x.sg, x.nsg);
    }
    // For the backward X becomes -diag(beta) R, its solve: du = X^T dd;
    // above the diagonal tiles, where B^T was, X is zero again.
    for (int e0 = x.tid; e0 < Lp*Lp; e0 += GDN_GB*x.nthr) {
        float xv[GDN_GB], bv[GDN_GB];
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = e0 + u*x.nthr, r = e / Lp, c = e % Lp;
            const bool ok = BWD && e < Lp*Lp && c/8 <= r/8;
            xv[u] = ok ? w.X[e] : 0.0f;
            bv[u] = ok ? w.beta[r] : 0.0f;
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = e0 + u*x.nthr, r = e / Lp, c = e % Lp;
            if (e >= Lp*Lp) continue;
            if (c/8 > r/8) {
                w.X[e] = 0.0f;
            } else if (BWD) {
                w.X[e] = xv[u]*bv[u];
            }
        }
    }
}

// gdn_chunk_fwd walks the chunks of one (head, seq) for the vb rows
// [j0, j0 + vb) of the state, j0 = vb*tgpig.x, the rows in threadgroup
// memory (M: [vb][sk], then d and y: [Lp][vb] each, rows padded as
// GDN_PADK says). Per chunk:
//   vu = U' - W' M^T      (v - u, the WY solve)
//   d  = beta ⊙ vu
//   y  = scale (qd M^T + P d)  (qd M^T formed with W' M^T)
//   M  = M diag(lam) + d^T kl
// The forward (BWD false, gdn_chunk_fwd_vb*) writes y and the snapshots;
// the backward's pass (BWD true, gdn_chunk_fwdb_vb*) writes M before each
// chunk and vu into the chunk's area. vb is VB, 8 or 16 (args.vb). Both
// are constants of each instance (args.bwd and args.vb say the same), so
// that the products' shapes and the threads' divisions by vb fold, and
// neither pass compiles the other's code (the 16-row walk with the pass
// a value of args held 64 bytes a thread in local memory; the backward's
// instance holds 32, the forward's 64 still, yet runs faster). With prep
// one instance per pass as well, the scalar forward went from 4.90 to
// 4.73 ms at T 8192, backward 14.20 to 14.06, KDA's 6.34 to 6.18 and
// 21.11 to 20.91 (docs/h200/pass-instances-ab.log, two rounds, an H100).
template <int VB, bool BWD>
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
    const int sk = args.sk, sv = args.sv, Lp = args.Lp, vb = VB, T = args.T;
    const int j0 = vb*tgpig.x, ss = sk*sv, pairs = args.hv*args.seqs;
    const int lm = sk + GDN_PADK, lb = GDN_LB; // the row strides (see GDN_PADK)
    threadgroup float * M = shmem;           // [vb][lm]
    threadgroup float * d = M + vb*lm;       // [Lp][lb]
    threadgroup float * y = d + Lp*lb;       // [Lp][lb]
    // The next chunk's kl and wn (and qd), which the products read, are in
    // device memory (prep wrote them long before): the threadgroups of this
    // (head, seq) load line jb + nvb l of them, l this thread's, at the
    // start of a step, so that the next step finds them in cache.
    const int pl = tgpig.x + args.nvb*x.tid, nl = (BWD ? 2 : 3)*Lp*sk/32;
    const gdn_rows mr = gdn_walk_rows(x.tid, x.nthr, sk);
    float pf = 0.0f;
    for (int r = mr.r0; mr.on && r < VB; r += mr.rs) {
        M[r*lm + mr.i] = args.has_state ? gdn_at(src, args.state, mr.i, j0 + r, x.h, x.s) : 0.0f;
    }
    // Orders: the initial rows before the first chunk's products read them.
    threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_finit
    for (int c = 0; c < args.nc; ++c) {
        const gdn_ca w = gdn_chunk_area(args, scr, x.area, c);
        const int2 sp = gdn_chunk_span(args, c);
        const int t0 = sp.x, n = sp.y - sp.x;
        const float pv = c + 1 < args.nc ? gdn_line(gdn_chunk_area(args, scr, x.area, c + 1).kl, pl, nl) : 0.0f;
        if (BWD) gdn_rows_copy<VB>(w.M0 + j0*sk, sk, M, lm, mr);
        // wn M^T into d and, for the forward, qd M^T into y, as one
        // product: qd follows wn in the area and y follows d, so that
        // [wn; qd] M^T is one matrix of 2 Lp rows, whose blocks of tiles
        // share the loads of M^T. vu = U' + wn M^T = d - un (and in place of
        // un for the backward), then d = beta ⊙ vu, by rows; M diag(lam) by
        // the same threads.
        gdn_gemm1(d, lb, BWD ? Lp : 2*Lp, vb, false, w.wn, sk, false, M, lm, true, sk, GDN_FULL, x.sg, x.nsg);
        // Orders: the product's tiles before the threads read them by rows
        // (and y's before the product below adds to them), and every read
        // of M above before the threads scale it.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_fvu
        // (Each thread's loads of -U' and beta, then of lam, before its
        // stores, as in prep's gather.) The scalar gate's backward pass
        // scales d by ell, as its kl is k (M += (ell ⊙ d)^T k).
        for (int e0 = x.tid; e0 < Lp*vb; e0 += GDN_GB*x.nthr) {
            float uv[GDN_GB], bv[GDN_GB];
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = e0 + u*x.nthr, r = e / vb, jl = e % vb;
                uv[u] = e < Lp*vb ? w.un[r*sv + j0 + jl] : 0.0f;
                bv[u] = e < Lp*vb ? (BWD && args.gw == 1 ? w.beta[r]*w.ell[r] : w.beta[r]) : 0.0f;
            }
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = e0 + u*x.nthr, r = e / vb, jl = e % vb;
                if (e >= Lp*vb) continue;
                const float vu = d[r*lb + jl] - uv[u]; // U' + wn M^T, un = -U'
                if (BWD) w.un[r*sv + j0 + jl] = vu;
                d[r*lb + jl] = vu*bv[u];
            }
        }
        if (mr.on) {
            const float li = w.lam[mr.i];
            for (int r = mr.r0; r < VB; r += mr.rs) M[r*lm + mr.i] *= li;
        }
        // Orders: d and M's scaling (by threads) before the products read
        // them.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_fd
        if (!BWD) {
            gdn_gemm1(y, lb, Lp, vb, true, w.P, Lp, false, d, lb, false, Lp, GDN_LOWER, x.sg, x.nsg);
        }
        // M += d^T kl. With 8 value rows, M's blocks are one row of tiles,
        // whose products share a tile of A: formed as M^T += kl^T d (TC),
        // its blocks are two rows of tiles that share a tile of d
        // (gdn_mma_rows). With 16, M's own blocks are 2 x 2.
        if (VB == 8) {
            gdn_gemm1<2, 2, true>(M, lm, sk, vb, true, w.kl, sk, true, d, lb, false, Lp, GDN_FULL, x.sg, x.nsg);
        } else {
            gdn_gemm1(M, lm, vb, sk, true, d, lb, true, w.kl, sk, false, Lp, GDN_FULL, x.sg, x.nsg);
        }
        // Orders: the y tiles and the new rows before the threads copy
        // them out and the next chunk's reads, and this chunk's reads of d
        // before the next chunk writes it.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_fstate
        if (!BWD) {
            for (int e = x.tid; e < n*vb; e += x.nthr) {
                const int r = e / vb, jl = e % vb;
                dst[args.y_off + ((x.s*T + t0 + r)*args.hv + x.h)*sv + j0 + jl] = args.scale*y[r*lb + jl];
            }
            const int slot = T - sp.y;
            if (slot < args.snapshots) {
                device float * sn = dst + args.snap_off + (slot*pairs + x.pair)*ss + j0*sk;
                gdn_rows_copy<VB>(sn, sk, M, lm, mr);
            }
            // Orders: the copy's reads of y before the next chunk's
            // product writes it (the backward's pass has no y).
            threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_fcopy
        }
        pf += pv;
    }
    if (args.nc < 0) dst[0] = pf; // never (gdn_line)
}

// gdn_chunk_bwd walks the chunks of one (head, seq) from the last, for the
// vb rows [j0, j0 + vb) of dM = dL/dM, the rows in threadgroup memory (dM:
// [vb][sk], then dd and beta ⊙ dd: [Lp][vb] each, padded as GDN_PADK
// says). Per chunk, dM at its end:
//   dd  = P^T c + kl dM^T                   (term chunk-dy, chunk-dstate)
//   the block's share of dlam = sum_j dM[j] ⊙ M0[j]
//   dM  = dM diag(lam) + c^T qd + (beta ⊙ dd)^T wn   (dM at the chunk's start)
// (the last product is du^T kd of term chunk-dsolve, du = X^T dd: wn = X
// kd, X = -R and du = -R^T (beta ⊙ dd)). P^T c comes from prep, in the
// chunk's dd, where dd goes; the solve's gradient (du, dv, dd' and dbeta)
// needs dd alone, and gdn_dsolve forms it over all value columns at once,
// off this serial path. It writes dstate, and dd, dM and the dlam shares
// into the chunk areas. vb is VB, as in gdn_chunk_fwd.
template <int VB>
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
    const int sk = args.sk, sv = args.sv, Lp = args.Lp, vb = VB, T = args.T;
    const int jb = tgpig.x, j0 = vb*jb, ss = sk*sv, pairs = args.hv*args.seqs;
    const int lm = sk + GDN_PADK, lb = GDN_LB; // the row strides (see GDN_PADK)
    threadgroup float * dM = shmem;          // [vb][lm]
    threadgroup float * dd = dM + vb*lm;     // [Lp][lb]
    threadgroup float * db = dd + Lp*lb;     // [Lp][lb]: beta ⊙ dd
    // The next chunk's kl, wn and qd (as in gdn_chunk_fwd) and this
    // block's rows of its M0, a line of each a thread, loaded at the start
    // of a step.
    const int pl = jb + args.nvb*x.tid, nl = 3*Lp*sk/32, ml = vb*sk/32;
    const gdn_rows mr = gdn_walk_rows(x.tid, x.nthr, sk);
    float pf = 0.0f;
    for (int r = mr.r0; mr.on && r < VB; r += mr.rs) dM[r*lm + mr.i] = 0.0f;
    for (int c = args.nc - 1; c >= 0; --c) {
        const gdn_ca w = gdn_chunk_area(args, scr, x.area, c);
        const int2 sp = gdn_chunk_span(args, c);
        const int slot = T - sp.y;
        float pv = 0.0f, pm = 0.0f;
        if (c > 0) {
            const gdn_ca nx = gdn_chunk_area(args, scr, x.area, c - 1);
            pv = gdn_line(nx.kl, pl, nl);
            pm = gdn_line(nx.M0 + j0*sk, x.tid, ml);
        }
        if (args.dstates_off >= 0 && slot < args.snapshots) {
            device const float * ds = src + args.dstates_off + (slot*pairs + x.pair)*ss + j0*sk;
            for (int r = mr.r0; mr.on && r < VB; r += mr.rs) dM[r*lm + mr.i] += ds[r*sk + mr.i];
        }
        // Orders: dM (the zeroing, the snapshot's gradient, the previous
        // chunk's product tiles) before every thread reads it.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_bsnap
        gdn_rows_copy<VB>(w.dM + j0*sk, sk, dM, lm, mr);
        gdn_gemm1(dd, lb, Lp, vb, false, w.kl, sk, false, dM, lm, true, sk, GDN_FULL, x.sg, x.nsg);
        // Orders: the dd tiles before the threads read them, and the reads
        // of dM above before the threads below scale it.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_bdd
        // (Each thread's loads before its stores, as in prep's gather.)
        // The scalar gate's kl is k: its tiles are k dM^T, scaled by ell.
        for (int e0 = x.tid; e0 < Lp*vb; e0 += GDN_GB*x.nthr) {
            float dv[GDN_GB], bv[GDN_GB], ev[GDN_GB];
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = e0 + u*x.nthr, r = e / vb, jl = e % vb;
                dv[u] = e < Lp*vb ? w.dd[r*sv + j0 + jl] : 0.0f;
                bv[u] = e < Lp*vb ? w.beta[r] : 0.0f;
                ev[u] = e < Lp*vb && args.gw == 1 ? w.ell[r] : 1.0f;
            }
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = e0 + u*x.nthr, r = e / vb, jl = e % vb;
                if (e >= Lp*vb) continue;
                const float v = args.gw == 1 ? fma(ev[u], dd[r*lb + jl], dv[u]) : dv[u] + dd[r*lb + jl];
                w.dd[r*sv + j0 + jl] = v;
                db[r*lb + jl] = bv[u]*v;
            }
        }
        // dlam's share and dM diag(lam): channel i of one thread, its rows
        // of M0 loaded before the sums.
        for (int i = x.tid; i < sk; i += x.nthr) {
            float m0[VB];
            for (int jl = 0; jl < vb; ++jl) m0[jl] = w.M0[(j0 + jl)*sk + i];
            const float li = w.lam[i];
            float acc = 0.0f;
            for (int jl = 0; jl < vb; ++jl) {
                acc = fma(dM[jl*lm + i], m0[jl], acc);
                dM[jl*lm + i] *= li;
            }
            w.part[jb*sk + i] = acc;
        }
        // Orders: beta ⊙ dd and the scaled dM before the product reads them.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_bdu
        // dM += c^T qd + (beta ⊙ dd)^T wn, with 8 value rows formed as its
        // transpose (TC), as gdn_chunk_fwd forms M.
        device const float * wc = gdn_chunk_c(args, src, x, c);
        if (VB == 8) {
            gdn_gemm<2, 2, true>(dM, lm, sk, vb, true, w.qd, sk, true, wc + j0, sv, false, Lp, GDN_FULL,
                                 w.wn, sk, true, db, lb, false, Lp, x.sg, x.nsg);
        } else {
            gdn_gemm(dM, lm, vb, sk, true, wc + j0, sv, true, w.qd, sk, false, Lp, GDN_FULL,
                     db, lb, true, w.wn, sk, false, Lp, x.sg, x.nsg);
        }
        // Orders: the dM tiles before the next chunk (or the copy out)
        // reads them, and this chunk's reads of dd and beta ⊙ dd before the
        // next chunk writes them.
        threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_bstate
        pf += pv + pm;
    }
    if (args.nc < 0) dst[0] = pf; // never (gdn_line)
    gdn_rows_copy<VB>(dst + args.dstate_off + x.pair*ss + j0*sk, sk, dM, lm, mr);
}

typedef decltype(gdn_chunk_fwd<16, false>) gdn_chunk_kernel_t;

template [[host_name("gdn_chunk_prep")]] kernel gdn_chunk_kernel_t gdn_chunk_prep<false>;
template [[host_name("gdn_chunk_prepb")]] kernel gdn_chunk_kernel_t gdn_chunk_prep<true>;
template [[host_name("gdn_chunk_fwd_vb8")]] kernel gdn_chunk_kernel_t gdn_chunk_fwd<8, false>;
template [[host_name("gdn_chunk_fwd_vb16")]] kernel gdn_chunk_kernel_t gdn_chunk_fwd<16, false>;
template [[host_name("gdn_chunk_fwdb_vb8")]] kernel gdn_chunk_kernel_t gdn_chunk_fwd<8, true>;
template [[host_name("gdn_chunk_fwdb_vb16")]] kernel gdn_chunk_kernel_t gdn_chunk_fwd<16, true>;
template [[host_name("gdn_chunk_bwd_vb8")]] kernel gdn_chunk_kernel_t gdn_chunk_bwd<8>;
template [[host_name("gdn_chunk_bwd_vb16")]] kernel gdn_chunk_kernel_t gdn_chunk_bwd<16>;

// gdn_dsolve forms, for the chunk of area w (tokens [t0, t0 + n)) of one
// (head, seq), the solve's gradient from the walk's dL/dd over all value
// columns at once (term chunk-dsolve), with X = -diag(beta) R:
//   du = X^T dd,  dv = -du,  dd' = dd + A^T du,  dbeta_r = dd'_r . vu_r
// du goes into its place (the scalar gate's q's, KDA's kl's: see gdn_ca),
// dd' in place of dd; dv and dbeta are outputs. On the serial path the
// walk formed du and dd' a block of value rows at a time. The scalar gate
// runs it at the head of gdn_chunk_dpairs,
// KDA in a kernel of its own, gdn_chunk_dsolve: on the H200 the scalar
// backward took 19.03 ms with the kernel of its own and 18.22 at the head
// of the pair terms, whose local memory went from 304 to 184 bytes a thread
// (docs/h200/dsolve-gate-ab.log); KDA's, at the head of its pair terms,
// lost 0.8 ms (docs/h200/dsolve-ab.log).
static void gdn_dsolve(constant gdn_chunk_args & args, device float * dst, gdn_ca w, gdn_ct x, int t0, int n, ushort tiisg) {
    const int sv = args.sv, Lp = args.Lp, T = args.T;
    gdn_gemm1(w.du, sv, Lp, sv, false, w.X, Lp, true, w.dd, sv, false, Lp, GDN_UPPER, x.sg, x.nsg);
    // Orders: du's tiles before the product and the threads below read
    // them.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_ddu
    gdn_gemm1(w.dd, sv, Lp, sv, true, w.A, Lp, true, w.du, sv, false, Lp, GDN_UPPER, x.sg, x.nsg);
    // (GDN_GB elements of a thread loaded before their stores, as in prep's
    // gather: the store to dst kept each load of du behind the one before,
    // 10% of gdn_chunk_dsolve's stall samples waiting on them,
    // docs/h200/ncu-source/summary-57bf35f.log. Each thread's value column
    // fixed, as the walks' rows, so that a step takes no division by S_v.)
    const gdn_rows dr = gdn_walk_rows(x.tid, x.nthr, sv);
    device float * pdv = dst + args.dv_off + ((x.s*T + t0)*args.hv + x.h)*sv + dr.i; // dv of row 0, column dr.i
    const int dvs = args.hv*sv;                                                      // dv's row stride
    for (int r0 = dr.r0; dr.on && r0 < n; r0 += GDN_GB*dr.rs) {
        float uv[GDN_GB];
        for (int u = 0; u < GDN_GB; ++u) {
            const int r = r0 + u*dr.rs;
            uv[u] = r < n ? w.du[r*sv + dr.i] : 0.0f;
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int r = r0 + u*dr.rs;
            if (r < n) pdv[r*dvs] = -uv[u];
        }
    }
    // Orders: dd' (tiles) before the simdgroups read it by rows.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_ddd
    // dbeta_r: row r of simdgroup r mod nsg, column j of lane j mod 32,
    // the lanes' sums summed by simd_sum; GDN_GB rows of a simdgroup at a
    // time, their loads before the stores of the first (each row's sum in
    // the same order).
    for (int r0 = x.sg; r0 < n; r0 += GDN_GB*x.nsg) {
        float acc[GDN_GB];
        for (int u = 0; u < GDN_GB; ++u) {
            const int r = r0 + u*x.nsg;
            acc[u] = 0.0f;
            for (int j = tiisg; r < n && j < sv; j += GDN_NW) acc[u] = fma(w.dd[r*sv + j], w.un[r*sv + j], acc[u]);
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int r = r0 + u*x.nsg;
            const float a = simd_sum(acc[u]);
            if (tiisg == 0 && r < n) dst[args.dbeta_off + (x.s*T + t0 + r)*args.hv + x.h] = a;
        }
    }
}

kernel void gdn_chunk_dsolve(
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
    const gdn_ca w = gdn_chunk_area(args, scr, x.area, tgpig.x);
    const int2 sp = gdn_chunk_span(args, tgpig.x);
    gdn_dsolve(args, dst, w, x, sp.x, sp.y - sp.x, tiisg);
}

// gdn_dpairs_kda: KDA's term chunk-dpairs, for the chunk of area w
// (tokens [t0, t0 + n)) of one (head, seq), after gdn_chunk_dpairs' products
// (dA^T in A's and dP^T in P's upper triangle, dkd in kd, dqd in qd, w in
// wn, dlam in lam). With KDA every key channel i has its own decay, Γ_rs,i =
// a_{s+1,i} ... a_{r,i}, so the pair sums are not products of the chunk's
// rows with one matrix, as for the scalar gate. Blocks of 8 rows make most
// of them so: for r in block R and s in an earlier block S,
//   Γ_rs = α_r M_RS β_s,   α_r = a_{8R} ... a_r,   β_s = a_{s+1} ... a_{8S+7},
//   M_RS = A_{S+1} ... A_{R-1},   A_B = a_{8B} ... a_{8B+7} (block B's total),
// every factor a product of decays (no quotient: the same safe gating as
// gdn's running products; each factor is at least the product it is part of,
// so none is flushed where Γ_rs is a normal float). Then, with av_rs = beta_s
// dA_rs, pv_rs = beta_s dP_rs and K̂_s = beta_s β_s k_s,
//   dk_r += α_r sum_S M_RS (dA_RS K̂_S),   dq_r += α_r sum_S M_RS (dP_RS K̂_S)
//   dk_s += beta_s β_s sum_R M_RS (dA_RS^T (α k)_R + dP_RS^T (α q)_R)
// are 8x8 tile products (simdgroup_matrix) over channel tiles, each M_RS
// applied to the operand's rows as a running product (Horner: the rows of
// the earlier blocks gain one block total a step). The pairs within a block,
// the pairs s = -1 (Λ_r = a_0 ... a_r) and the state's pairs (n-1, s) go
// by threads, a (block, channel) each, as gdn's backPairs. Each e_rs, Γ_rs's
// share of dg, reaches dg_t for s < t <= r through four sums, none a
// difference (see gdn_chunk_dpairs): t in block B takes
//   - the pairs within B (the threads' running sums),
//   - F_r = k_r dk_r' + q_r dq_r' over r >= t in B, with dk_r' and dq_r' the
//     sums over earlier blocks above,
//   - G_s = k_s dk_s' over s < t in B, with dk_s' the sum over later blocks,
//   - C_B, the pairs from a block before B to one after it: the tile sums
//     over S < B of the first, read after each S,
// and the pairs s = -1 over r >= t, the state's (n-1, s) over s < t, by
// blocks and within them. Scratch: the block totals and the blocks' sums
// of e_r,-1 and of the state's e_{n-1,s}, [nb][sk] each, after the decays
// in M0's place (see gdn_ca); K̂ in kl, (α q) in wn.
// Threadgroup memory a simdgroup: five 8x8 tiles (two product tiles, α and
// beta β of a block, and C_B by block), and K̂ and then (α k) of its eight
// channels, [GDN_LMAX][8], whose rows the products rescale at every block.
static void gdn_dpairs_kda(constant gdn_chunk_args & args, device const float * src, device float * dst, gdn_ca w,
                           gdn_ct x, int t0, int n, threadgroup float * shmem, ushort tiisg) {
    const int sk = args.sk, Lp = args.Lp, gw = args.gw, T = args.T, nb = (n + 7) / 8;
    device const float * dAt = w.A;
    device const float * dPt = w.P;
    device const float * dlam = w.lam;
    device float * atot = w.dec + Lp*gw; // A_B, [nb][sk]
    device float * esum = atot + nb*sk; // sum of e_r,-1 over block B's rows, [nb][sk]
    device float * hsum = esum + nb*sk; // sum of the state's e_{n-1,s} over block B's rows, [nb][sk]
    device float * dk = w.kd;
    device float * dq = w.qd;
    const int dgo = args.dg_off + ((x.s*T + t0)*args.hv + x.h)*sk; // dg of the chunk's row 0
    const int dgs = args.hv*sk;                                     // dg's row stride

    // k, q and exp(g) of the chunk's rows from the inputs, where prep's
    // gather had them: the walks have since written dM over k and q and M0
    // over the decays, which the products before have read (barrier
    // chunk_dprod). Loaded by prep's gather's own loads (gdn_gather_qkg),
    // each thread's before its stores and its channel fixed, as there.
    const gdn_rows kr = gdn_walk_rows(x.tid, x.nthr, sk);
    device const float * pq = gdn_col(src, args.q, kr.i, x.hq, x.sq);
    device const float * pk = gdn_col(src, args.k, kr.i, x.hq, x.sq);
    device const float * pg = gdn_col(src, args.g, kr.i, x.h, x.s);
    for (int m0 = 0; m0*x.nthr < Lp*sk; m0 += GDN_GB) {
        float qv[GDN_GB], kv[GDN_GB], gv[GDN_GB];
        gdn_gather_qkg(args, kr, pq, pk, pg, true, t0, n, m0, qv, kv, gv);
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = x.tid + (m0 + u)*x.nthr;
            if (e >= Lp*sk) continue;
            w.q[e] = qv[u];
            w.k[e] = kv[u];
            w.dec[e] = gv[u];
        }
    }
    // Orders: the gathered rows before the threads below read them.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dkin

    // The block totals A_B, a running product over the block's rows (those
    // before n: the last block's total is then Γ_{n-1, 8B-1}).
    for (int e = x.tid; e < nb*sk; e += x.nthr) {
        const int b = 8*(e / sk), i = e % sk;
        float a[8];
        for (int h = 0; h < 8; ++h) a[h] = b + h < n ? w.dec[(b + h)*gw + i] : 1.0f;
        float g = 1.0f;
        for (int h = 0; h < 8; ++h) g = gdn_flush(g*a[h]);
        atot[e] = g;
    }
    // Orders: the block totals before the threads below read every block's.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dtot

    // Block B, channel i, by one thread: its rows' pairs within the block,
    // the pairs s = -1 and the state's, the dg sums of these over the
    // block's rows, and K̂ for the products.
    for (int e = x.tid; e < nb*sk; e += x.nthr) {
        const int B = e / sk, b = 8*B, i = e % sk;
        float a[8], k[8], q[8], dkr[8], dqr[8], dg[8];
        for (int h = 0; h < 8; ++h) {
            const int u = b + h;
            const bool ok = u < n;
            a[h] = ok ? w.dec[u*gw + i] : 1.0f;
            k[h] = ok ? w.k[u*sk + i] : 0.0f;
            q[h] = ok ? w.q[u*sk + i] : 0.0f;
            dkr[h] = 0.0f;
            dqr[h] = 0.0f;
            dg[h] = 0.0f;
        }
        // Λ_{b-1} (the blocks before) and Γ_{n-1, b+7} (the blocks after)
        float lb = 1.0f, gb = 1.0f;
        for (int c = 0; c < B; ++c) lb = gdn_flush(lb*atot[c*sk + i]);
        for (int c = nb - 1; c > B; --c) gb = gdn_flush(gb*atot[c*sk + i]);
        // the pairs s < r within the block, Γ_rs a running product over r;
        // e_rs reaches dg_t for s < t <= r: a suffix sum over r
        for (int s = 0; s < 7; ++s) {
            float ev[8];
            float g = 1.0f;
            const float bs = w.beta[b + s];
            for (int r = s + 1; r < 8; ++r) {
                ev[r] = 0.0f;
                if (b + r < n) {
                    g = gdn_flush(g*a[r]);
                    const float av = bs*dAt[(b + s)*Lp + b + r], pv = bs*dPt[(b + s)*Lp + b + r];
                    const float gk = g*k[s], c = fma(av, k[r], pv*q[r]);
                    dkr[r] = fma(av, gk, dkr[r]);
                    dqr[r] = fma(pv, gk, dqr[r]);
                    dkr[s] = fma(g, c, dkr[s]);
                    ev[r] = gk*c;
                }
            }
            float acc = 0.0f;
            for (int r = 7; r > s; --r) {
                acc += ev[r];
                dg[r] += acc;
            }
        }
        // the pairs s = -1: dk_u += Λ_u dkd_u, dq_u += Λ_u dqd_u, e_u,-1 =
        // Λ_u (k_u dkd_u + q_u dqd_u) (+ Λ_u dlam at u = n-1), and the
        // diagonal's pv_uu; Λ_u = Λ_{b-1} α_u. e_u,-1 reaches dg_t for t <=
        // u: a suffix sum, after the block's α.
        float al[8];
        float g = 1.0f;
        for (int h = 0; h < 8; ++h) {
            g = gdn_flush(g*a[h]);
            al[h] = gdn_flush(lb*g);
        }
        float acc = 0.0f;
        for (int h = 7; h >= 0; --h) {
            const int u = b + h;
            float f = 0.0f;
            if (u < n) {
                const float dk0 = dk[u*sk + i], dq0 = dq[u*sk + i], pv = dPt[u*Lp + u]*w.beta[u];
                dkr[h] += fma(al[h], dk0, pv*q[h]);
                dqr[h] += fma(al[h], dq0, pv*k[h]);
                f = al[h]*fma(k[h], dk0, q[h]*dq0);
                if (u == n - 1) f = fma(al[h], dlam[i], f);
            }
            acc += f;
            dg[h] += acc;
        }
        esum[e] = acc;
        // the state's pairs (n-1, u): dk_u += Γ_{n-1,u} w_u (w_u = beta_u
        // wn_u; at u = n-1, Γ = 1, w's own term), and for u < n-1 e_{n-1,u}
        // = Γ_{n-1,u} k_u w_u, which reaches dg_t for t > u: a prefix sum,
        // after the block's β (a running product down from its end), which
        // also gives K̂_u = beta_u β_u k_u.
        // (beta and wn loaded before the loop's first store: each row's
        // loads would otherwise wait on the stores of the row before. With
        // the lanes' loads below batched the same way, KDA's pair terms went
        // from 4.60 to 3.81 ms at locked clocks on an H100, 27B shape, T
        // 8192: docs/h200/pairs-loads-ab.log.)
        float be[8], bt[8], wv[8];
        for (int h = 0; h < 8; ++h) {
            const int u = b + h;
            bt[h] = w.beta[u];
            wv[h] = u < n ? w.wn[u*sk + i] : 0.0f;
        }
        g = 1.0f;
        for (int h = 7; h >= 0; --h) {
            be[h] = g;
            g = gdn_flush(g*a[h]);
        }
        acc = 0.0f;
        for (int h = 0; h < 8; ++h) {
            const int u = b + h;
            const float bu = bt[h];
            float f = 0.0f;
            if (u < n) {
                const float gl = gdn_flush(gb*be[h]), wu = bu*wv[h];
                dkr[h] = fma(gl, wu, dkr[h]);
                if (u < n - 1) f = gl*k[h]*wu;
                dk[u*sk + i] = dkr[h];
                dq[u*sk + i] = dqr[h];
                dst[dgo + u*dgs + i] = dg[h] + acc;
            }
            w.kl[u*sk + i] = bu*be[h]*k[h];
            acc += f;
        }
        hsum[e] = acc;
    }
    // Orders: the threads' dk, dq, dg, K̂ and block sums before the
    // simdgroups' products and sums read and add to them.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dkblk

    // The pairs across blocks, eight channels [c0, c0 + 8) a simdgroup. Lane
    // l holds elements (l/8, l%8) and (l/8 + 4, l%8) of a block's 8x8 tile
    // (rows, channels).
    threadgroup float * tx = shmem + (320 + 8*GDN_LMAX)*x.sg; // a product tile
    threadgroup float * ty = tx + 64;          // another
    threadgroup float * tal = ty + 64;         // α of a block, [8 rows][8 channels]
    threadgroup float * tbe = tal + 64;        // beta β of a block
    threadgroup float * cb = tbe + 64;         // block B's offset (C_B and more), [8 blocks][8 channels]
    threadgroup float * kh = cb + 64;          // K̂ of the simdgroup's channels, then (α k), [Lp][8]
    const int lr = tiisg / 8, lc = tiisg % 8;
    device float * qh = w.wn; // (α q)
    for (int c0 = 8*x.sg; c0 < sk; c0 += 8*x.nsg) {
        const int ic = c0 + lc;
        // K̂ of the simdgroup's eight channels, from the threads' rows in kl
        // (all of them loaded before the first store).
        for (int e0 = tiisg; e0 < 64*nb; e0 += GDN_GB*GDN_NW) {
            float hv[GDN_GB];
            for (int j = 0; j < GDN_GB; ++j) {
                const int e = e0 + j*GDN_NW;
                hv[j] = e < 64*nb ? w.kl[(e / 8)*sk + c0 + e % 8] : 0.0f;
            }
            for (int j = 0; j < GDN_GB; ++j) {
                const int e = e0 + j*GDN_NW;
                if (e < 64*nb) kh[e] = hv[j];
            }
        }
        // Each block's offset from the threads' block sums, into cb
        // before C_B's terms: the pairs s = -1 of the later blocks and the
        // state's pairs of the earlier ones. (Read first, before any
        // collective: with barrier chunk_dkblk removed, the executor's
        // schedules then read them before the other simdgroups' threads
        // have written them.)
        for (int e = tiisg; e < 64; e += GDN_NW) {
            const int B = e / 8, i = c0 + e % 8;
            float off = 0.0f;
            if (B < nb) {
                for (int c = B + 1; c < nb; ++c) off += esum[c*sk + i];
                for (int c = 0; c < B; ++c) off += hsum[c*sk + i];
            }
            cb[e] = off;
        }
        // The earlier blocks: for R = 1, 2, ..., rows 8R .. 8R+7 take the
        // products with every block S < R, whose K̂ rows hold M_RS K̂_S.
        for (int R = 1; R < nb; ++R) {
            // Block 0's tiles of dA and dP and the lane's k and q of block
            // R (which nothing here stores to) first, so that their loads
            // are in flight through α and the rows' scaling below, where the
            // first product, and then the lanes' first sum, waited on them.
            simdgroup_float8x8 ma, mp, mk;
            gdn_tile_load(ma, dAt, Lp, true, 8*R, 0);
            gdn_tile_load(mp, dPt, Lp, true, 8*R, 0);
            float kv[2], qv[2], av[2];
            for (int m = 0; m < 2; ++m) {
                const int u = 8*R + lr + 4*m;
                kv[m] = w.k[u*sk + ic];
                qv[m] = w.q[u*sk + ic];
            }
            if (tiisg < 8) {
                float g = 1.0f;
                for (int h = 0; h < 8; ++h) {
                    const int u = 8*R + h;
                    g = gdn_flush(g*(u < n ? w.dec[u*gw + c0 + tiisg] : 1.0f));
                    tal[h*8 + tiisg] = g;
                }
            }
            // (Here and below, a lane's rows of kh, qh, dk, dq and dg loaded
            // before their stores, GDN_GB or two at a time: each load would
            // otherwise wait on the store before it.)
            const float ar = atot[(R - 1)*sk + ic];
            for (int e0 = tiisg; e0 < 64*(R - 1); e0 += GDN_GB*GDN_NW) {
                float hv[GDN_GB];
                for (int j = 0; j < GDN_GB; ++j) {
                    const int e = e0 + j*GDN_NW;
                    hv[j] = e < 64*(R - 1) ? kh[e] : 0.0f;
                }
                for (int j = 0; j < GDN_GB; ++j) {
                    const int e = e0 + j*GDN_NW;
                    if (e < 64*(R - 1)) kh[e] = hv[j]*ar;
                }
            }
            // Orders: α and the scaled rows before the lanes and the tile
            // loads read them.
            simdgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
            for (int m = 0; m < 2; ++m) av[m] = tal[(lr + 4*m)*8 + lc];
            simdgroup_float8x8 xa = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            simdgroup_float8x8 ya = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            // Block S's tiles are loaded before the lanes' work on block S - 1
            // (nothing in this loop stores to kh, dA or dP), so that the
            // loads are in flight while the lanes read the last product.
            gdn_tile_load(mk, kh, 8, false, 0, 0);
            for (int S = 0; S < R; ++S) {
                gdn_mma_rows(xa, ya, ma, mp, mk);
                if (S + 1 < R) {
                    gdn_tile_load(ma, dAt, Lp, true, 8*R, 8*(S + 1));
                    gdn_tile_load(mp, dPt, Lp, true, 8*R, 8*(S + 1));
                    gdn_tile_load(mk, kh, 8, false, 8*(S + 1), 0);
                }
                simdgroup_store(xa, tx, 8);
                simdgroup_store(ya, ty, 8);
                // Orders: the tiles' stores before the lanes read them.
                simdgroup_barrier(mem_flags::mem_threadgroup);
                if (S < R - 1) {
                    // the pairs (r in R, s before block S + 1): C_{S+1}
                    // gains their sum over R's rows
                    float v = 0.0f;
                    for (int m = 0; m < 2; ++m) {
                        const int el = (lr + 4*m)*8 + lc;
                        v += av[m]*fma(kv[m], tx[el], qv[m]*ty[el]);
                    }
                    v += simd_shuffle_xor(v, 8);
                    v += simd_shuffle_xor(v, 16);
                    if (tiisg < 8) cb[(S + 1)*8 + lc] += v;
                } else {
                    // dk_r and dq_r gain the sums over the earlier blocks,
                    // F_r into tx
                    float dkv[2], dqv[2];
                    for (int m = 0; m < 2; ++m) {
                        const int u = 8*R + lr + 4*m;
                        dkv[m] = u < n ? dk[u*sk + ic] : 0.0f;
                        dqv[m] = u < n ? dq[u*sk + ic] : 0.0f;
                    }
                    for (int m = 0; m < 2; ++m) {
                        const int r = lr + 4*m, u = 8*R + r, el = r*8 + lc;
                        const float xr = av[m]*tx[el], yr = av[m]*ty[el];
                        if (u < n) {
                            dk[u*sk + ic] = dkv[m] + xr;
                            dq[u*sk + ic] = dqv[m] + yr;
                        }
                        tx[el] = fma(kv[m], xr, qv[m]*yr);
                    }
                }
                // Orders: the lanes' reads (and F's writes) of the tiles
                // before the next stores over them (and F's sums below).
                simdgroup_barrier(mem_flags::mem_threadgroup);
            }
            // dg_t += F_r over r >= t in the block
            float dgv[2];
            for (int m = 0; m < 2; ++m) {
                const int u = 8*R + lr + 4*m;
                dgv[m] = u < n ? dst[dgo + u*dgs + ic] : 0.0f;
            }
            for (int m = 0; m < 2; ++m) {
                const int r = lr + 4*m, u = 8*R + r;
                float s = 0.0f;
                for (int r2 = r; r2 < 8; ++r2) s += tx[r2*8 + lc];
                if (u < n) dst[dgo + u*dgs + ic] = dgv[m] + s;
            }
            // Orders: the lanes' reads of F before the next block's tiles.
            simdgroup_barrier(mem_flags::mem_threadgroup);
        }
        // The later blocks: for S = nb-1 down to 0, rows 8S .. 8S+7 take the
        // products with every block R > S, whose rows in kh and qh hold
        // M_RS (α k)_R and M_RS (α q)_R.
        for (int S = nb - 1; S >= 0; --S) {
            // Block S + 1's tiles of dA and dP, and the lane's k and q of
            // blocks S + 1 and S, first, as above.
            simdgroup_float8x8 ma, mp, mk, mq;
            float kn[2], qn[2], ks[2];
            if (S + 1 < nb) {
                gdn_tile_load(ma, dAt, Lp, false, 8*S, 8*(S + 1));
                gdn_tile_load(mp, dPt, Lp, false, 8*S, 8*(S + 1));
                for (int m = 0; m < 2; ++m) {
                    const int o = (8*(S + 1) + lr + 4*m)*sk + ic;
                    kn[m] = w.k[o];
                    qn[m] = w.q[o];
                }
            }
            for (int m = 0; m < 2; ++m) ks[m] = w.k[(8*S + lr + 4*m)*sk + ic];
            if (tiisg < 8 && S + 1 < nb) {
                float g = 1.0f;
                for (int h = 0; h < 8; ++h) {
                    const int u = 8*(S + 1) + h;
                    g = gdn_flush(g*(u < n ? w.dec[u*gw + c0 + tiisg] : 1.0f));
                    tal[h*8 + tiisg] = g;
                }
            } else if (tiisg >= 8 && tiisg < 16) {
                const int c = tiisg - 8;
                float g = 1.0f;
                for (int h = 7; h >= 0; --h) {
                    const int u = 8*S + h;
                    tbe[h*8 + c] = w.beta[u]*g;
                    g = gdn_flush(g*(u < n ? w.dec[u*gw + c0 + c] : 1.0f));
                }
            }
            if (S + 1 < nb) {
                const float as = atot[(S + 1)*sk + ic];
                for (int e0 = tiisg; e0 < 64*(nb - S - 2); e0 += GDN_GB*GDN_NW) {
                    float hv[GDN_GB], gv[GDN_GB];
                    for (int j = 0; j < GDN_GB; ++j) {
                        const int e = e0 + j*GDN_NW, o = (8*(S + 2) + e / 8)*sk + ic;
                        const bool ok = e < 64*(nb - S - 2);
                        hv[j] = ok ? kh[64*(S + 2) + e] : 0.0f;
                        gv[j] = ok ? qh[o] : 0.0f;
                    }
                    for (int j = 0; j < GDN_GB; ++j) {
                        const int e = e0 + j*GDN_NW, o = (8*(S + 2) + e / 8)*sk + ic;
                        if (e < 64*(nb - S - 2)) {
                            kh[64*(S + 2) + e] = hv[j]*as;
                            qh[o] = gv[j]*as;
                        }
                    }
                }
            }
            // Orders: α before the lanes form block S+1's rows from it.
            simdgroup_barrier(mem_flags::mem_threadgroup);
            if (S + 1 < nb) {
                for (int m = 0; m < 2; ++m) {
                    const int r = lr + 4*m, o = (8*(S + 1) + r)*sk + ic;
                    kh[(8*(S + 1) + r)*8 + lc] = tal[r*8 + lc]*kn[m];
                    qh[o] = tal[r*8 + lc]*qn[m];
                }
            }
            // Orders: the rows of kh and qh before the tile loads read them.
            simdgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
            simdgroup_float8x8 za = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            if (S + 1 < nb) {
                gdn_tile_load(mk, kh, 8, false, 8*(S + 1), 0);
                gdn_tile_load(mq, qh, sk, false, 8*(S + 1), c0);
            }
            // Block R + 1's tiles loaded before block R's products (nothing
            // in this loop stores), so that each product's operands are in
            // flight through the products before it.
            for (int R = S + 1; R < nb; ++R) {
                const simdgroup_float8x8 a = ma, p = mp, kt = mk, qt = mq;
                if (R + 1 < nb) {
                    gdn_tile_load(ma, dAt, Lp, false, 8*S, 8*(R + 1));
                    gdn_tile_load(mp, dPt, Lp, false, 8*S, 8*(R + 1));
                    gdn_tile_load(mk, kh, 8, false, 8*(R + 1), 0);
                    gdn_tile_load(mq, qh, sk, false, 8*(R + 1), c0);
                }
                simdgroup_multiply_accumulate(za, a, kt, za);
                simdgroup_multiply_accumulate(za, p, qt, za);
            }
            simdgroup_store(za, tx, 8);
            // Orders: the tile's store before the lanes read it.
            simdgroup_barrier(mem_flags::mem_threadgroup);
            // dk_s gains the sums over the later blocks, G_s into ty; the
            // block's offset is cb's
            const float off = cb[S*8 + lc];
            float dkv[2];
            for (int m = 0; m < 2; ++m) {
                const int u = 8*S + lr + 4*m;
                dkv[m] = u < n ? dk[u*sk + ic] : 0.0f;
            }
            for (int m = 0; m < 2; ++m) {
                const int r = lr + 4*m, u = 8*S + r, el = r*8 + lc;
                const float zs = tbe[el]*tx[el];
                if (u < n) dk[u*sk + ic] = dkv[m] + zs;
                ty[el] = ks[m]*zs;
            }
            // Orders: G's writes before the lanes' sums read them.
            simdgroup_barrier(mem_flags::mem_threadgroup);
            float dgv[2];
            for (int m = 0; m < 2; ++m) {
                const int u = 8*S + lr + 4*m;
                dgv[m] = u < n ? dst[dgo + u*dgs + ic] : 0.0f;
            }
            for (int m = 0; m < 2; ++m) {
                const int r = lr + 4*m, u = 8*S + r;
                float s = off;
                for (int r2 = 0; r2 < r; ++r2) s += ty[r2*8 + lc];
                if (u < n) dst[dgo + u*dgs + ic] = dgv[m] + s;
            }
            // Orders: the lanes' reads of the tiles before the next
            // block's.
            simdgroup_barrier(mem_flags::mem_threadgroup);
        }
    }
}

// gdn_chunk_dpairs finishes chunk tgpig.x of one (head, seq): for the
// scalar gate first the solve's gradient (gdn_dsolve), then the sums over
// all value rows that the walk could not form.
//   dlam  = the blocks' shares, in block order
//   dP^T = D c^T, dA^T = D du^T, dqd = c M0, dkd = du M0, w = D dM
// with D = diag(beta) vu, whose beta is applied when the pair terms read
// the products; then term chunk-dpairs (gdn's backPairs): dk, dq and the
// gate's gradient through every decay; dk and dq of this (head, seq) end
// in the chunk's area, in place of kd and qd (KDA's in gdn_dpairs_kda).
// Threadgroup memory: the scalar gate's E_u,-1, Λ_r and Γ_{n-1,s},
// [3][Lp]; KDA's five 8x8 tiles and K̂'s [GDN_LMAX][8] a simdgroup. KDA
// (args.gw > 1) is a constant of each instance (gdn_chunk_dpairs, gdn_chunk_dpairs_kda),
// so that neither compiles the other gate's code: on the H200, one kernel
// for both took the KDA backward from 27.04 to 27.65 ms, the instances
// 26.73 (docs/h200/pairs-products-ab.log).
template <bool KDA>
kernel void gdn_chunk_dpairs(
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
    const int sk = args.sk, sv = args.sv, Lp = args.Lp, T = args.T;
    const gdn_ca w = gdn_chunk_area(args, scr, x.area, tgpig.x);
    const int2 sp = gdn_chunk_span(args, tgpig.x);
    const int t0 = sp.x, n = sp.y - sp.x;
    // The products go where the walk's inputs were: dP^T in P, dA^T in A,
    // each in its upper triangle (the pair terms read no more: dA_rs and
    // dP_rs for s <= r), so that A and P stay in the lower ones; dqd in qd,
    // dkd in kd, w in wn, dlam in lam.
    device float * dPt = w.P;
    device float * dAt = w.A;
    device float * dqd = w.qd;
    device float * dkd = w.kd;
    device float * ww = w.wn;
    device float * dlam = w.lam;
    // The scalar gate's solve gradient here, KDA's in gdn_chunk_dsolve.
    if (!KDA) {
        gdn_dsolve(args, dst, w, x, t0, n, tiisg);
        // Orders: dbeta's reads of dd' before the products below write dk's
        // sums in its place (see gdn_ca).
        threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_ddone
    }
    device const float * wc = gdn_chunk_c(args, src, x, tgpig.x);
    gdn_gemm_up(dPt, Lp, Lp, w.un, sv, false, wc, sv, true, sv, false, true, w.X, Lp, x.sg, x.nsg, tiisg);
    gdn_gemm_up(dAt, Lp, Lp, w.un, sv, false, w.du, sv, true, sv, false, true, w.X, Lp, x.sg, x.nsg, tiisg);
    if (GDN_TG_STAGED(Lp, sk, sv, x.nthr)) {
        gdn_gemm_tg<4>(dqd, sk, sk, false, wc, sv, w.M0, sk, sv, GDN_FULL, shmem, x.tid, x.sg);
        gdn_gemm_tg<4>(dkd, sk, sk, false, w.du, sv, w.M0, sk, sv, GDN_FULL, shmem, x.tid, x.sg);
        gdn_gemm_tg<4>(ww, sk, sk, false, w.un, sv, w.dM, sk, sv, GDN_FULL, shmem, x.tid, x.sg);
    } else {
        gdn_gemm1(dqd, sk, Lp, sk, false, wc, sv, false, w.M0, sk, false, sv, GDN_FULL, x.sg, x.nsg);
        gdn_gemm1(dkd, sk, Lp, sk, false, w.du, sv, false, w.M0, sk, false, sv, GDN_FULL, x.sg, x.nsg);
        gdn_gemm1(ww, sk, Lp, sk, false, w.un, sv, false, w.dM, sk, false, sv, GDN_FULL, x.sg, x.nsg);
    }
    for (int i = x.tid; i < sk; i += x.nthr) {
        float acc = 0.0f;
        for (int b = 0; b < args.nvb; ++b) acc += w.part[b*sk + i];
        dlam[i] = acc;
    }
    // Orders: the product tiles and dlam before the pair terms read them.
    threadgroup_barrier(mem_flags::mem_device); // barrier:chunk_dprod

    // term chunk-dpairs. With Γ_rs = a_r ... a_{s+1} (Γ_{r,-1} = Λ_r),
    // av_rs = beta_s dA_rs and pv_rs = beta_s dP_rs, every pair s < r of the
    // chunk gives
    //   dq_r += pv_rs Γ_rs k_s    dk_r += av_rs Γ_rs k_s
    //   dk_s += Γ_rs (av_rs k_r + pv_rs q_r)
    //   e_rs  = Γ_rs k_s (av_rs k_r + pv_rs q_r),  Γ_rs's share of dg
    // with the state's terms at r = n-1 (w_s = beta_s w_s: dk_s += Γ_rs w_s,
    // e_rs += Γ_rs k_s w_s) and at s = -1 (dq_r += Λ_r dqd_r, dk_r += Λ_r
    // dkd_r, e_r,-1 = Λ_r (k_r dkd_r + q_r dqd_r), plus Λ_r dlam at r =
    // n-1). Γ_rs's gradient reaches every gate a_t with s < t <= r:
    //   dg_t = sum_{s<t} sum_{r>=t} e_rs,
    // every term summed where it belongs. (The shorter form sum_{u>=t}
    // (sum_{s<u} e_us - sum_{r>u} e_ru) cancels the pairs after t against
    // each other, and in float32 loses digits that dg needs: at the
    // matrix's backend-ops ranges, 1e-4 where this form keeps 1e-6.)
    if (KDA) {
        gdn_dpairs_kda(args, src, dst, w, x, t0, n, shmem, tiisg);
        return;
    }
    // The scalar gate: Γ_rs is one number per pair, so the pair sums of
    // dk and dq are products of the chunk's rows with two Lp x Lp
    // matrices (after the barriers below):
    //   dk += S k + V^T q,  dq += V k,
    //   S_rs = S_sr = av_rs Γ_rs (s < r),  V_rs = pv_rs Γ_rs (s <= r)
    // (S's diagonal zero, V's upper triangle zero; both zero in the
    // rows and columns from n), S in X (the solve's, no longer read)
    // and V in P, in place of dP^T and of P. The sum over channels of
    // e_rs is E_rs = beta_s (dA_rs A_rs + dP_rs P_rs), with A and P of
    // the prep, into A below the diagonal. Column s of the pairs in four
    // runs of rows, each of one thread, Γ a running product from row
    // s + 1 as the prep's (each run forms it up to its first row again,
    // in the same order): a run is the only reader and writer of its
    // pairs' places (r, s) and (s, r) in A, P and X. The last run of
    // each column keeps Γ_{n-1,s} and one thread Λ_r, a running product
    // from row 0, in threadgroup memory after E_u,-1.
    threadgroup float * lam = shmem + Lp;    // Λ_r, [Lp]
    threadgroup float * glast = lam + Lp;    // Γ_{n-1,s}, [Lp]
    // q of the chunk's rows from the inputs again, where the state and
    // dL/dM were (the products above have read them, barrier chunk_dprod):
    // q's own place has held du since gdn_dsolve (see gdn_ca). Each
    // thread's loads before its stores and its channel fixed, as in prep's
    // gather; the runs below read no q.
    device float * qr = w.M0; // [Lp][sk]
    {
        const gdn_rows kr = gdn_walk_rows(x.tid, x.nthr, sk);
        device const float * pq = gdn_col(src, args.q, kr.i, x.hq, x.sq);
        for (int m0 = 0; m0*x.nthr < Lp*sk; m0 += GDN_GB) {
            float qv[GDN_GB];
            for (int u = 0; u < GDN_GB; ++u) {
                const int r = kr.r0 + (m0 + u)*kr.rs;
                qv[u] = kr.on && r < n ? pq[(t0 + r)*args.q.nb[2]] : 0.0f;
            }
            for (int u = 0; u < GDN_GB; ++u) {
                const int e = x.tid + (m0 + u)*x.nthr;
                if (e < Lp*sk) qr[e] = qv[u];
            }
        }
    }
    for (int e = x.tid; e <= 4*n; e += x.nthr) {
        if (e == 4*n) {
            float g = 1.0f;
            for (int r = 0; r < n; ++r) {
                g = gdn_flush(g*w.dec[r]);
                lam[r] = g;
            }
            continue;
        }
        const int s = e / 4, q = e % 4, len = n - 1 - s;
        const int rb = s + 1 + q*len/4, re = s + 1 + (q + 1)*len/4;
        const float bs = w.beta[s];
        float g = 1.0f;
        for (int r = s + 1; r < rb; ++r) g = gdn_flush(g*w.dec[r]);
        // (A run's GDN_GB rows loaded before their stores: each row's loads
        // would otherwise wait on the stores of the row before. No load
        // reads a place an earlier row of the run stores.)
        for (int r0 = rb; r0 < re; r0 += GDN_GB) {
            float dv[GDN_GB], dav[GDN_GB], dpv[GDN_GB], av[GDN_GB], pv[GDN_GB];
            for (int u = 0; u < GDN_GB; ++u) {
                const int r = r0 + u;
                const bool ok = r < re;
                dv[u] = ok ? w.dec[r] : 0.0f;
                dav[u] = ok ? dAt[s*Lp + r] : 0.0f;
                dpv[u] = ok ? dPt[s*Lp + r] : 0.0f;
                av[u] = ok ? w.A[r*Lp + s] : 0.0f;
                pv[u] = ok ? w.P[r*Lp + s] : 0.0f;
            }
            for (int u = 0; u < GDN_GB; ++u) {
                const int r = r0 + u;
                if (r >= re) break;
                g = gdn_flush(g*dv[u]);
                const float da = dav[u], dp = dpv[u];
                w.A[r*Lp + s] = bs*fma(da, av[u], dp*pv[u]);
                const float a = da*bs*g;
                w.X[r*Lp + s] = a;
                w.X[s*Lp + r] = a;
                w.P[r*Lp + s] = dp*bs*g;
                w.P[s*Lp + r] = 0.0f;
            }
        }
        if (q == 3) glast[s] = g;
    }
    // The places no run has: the diagonals (V_uu = pv_uu, dP_uu's own
    // place) and the rows and columns from n.
    for (int e = x.tid; e < Lp*Lp; e += x.nthr) {
        const int r = e / Lp, c = e % Lp;
        if (r == c) {
            w.X[e] = 0.0f;
            w.P[e] = r < n ? w.P[e]*w.beta[r] : 0.0f;
        } else if (max(r, c) >= n) {
            w.X[e] = 0.0f;
            w.P[e] = 0.0f;
        }
    }
    // Orders: Λ and Γ_{n-1,s} (each by one thread) and q (by every
    // thread) before the threads below read them.
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup); // barrier:chunk_dgam
    // The terms of one row and channel, row u of simdgroup u mod nsg and
    // channel i of lane i mod 32: the pairs s = -1 (dk_u += Λ_u dkd_u, dq_u
    // likewise, and e_u,-1) and the state's terms (dk_u += Γ_{n-1,u} w_u,
    // and k_u Γ_{n-1,u} w_u, its share of E_{n-1,u}); the products add the
    // pairs. The sums over channels by simd_sum: E_u,-1 into threadgroup
    // memory, and E_{n-1,u} gains its w term.
    // (A lane's GDN_GB channels of a row loaded before their stores: each
    // channel's loads would otherwise wait on the stores of the one before.
    // With the runs' rows above batched the same way, the scalar pair terms
    // went from 5.76 to 5.42 ms at locked clocks on an H100, 27B shape, T
    // 8192: docs/h200/pairs-loads-ab.log.)
    for (int u = x.sg; u < n; u += x.nsg) {
        const float lu = lam[u], bu = w.beta[u], gu = glast[u];
        float f = 0.0f, h = 0.0f;
        for (int i0 = tiisg; i0 < sk; i0 += GDN_GB*GDN_NW) {
            float kv[GDN_GB], qv[GDN_GB], wv[GDN_GB], dkv[GDN_GB], dqv[GDN_GB];
            for (int j = 0; j < GDN_GB; ++j) {
                const int i = i0 + j*GDN_NW, e = u*sk + i;
                const bool ok = i < sk;
                kv[j] = ok ? w.k[e] : 0.0f;
                qv[j] = ok ? qr[e] : 0.0f;
                wv[j] = ok ? ww[e] : 0.0f;
                dkv[j] = ok ? dkd[e] : 0.0f;
                dqv[j] = ok ? dqd[e] : 0.0f;
            }
            for (int j = 0; j < GDN_GB; ++j) {
                const int i = i0 + j*GDN_NW, e = u*sk + i;
                if (i >= sk) break;
                const float ku = kv[j], qu = qv[j], wu = bu*wv[j];
                const float hw = u < n - 1 ? gu*wu : 0.0f;
                const float dk0 = dkv[j], dq0 = dqv[j];
                float fe = lu*fma(ku, dk0, qu*dq0); // e_u,-1
                if (u == n - 1) fe = fma(lu, dlam[i], fe);
                dkd[e] = fma(lu, dk0, hw + (u == n - 1 ? wu : 0.0f));
                dqd[e] = lu*dq0;
                f += fe;
                h += ku*hw;
            }
        }
        f = simd_sum(f);
        h = simd_sum(h);
        if (tiisg == 0) {
            shmem[u] = f;
            if (u < n - 1) w.A[(n - 1)*Lp + u] += h;
        }
    }
    // Orders: every thread's writes of dk and dq, the runs' E, S and V, and
    // E's last row and E_u,-1, before the products and the sums over pairs
    // read them.
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup); // barrier:chunk_drows
    // The scalar gate's pair sums: dk += V^T q + S k, dq += V k (tiles of
    // dk and dq that only the products touch from here), in blocks of 2 x 2
    // tiles, four accumulators a simdgroup, with the kernel at 128
    // registers (launchBounds in cuda_gen.go), where it holds nothing in
    // local memory: the scalar backward 16.83 to 16.64 ms beside blocks of one
    // row of tiles at 80 registers (docs/h200/pairs-2x2-ab.log, an H100).
    // Under the 64-register bound the kernel had before, one row of tiles
    // was the faster (19.56 ms against 19.88).
    gdn_gemm(dkd, sk, Lp, sk, true, w.P, Lp, true, qr, sk, false, Lp, GDN_UPPER,
             w.X, Lp, false, w.k, sk, false, Lp, x.sg, x.nsg);
    gdn_gemm1(dqd, sk, Lp, sk, true, w.P, Lp, false, w.k, sk, false, Lp, GDN_LOWER, x.sg, x.nsg);
    // dg_t = sum_{r >= t} (E_r,-1 + sum_{s < t} E_rs), from each row's
    // running sums F_rt = E_r,-1 + E_r0 + ... + E_r,t-1 (in order of s) for
    // t <= r, in threadgroup memory after E_u,-1 (the staging's, free
    // now; Λ and Γ_{n-1,s} are read no more): E's rows below the diagonal
    // copied in by every thread, then each row's sums by one thread.
    const int lf = Lp + 1; // F's row stride: a column's rows in distinct banks
    threadgroup float * F = shmem + Lp; // [Lp][lf]
    for (int e0 = x.tid; e0 < n*Lp; e0 += GDN_GB*x.nthr) {
        float ev[GDN_GB];
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = e0 + u*x.nthr;
            ev[u] = e < n*Lp ? w.A[e] : 0.0f;
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = e0 + u*x.nthr, r = e / Lp, t = e % Lp;
            if (e < n*Lp && t < r) F[r*lf + t] = ev[u];
        }
    }
    // Orders: E's rows (copied by every thread) before the row sums.
    threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_dgcopy
    for (int r = x.tid; r < n; r += x.nthr) {
        float acc = shmem[r];
        for (int t = 0; t < r; ++t) {
            const float e = F[r*lf + t];
            F[r*lf + t] = acc;
            acc += e;
        }
        F[r*lf + r] = acc;
    }
    // Orders: the row sums (each row by one thread) before the sums over
    // rows read them.
    threadgroup_barrier(mem_flags::mem_threadgroup); // barrier:chunk_dgrows
    // Then dg_t = sum_{r >= t} F_rt: four lanes a t (lanes 4t to 4t + 3 of
    // the threadgroup's simdgroups in turn), lane q of the four summing
    // quarter q of the rows r >= t; the quarters' sums by two shuffles,
    // ((q0 + q2) + (q1 + q3)) in lane 4t. (Each lane forming its rows'
    // F_rt itself, t sums a row, took 7% of the scalar pair terms' stall
    // samples; the bits are the same.)
    for (int e0 = GDN_NW*x.sg; e0 < 4*n; e0 += GDN_NW*x.nsg) {
        const int e = e0 + tiisg, t = e / 4, q = e % 4;
        float acc = 0.0f;
        if (t < n) {
            const int len = n - t, rb = t + q*len/4, re = t + (q + 1)*len/4;
            for (int r = rb; r < re; ++r) acc += F[r*lf + t];
        }
        acc += simd_shuffle_down(acc, 2);
        acc += simd_shuffle_down(acc, 1);
        if (t < n && q == 0) dst[args.dg_off + (x.s*T + t0 + t)*args.hv + x.h] = acc;
    }
}

template [[host_name("gdn_chunk_dpairs")]] kernel gdn_chunk_kernel_t gdn_chunk_dpairs<false>;
template [[host_name("gdn_chunk_dpairs_kda")]] kernel gdn_chunk_kernel_t gdn_chunk_dpairs<true>;

// gdn_chunk_red sums dq and dk of q/k head h = hq0 + tgpig.y, q/k sequence
// s, over the value heads and sequences that read it, in increasing
// (sequence, value head) order, from the group's chunk areas that hold
// each pair's (the group's y-th value head is q/k head hq0 + y / rep's (y
// mod rep)-th, gdn_group_head). Grid (ceil(T / GDN_RED_ROWS), hkg,
// seqs_qk): tokens [GDN_RED_ROWS x, GDN_RED_ROWS (x + 1)) of threadgroup x,
// their elements (token, column) GDN_GB a thread, whose loads of one pair's
// values go together before the next pair's (the sums keep their order).
// (Before, a threadgroup had one token, a thread one element: 131,072
// threadgroups of 128 threads at the 27B shape and T 8192, each thread
// loading one value a pair before its sums.) The host's chunkRedRows.
#define GDN_RED_ROWS 8
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
    const int sk = args.sk, T = args.T, nthr = ntg.x;
    const int y = tgpig.y, h = args.hq0 + y, s = tgpig.z;
    const int t0 = GDN_RED_ROWS*tgpig.x, ne = min(GDN_RED_ROWS, T - t0)*sk;
    for (int e0 = tpitg.x; e0 < ne; e0 += GDN_GB*nthr) {
        // element u's chunk and its place r sk + i in the chunk's rows
        // (token t's chunk c and row r: gdn_chunk_span's inverse); an
        // element past the tokens reads the last one's and stores nothing
        int c[GDN_GB], ri[GDN_GB];
        float aq[GDN_GB], ak[GDN_GB];
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = min(e0 + u*nthr, ne - 1), t = t0 + e / sk, i = e % sk;
            c[u] = t < args.e ? t / args.L : args.nce + (t - args.e);
            ri[u] = (t < args.e ? t % args.L : 0)*sk + i;
            aq[u] = 0.0f;
            ak[u] = 0.0f;
        }
        for (int s2 = s*args.seq_rep; s2 < (s + 1)*args.seq_rep; ++s2) {
            for (int m = 0; m < args.rep; ++m) {
                const int area = (s2*args.hkg + y)*args.rep + m;
                float qv[GDN_GB], kv[GDN_GB];
                for (int u = 0; u < GDN_GB; ++u) {
                    const gdn_ca w = gdn_chunk_area(args, scr, area, c[u]);
                    qv[u] = w.qd[ri[u]];
                    kv[u] = w.kd[ri[u]];
                }
                for (int u = 0; u < GDN_GB; ++u) {
                    aq[u] += qv[u];
                    ak[u] += kv[u];
                }
            }
        }
        for (int u = 0; u < GDN_GB; ++u) {
            const int e = e0 + u*nthr, t = t0 + e / sk, i = e % sk;
            if (e >= ne) continue;
            const int o = ((s*T + t)*args.hk + h)*sk + i;
            dst[args.dq_off + o] = aq[u];
            dst[args.dk_off + o] = ak[u];
        }
    }
}
