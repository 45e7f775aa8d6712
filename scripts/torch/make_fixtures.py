#!/usr/bin/env python3
"""Write the PyTorch fixtures that `gdn grad` is tested against.

Usage: python3 scripts/torch/make_fixtures.py OUTDIR

For each case it draws inputs in fla's layout (q, k [B,T,H,K]; v [B,T,HV,V];
g [B,T,HV] or [B,T,HV,K] (KDA); beta [B,T,HV]; do [B,T,HV,V]; optional h0,
dht [B,HV,K,V]; optional 0-d scale), runs the gated delta rule as a naive
loop over t in float64 (the recurrence of package gdn's documentation, written on fla's state S = M^T of
shape [K, V]), and takes PyTorch autograd's gradients of
L = sum(o * do) + sum(ht * dht). It writes OUTDIR/NAME.npz holding the
inputs (float32 or float64, as the case says) and PyTorch's o, ht, dq, dk,
dv, dg, dbeta, dh0 (float64), and OUTDIR/cases.json listing the cases with
the script's self-checks: a second, per-head loop forward, and central
differences of L along random directions.

Float32 cases store float32 inputs; the reference is still computed in
float64 from those float32 values.
"""
import json
import math
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

# name, B, T, H, HV, K, V, kda, heads, h0, dht, input dtype, scale (None: default), notes
CASES = [
    ("scalar_interleave_f64", 2, 7, 2, 4, 8, 6, False, "interleave", True, True, "float64", None, ""),
    ("scalar_tile_f64", 2, 7, 2, 4, 8, 6, False, "tile", False, False, "float64", None, ""),
    ("kda_interleave_f32", 1, 9, 1, 3, 6, 10, True, "interleave", True, False, "float32", None, ""),
    ("kda_tile_f64", 2, 5, 2, 4, 8, 4, True, "tile", False, True, "float64", None, "q stored Fortran-ordered"),
    ("t1_f32", 1, 1, 1, 2, 4, 4, False, "interleave", True, True, "float32", 0.3, "T = 1, explicit 0-d scale"),
    ("long_f64", 1, 40, 2, 4, 16, 16, False, "interleave", True, True, "float64", None, "T = 40: 6 segments at C = 7"),
    ("kda_broadcast_f32", 2, 19, 2, 6, 32, 64, True, "interleave", True, True, "float32", None,
     "head sizes the Metal kernels take: S_k 32 != S_v 64, 3 value heads per q/k head"),
    ("scalar_tile_s64_f64", 1, 33, 1, 3, 64, 64, False, "tile", True, True, "float64", None,
     "S 64, 3 value heads over 1 q/k head under ggml's mapping, T 33: 6 segments at C 6"),
]


def head_index(H, HV, heads):
    """The q/k head each value head reads: h // (HV/H) (interleave, fla) or h % H (tile, ggml)."""
    r = HV // H
    idx = torch.arange(HV)
    return idx // r if heads == "interleave" else idx % H


def naive(q, k, v, g, beta, scale, h0, heads):
    """The recurrence, vectorized over (batch, value head), looping over t.

    fla's state S [B, HV, K, V] is gdn's M transposed: S[i][j] = M[j][i].
    """
    B, T, H, K = q.shape
    HV = v.shape[2]
    idx = head_index(H, HV, heads)
    qh, kh = q[:, :, idx, :], k[:, :, idx, :]  # [B, T, HV, K]
    S = h0
    outs = []
    for t in range(T):
        a = torch.exp(g[:, t])  # [B, HV] or [B, HV, K]
        Sp = S * (a[:, :, None, None] if g.dim() == 3 else a[:, :, :, None])  # M diag(a)
        kt, qt = kh[:, t], qh[:, t]
        u = torch.einsum("bhkv,bhk->bhv", Sp, kt)  # u = Mp k
        d = beta[:, t, :, None] * (v[:, t] - u)  # d = beta (v - u)
        S = Sp + kt[:, :, :, None] * d[:, :, None, :]  # M = Mp + d k^T
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", S, qt))  # y = scale M q
    return torch.stack(outs, dim=1), S


def naive_loop(q, k, v, g, beta, scale, h0, heads):
    """The same forward, one (batch, value head) at a time with M = S^T, as gdn writes it."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    r = HV // H
    o = torch.zeros(B, T, HV, V)
    ht = torch.zeros(B, HV, K, V)
    for b in range(B):
        for h in range(HV):
            hq = h // r if heads == "interleave" else h % H
            M = h0[b, h].T.clone()  # [V, K]
            for t in range(T):
                a = torch.exp(g[b, t, h]) * torch.ones(K)
                Mp = M * a[None, :]
                u = Mp @ k[b, t, hq]
                d = beta[b, t, h] * (v[b, t, h] - u)
                M = Mp + torch.outer(d, k[b, t, hq])
                o[b, t, h] = scale * (M @ q[b, t, hq])
            ht[b, h] = M.T
    return o, ht


def make(case, seed):
    name, B, T, H, HV, K, V, kda, heads, has_h0, has_dht, dtype, scale, notes = case
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    def unif(lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen)

    q = randn(B, T, H, K)
    q = q / q.norm(dim=-1, keepdim=True)
    k = randn(B, T, H, K)
    k = k / k.norm(dim=-1, keepdim=True)
    v = unif(-1, 1, B, T, HV, V)
    g = unif(-1.5, -0.01, *((B, T, HV, K) if kda else (B, T, HV)))
    beta = unif(0, 1, B, T, HV)
    do = randn(B, T, HV, V)
    h0 = 0.5 * randn(B, HV, K, V) if has_h0 else None
    dht = randn(B, HV, K, V) if has_dht else None
    inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "do": do}
    if h0 is not None:
        inputs["h0"] = h0
    if dht is not None:
        inputs["dht"] = dht
    if dtype == "float32":  # round the inputs; compute from the rounded values in float64
        inputs = {n: x.float().double() for n, x in inputs.items()}
    sc = scale if scale is not None else 1 / math.sqrt(K)

    leaves = {n: inputs[n].clone().requires_grad_(True) for n in ("q", "k", "v", "g", "beta")}
    leaves["h0"] = (inputs["h0"] if has_h0 else torch.zeros(B, HV, K, V)).clone().requires_grad_(True)

    def loss_of(x):
        o, ht = naive(x["q"], x["k"], x["v"], x["g"], x["beta"], sc, x["h0"], heads)
        L = (o * inputs["do"]).sum()
        if has_dht:
            L = L + (ht * inputs["dht"]).sum()
        return L, o, ht

    L, o, ht = loss_of(leaves)
    L.backward()
    grads = {"d" + n: leaves[n].grad.detach() for n in ("q", "k", "v", "g", "beta", "h0")}

    # Self-check 1: the per-head loop forward.
    o2, ht2 = naive_loop(*(leaves[n].detach() for n in ("q", "k", "v", "g", "beta")), sc, leaves["h0"].detach(), heads)
    fwd_err = max((o - o2).abs().max().item(), (ht - ht2).abs().max().item())

    # Self-check 2: central differences of L along random directions.
    fd_errs = []
    with torch.no_grad():
        for _ in range(3):
            dirs = {n: randn(*x.shape) for n, x in leaves.items()}
            eps = 1e-5
            lp = loss_of({n: leaves[n] + eps * dirs[n] for n in leaves})[0].item()
            lm = loss_of({n: leaves[n] - eps * dirs[n] for n in leaves})[0].item()
            num = (lp - lm) / (2 * eps)
            ana = sum((grads["d" + n] * dirs[n]).sum().item() for n in leaves)
            fd_errs.append(abs(num - ana) / max(abs(ana), 1e-12))

    np_dtype = np.float32 if dtype == "float32" else np.float64
    arrays = {n: x.detach().numpy().astype(np_dtype) for n, x in inputs.items()}
    if name == "kda_tile_f64":
        arrays["q"] = np.asfortranarray(arrays["q"])
    if scale is not None:
        arrays["scale"] = np.array(scale, dtype=np.float64)
    arrays["o"] = o.detach().numpy()
    arrays["ht"] = ht.detach().numpy()
    for n, x in grads.items():
        arrays[n] = x.numpy()
    meta = {
        "name": name, "file": name + ".npz", "B": B, "T": T, "H": H, "HV": HV, "K": K, "V": V,
        "gate": "kda" if kda else "scalar", "heads": heads, "h0": has_h0, "dht": has_dht,
        "dtype": dtype, "scale": sc, "notes": notes, "seed": seed, "loss": L.item(),
        "selfcheck_forward_maxabs": fwd_err, "selfcheck_fd_relerr": max(fd_errs),
    }
    return arrays, meta


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_fixtures.py OUTDIR")
    out = sys.argv[1]
    metas = []
    ok = True
    for i, case in enumerate(CASES):
        arrays, meta = make(case, seed=1000 + i)
        np.savez(f"{out}/{meta['file']}", **arrays)
        # Read it back the way a user would.
        with np.load(f"{out}/{meta['file']}") as z:
            assert sorted(z.files) == sorted(arrays), z.files
        good = meta["selfcheck_forward_maxabs"] < 1e-12 and meta["selfcheck_fd_relerr"] < 1e-7
        ok &= good
        print(f"{meta['name']}: L = {meta['loss']:.12g}, loop forward max |diff| = {meta['selfcheck_forward_maxabs']:.2e},"
              f" central differences rel err = {meta['selfcheck_fd_relerr']:.2e} {'ok' if good else 'FAIL'}")
        metas.append(meta)
    with open(f"{out}/cases.json", "w") as f:
        json.dump({"torch": torch.__version__, "numpy": np.__version__, "cases": metas}, f, indent=1)
        f.write("\n")
    print("torch", torch.__version__, "numpy", np.__version__)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
