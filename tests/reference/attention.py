"""Tiled causal attention (k3lab, fp32) against PyTorch autograd in float64 with an explicit causal
mask: out, log-sum-exp, and the gradients of <out, dout> with respect to q, k, k_r and v.
Cases: plain heads, an MLA-like shape (shared k_r, value dim != key dim), and a longer sequence
over several tiles with a ragged last tile and an explicit scale."""
import math
import sys

import numpy as np
import torch

import harness
import st
from harness import rel_err

# name, B, T, H, dqk, dr, dv, scale (0: 1/sqrt(dqk + dr))
CASES = [
    ("plain", 2, 67, 3, 32, 0, 32, 0.0),
    ("mla", 1, 150, 3, 32, 16, 24, 0.0),
    ("long", 1, 520, 2, 64, 0, 48, 0.1),
]
SEED = 11
# Errors are max |k3lab - torch| / max |torch| over a tensor; measured 1e-7 (out, lse) to 7e-7
# (gradients), from fp32 accumulation over a few hundred keys.
TOL = 5e-6


def torch_attention(q, k, kr, v, dr, scale):
    """q [B,T,H,dqk+dr], k [B,T,H,dqk], kr [B,T,dr] or None, v [B,T,H,dv] -> out, lse [B,H,T]."""
    T, H = q.shape[1], q.shape[2]
    if dr > 0:
        k = torch.cat([k, kr[:, :, None, :].expand(-1, -1, H, -1)], dim=-1)
    scores = torch.einsum("bthd,bshd->bhts", q, k) * scale
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # key s > query t
    scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, dim=-1), v)
    return out, lse


def check(case, exe, work):
    name, B, T, H, dqk, dr, dv, scale = case
    rng = np.random.default_rng(SEED)
    x = {
        "q": rng.standard_normal((B, T, H, dqk + dr)),
        "k": rng.standard_normal((B, T, H, dqk)),
        "v": rng.standard_normal((B, T, H, dv)),
        "dout": rng.standard_normal((B, T, H, dv)),
    }
    if dr > 0:
        x["kr"] = rng.standard_normal((B, T, dr))
    x = {n: a.astype(np.float32) for n, a in x.items()}
    harness.run_driver(exe, work, x, {"dr": dr, "scale": scale})
    ours = st.load(work / "outputs.safetensors")

    t = {n: torch.from_numpy(a).double().requires_grad_(n != "dout") for n, a in x.items()}
    out, lse = torch_attention(t["q"], t["k"], t.get("kr"), t["v"], dr,
                               scale if scale != 0 else 1 / math.sqrt(dqk + dr))
    (out * t["dout"]).sum().backward()
    grads = [("d" + n, t[n].grad) for n in ("q", "k", "kr", "v") if n in t]
    print(f"{name}: B={B} T={T} H={H} dqk={dqk} dr={dr} dv={dv} scale={scale or 'default'}")
    return harness.report([(what, rel_err(ours[what], ref), TOL)
                           for what, ref in [("out", out), ("lse", lse)] + grads])


def main():
    args = harness.parse_args()
    return harness.verdict(all([check(c, args.exe, args.workdir / c[0]) for c in CASES]))


if __name__ == "__main__":
    sys.exit(main())
