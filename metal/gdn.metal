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
