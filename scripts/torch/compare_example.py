#!/usr/bin/env python3
"""The README's round trip: save tensors in fla's layout with numpy, run
`gdn grad` on them, and compare its float64 gradients with PyTorch's.

Usage: python3 scripts/torch/compare_example.py [GDN]   (GDN: the gdn binary, default "gdn")

The naive float32 recurrence of make_fixtures.py stands in for fla's kernels
here; with fla, o and ht come from fla.ops.gated_delta_rule (for example
chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
output_final_state=True)), which takes the same tensors in the same layout.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import naive  # noqa: E402

gdn = sys.argv[1] if len(sys.argv) > 1 else "gdn"
torch.manual_seed(0)
B, T, H, HV, K, V = 2, 64, 2, 4, 32, 32
f32 = dict(dtype=torch.float32)
q = torch.nn.functional.normalize(torch.randn(B, T, H, K, **f32), dim=-1).requires_grad_()
k = torch.nn.functional.normalize(torch.randn(B, T, H, K, **f32), dim=-1).requires_grad_()
v = torch.randn(B, T, HV, V, **f32).requires_grad_()
g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, **f32)).requires_grad_()
beta = torch.rand(B, T, HV, **f32).requires_grad_()
h0 = torch.randn(B, HV, K, V, **f32).requires_grad_()
o, ht = naive(q, k, v, g, beta, K ** -0.5, h0, "interleave")
do, dht = torch.randn_like(o), torch.randn_like(ht)
((o * do).sum() + (ht * dht).sum()).backward()

# --- README snippet ---
import subprocess
import numpy as np

def to_np(x):  # numpy has no bfloat16: save float32 unless the tensor is float64
    return x.detach().cpu().to(torch.float64 if x.dtype == torch.float64 else torch.float32).numpy()

# q, k [B,T,H,K]; v [B,T,HV,V]; g [B,T,HV] or [B,T,HV,K]; beta [B,T,HV]; h0 [B,HV,K,V]:
# the leaves you gave fla; do, dht: the gradients of o and ht you back-propagated.
np.savez("case.npz", **{n: to_np(x) for n, x in
                        dict(q=q, k=k, v=v, g=g, beta=beta, h0=h0, do=do, dht=dht).items()})
subprocess.run([gdn, "grad", "-in", "case.npz", "-out", "result.npz"], check=True)

r = np.load("result.npz")  # float64
mine = dict(o=o, ht=ht, dq=q.grad, dk=k.grad, dv=v.grad, dg=g.grad, dbeta=beta.grad, dh0=h0.grad)
for name, x in mine.items():
    ref, x = r[name], to_np(x).astype(np.float64)
    print(f"{name:5s} relative RMS error {np.sqrt(np.mean((ref - x) ** 2) / np.mean(ref ** 2)):.1e}")
# --- end of snippet ---
