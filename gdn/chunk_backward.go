package gdn

// The chunk backward: the gradients of one chunk, given dM (dL/dM at the
// chunk's end) and gy (dL/dy for its tokens), from the state M0 before it.
// Each step differentiates one line of the chunk forward (chunk.go), in
// reverse order.

// backward runs one chunk of n gathered tokens backwards. M0 is the state
// before the chunk (read only); dM holds dL/dM at the chunk's end on entry
// and dL/dM0 on return; w.gy holds dL/dy of the chunk's tokens. The
// chunk's gradients are left in w.dq, w.dk, w.dv, w.dg and w.dbeta.
func (w *chunkWork[F]) backward(M0, dM []F, n int, scale F) {
	sk, sv := w.sk, w.sv
	// Recompute the forward's quantities from M0.
	w.pairs(n)
	w.solve(M0, n)

	clear(w.dq[:n*sk])
	clear(w.dk[:n*sk])
	clear(w.dqd[:n*sk])
	clear(w.dkd[:n*sk])
	clear(w.w[:n*sk])
	clear(w.dlam)
	clear(w.dd[:n*sv])
	clear(w.dg[:n*w.gw])

	w.backState(M0, dM, n)
	w.backY(M0, dM, n, scale)
	w.backSolve(M0, dM, n)
	w.backPairs(n)
}

// gdn:term chunk-dstate
// backState differentiates M = M0 diag(Λ_{n-1}) + sum_s d_s (Γ_{n-1,s} ⊙ k_s)^T
// (advance): dd_s = dM kl_s, w_s = dM^T d_s (for the gradients of kl_s, in
// backPairs), dΛ_{n-1} = sum_j dM[j] ⊙ M0[j]; then dM becomes its share of
// dM0 = dM diag(Λ_{n-1}).
func (w *chunkWork[F]) backState(M0, dM []F, n int) {
	sk, sv := w.sk, w.sv
	for j := 0; j < sv; j++ {
		dMj := rows(dM, j, sk)
		for s := 0; s < n; s++ {
			w.dd[s*sv+j] = dot(dMj, rows(w.kl, s, sk)) // dd_s[j] = dM[j] . kl_s
			axpy(rows(w.w, s, sk), w.d[s*sv+j], dMj)   // w_s += d_s[j] dM[j]
		}
		m0 := rows(M0, j, sk)
		for i := range dMj {
			w.dlam[i] += dMj[i] * m0[i] // dΛ += dM[j] ⊙ M0[j]
			dMj[i] *= w.lam[i]          // dM0[j] = dM[j] ⊙ Λ_{n-1}
		}
	}
}

// gdn:end

// gdn:term chunk-dy
// backY differentiates y_r = scale (M0 qd_r + sum_{s<=r} P_rs d_s) (outputs):
// with c_r = scale gy_r,
//
//	dM0  += sum_r c_r qd_r^T       dqd_r = M0^T c_r
//	dP_rs = c_r . d_s              dd_s += sum_{r>=s} P_rs c_r
func (w *chunkWork[F]) backY(M0, dM []F, n int, scale F) {
	sv, L := w.sv, n
	// c_r = scale gy_r, in place.
	for i := range w.gy[:n*sv] {
		w.gy[i] *= scale
	}
	w.backM0(M0, dM, w.gy, w.qd, w.dqd, n) // dM0 += sum_r c_r qd_r^T, dqd_r += M0^T c_r
	for r := 0; r < n; r++ {
		c := rows(w.gy, r, sv)
		for s := 0; s <= r; s++ {
			ds := rows(w.d, s, sv)
			w.dP[r*L+s] = dot(c, ds)
			axpy(rows(w.dd, s, sv), w.p[r*L+s], c)
		}
	}
}

// backM0 differentiates the products with the chunk's start state, the
// rows x_r [n, S_k] read through M0 [S_v, S_k] (x_r = qd_r for the outputs,
// kd_r for the solve): given c_r = dL/d(M0 x_r) [n, S_v], it accumulates
//
//	dM0 += sum_r c_r x_r^T       dx_r += M0^T c_r
//
// one state row j at a time, so that M0 and dM are each read once.
func (w *chunkWork[F]) backM0(M0, dM, c, x, dx []F, n int) {
	sk, sv := w.sk, w.sv
	for j := 0; j < sv; j++ {
		dMj, m0 := rows(dM, j, sk), rows(M0, j, sk)
		for r := 0; r < n; r++ {
			cr := c[r*sv+j]
			axpy(dMj, cr, rows(x, r, sk)) // dM0[j] += c_r[j] x_r
			axpy(rows(dx, r, sk), cr, m0) // dx_r += c_r[j] M0[j]
		}
	}
}

// gdn:end

// gdn:term chunk-dsolve
// backSolve differentiates the forward substitution (solve):
// u_r = M0 kd_r + sum_{s<r} A_rs d_s, d_r = beta_r (v_r - u_r). Row by row
// from the last, dd_r is complete once every later row has passed its du
// back through A (the transposed system, solved by back substitution):
//
//	dv_r = beta_r dd_r     du_r = -beta_r dd_r     dbeta_r = dd_r . (v_r - u_r)
//	dd_s += A_rs du_r      dA_rs = du_r . d_s      (s < r)
//	dkd_r = M0^T du_r      dM0 += sum_r du_r kd_r^T
func (w *chunkWork[F]) backSolve(M0, dM []F, n int) {
	sv, L := w.sv, n
	for r := n - 1; r >= 0; r-- {
		dd, du, dv := rows(w.dd, r, sv), rows(w.du, r, sv), rows(w.dv, r, sv)
		v, u, b := rows(w.v, r, sv), rows(w.u, r, sv), w.beta[r]
		var db F
		for j := range dd {
			dv[j] = termDv(b, dd[j])
			du[j] = termDu(b, dd[j])
			db += termDbeta(dd[j], v[j], u[j])
		}
		w.dbeta[r] = db
		for s := 0; s < r; s++ {
			w.dA[r*L+s] = dot(du, rows(w.d, s, sv))
			axpy(rows(w.dd, s, sv), w.a[r*L+s], du)
		}
	}
	w.backM0(M0, dM, w.du, w.kd, w.dkd, n) // dM0 += sum_r du_r kd_r^T, dkd_r += M0^T du_r
}

// gdn:end

// gdn:term chunk-dpairs
// backPairs differentiates the pair terms (pairs), one s at a time with
// its decays Γ_rs recomputed:
//
//	kd_r = Λ_r ⊙ k_r, qd_r = Λ_r ⊙ q_r:  dk_r += Λ_r ⊙ dkd_r, dq_r += Λ_r ⊙ dqd_r,
//	                                      dΛ_r = k_r ⊙ dkd_r + q_r ⊙ dqd_r (+ dΛ_{n-1})
//	A_rs = k_r . (Γ_rs ⊙ k_s):            dk_r += dA_rs Γ_rs ⊙ k_s, dk_s += dA_rs Γ_rs ⊙ k_r
//	P_rs = q_r . (Γ_rs ⊙ k_s):            dq_r += dP_rs Γ_rs ⊙ k_s, dk_s += dP_rs Γ_rs ⊙ q_r
//	kl_s = Γ_{n-1,s} ⊙ k_s:               dk_s += Γ_{n-1,s} ⊙ w_s
//
// and each decay's gradient dΓ_rs reaches the gates through
// Γ_rs = exp(g_{s+1} + ... + g_r): every g_t with s < t <= r gains
// Γ_rs ⊙ dΓ_rs. Walking r down from n-1 with a running sum of these
// gives each t its share without differences of large sums.
func (w *chunkWork[F]) backPairs(n int) {
	sk, L := w.sk, n
	dgam := w.dgam
	for s := -1; s < n; s++ {
		w.decays(s, n)
		clear(w.acc)
		for r := n - 1; r > s; r-- {
			gam := rows(w.gams, r, sk)
			kr, qr := rows(w.k, r, sk), rows(w.q, r, sk)
			dkr, dqr := rows(w.dk, r, sk), rows(w.dq, r, sk)
			if s < 0 {
				dkd, dqd := rows(w.dkd, r, sk), rows(w.dqd, r, sk)
				for i := range dgam {
					dkr[i] += gam[i] * dkd[i]
					dqr[i] += gam[i] * dqd[i]
					dgam[i] = kr[i]*dkd[i] + qr[i]*dqd[i]
				}
				if r == n-1 {
					addInto(dgam, w.dlam)
				}
			} else {
				a, p := w.dA[r*L+s], w.dP[r*L+s]
				ks, dks := rows(w.k, s, sk), rows(w.dk, s, sk)
				for i := range dgam {
					gk := gam[i] * ks[i]
					dkr[i] += a * gk
					dqr[i] += p * gk
					c := a*kr[i] + p*qr[i]
					dks[i] += gam[i] * c
					dgam[i] = ks[i] * c
				}
				if r == n-1 {
					ws := rows(w.w, s, sk)
					for i := range dgam {
						dks[i] += gam[i] * ws[i]
						dgam[i] += ks[i] * ws[i]
					}
				}
			}
			// dg_t += sum_{r' >= t} Γ_r's ⊙ dΓ_r's for t = r.
			if w.kda {
				for i := range dgam {
					w.acc[i] += gam[i] * dgam[i]
				}
			} else {
				var sum F
				for _, x := range dgam {
					sum += x
				}
				w.acc[0] += gam[0] * sum
			}
			addInto(w.dg[r*w.gw:(r+1)*w.gw], w.acc)
		}
		if s >= 0 {
			// r = s: Γ_ss = 1 and no gate enters.
			ks, qs := rows(w.k, s, sk), rows(w.q, s, sk)
			p := w.dP[s*L+s]
			axpy(rows(w.dq, s, sk), p, ks)
			axpy(rows(w.dk, s, sk), p, qs)
			if s == n-1 {
				addInto(rows(w.dk, s, sk), rows(w.w, s, sk))
			}
		}
	}
}

// gdn:end

// backwardChunk is backward with the Chunk algorithm: it writes dv, dg,
// dbeta and dstate into g and each item's dq and dk into pdq and pdk
// ([S_k, T] per item), which backward sums into the q/k heads.
func backwardChunk[F Float](g *Grads[F], in *Inputs[F], dy Tensor[F], dStates []F, opt Options, pdq, pdk []F) {
	s := g.Shape
	L := min(opt.ChunkLength(), s.T)
	starts := chunkStarts(s.T, L, s.Snapshots)
	nc := len(starts) - 1
	ss := s.Sk * s.Sv
	type work struct {
		bnd, dM []F
		w       *chunkWork[F]
	}
	newWork := func() work {
		return work{make([]F, nc*ss), make([]F, ss), newChunkWork[F](s, L)}
	}
	parallel(s, opt, newWork, func(wk work, item int) {
		p := newPair(in, opt, s, item)
		w, dM := wk.w, wk.dM
		state := func(c int) []F { return wk.bnd[c*ss : (c+1)*ss] }

		// Pass 1: the state before every chunk; state(c) is M before
		// token starts[c].
		p.initialState(state(0))
		for c := 1; c < nc; c++ {
			t0, t1 := starts[c-1], starts[c]
			M := state(c)
			copy(M, state(c-1))
			w.gather(p, t0, t1-t0)
			w.pairs(t1 - t0)
			w.solve(M, t1-t0)
			w.advance(M, t1-t0)
		}

		// Pass 2: chunk by chunk from the last.
		clear(dM)
		for c := nc - 1; c >= 0; c-- {
			t0, t1 := starts[c], starts[c+1]
			n := t1 - t0
			// The state after the chunk's last token is snapshot slot T-t1.
			if slot := s.T - t1; slot < s.Snapshots && dStates != nil {
				addInto(dM, dStates[p.stateOffset(slot):][:ss])
			}
			w.gather(p, t0, n)
			for r := 0; r < n; r++ {
				dy.row(rows(w.gy, r, s.Sv), p.h, t0+r, p.seq)
			}
			w.backward(state(c), dM, n, p.scale)
			for r := 0; r < n; r++ {
				t := t0 + r
				row := (p.seq*s.T+t)*s.Hv + p.h
				copy(g.DV[row*s.Sv:(row+1)*s.Sv], rows(w.dv, r, s.Sv))
				copy(g.DG[row*s.GateWidth:(row+1)*s.GateWidth], rows(w.dg, r, s.GateWidth))
				g.DBeta[row] = w.dbeta[r]
				off := (item*s.T + t) * s.Sk
				copy(pdq[off:off+s.Sk], rows(w.dq, r, s.Sk))
				copy(pdk[off:off+s.Sk], rows(w.dk, r, s.Sk))
			}
		}
		termDstate(g.DState[p.stateOffset(0):][:ss], dM)
	})
}
