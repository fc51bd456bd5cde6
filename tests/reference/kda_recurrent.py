"""The recurrent gated delta rule of KDA (k3lab, in double and in float) against the same
recurrence written token by token in PyTorch float64 with autograd: the output, the final state,
and the gradients of <out, dout> + <final_state, dfinal_state> with respect to q, k, v, g, beta and
the initial state. Cases: two batch rows, and three packed documents in one row (the state restarts
from each document's own initial state)."""
import sys

import numpy as np
import torch

import harness
import st
from harness import rel_err

# name, B, T, H, K, V, doc_starts
CASES = [
    ("batch", 2, 37, 3, 16, 12, []),
    ("packed", 1, 50, 2, 8, 8, [0, 1, 20]),
]
SEED = 5
# Max |k3lab - torch| / max |torch| per tensor. The double run differs from torch only by the final
# rounding to fp32 (~5e-8); the float run accumulates fp32 rounding over the sequence (~2e-7).
TOL = {"double": 1e-6, "float": 2e-6}


def torch_recurrence(q, k, v, g, beta, s0, starts):
    """q, k, g [B,T,H,K]; v [B,T,H,V]; beta [B,T,H]; s0 [N,H,K,V] -> out [B,T,H,V], final [N,H,K,V]."""
    B, T = q.shape[:2]
    seqs = [(b, 0, T) for b in range(B)] if not starts else \
        [(0, s, e) for s, e in zip(starts, starts[1:] + [T])]
    rows, finals = {}, []
    for n, (b, begin, end) in enumerate(seqs):
        S = s0[n]
        for t in range(begin, end):
            S = S * torch.exp(g[b, t])[:, :, None]                       # Diag(e^g) S
            u = v[b, t] - torch.einsum("hkv,hk->hv", S, k[b, t])         # v - Sᵀk
            S = S + beta[b, t][:, None, None] * k[b, t][:, :, None] * u[:, None, :]
            rows[(b, t)] = torch.einsum("hkv,hk->hv", S, q[b, t])        # Sᵀq
        finals.append(S)
    out = torch.stack([torch.stack([rows[(b, t)] for t in range(T)]) for b in range(B)])
    return out, torch.stack(finals)


def unit(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def check(case, exe, work):
    name, B, T, H, K, V, starts = case
    N = len(starts) if starts else B
    rng = np.random.default_rng(SEED)
    x = {
        "q": unit(rng.standard_normal((B, T, H, K))) / np.sqrt(K),
        "k": unit(rng.standard_normal((B, T, H, K))),
        "v": rng.standard_normal((B, T, H, V)),
        "g": -5 / (1 + np.exp(-rng.standard_normal((B, T, H, K)))),
        "beta": 1 / (1 + np.exp(-rng.standard_normal((B, T, H)))),
        "initial_state": 0.5 * rng.standard_normal((N, H, K, V)),
        "dout": rng.standard_normal((B, T, H, V)),
        "dfinal_state": rng.standard_normal((N, H, K, V)),
    }
    x = {n: a.astype(np.float32) for n, a in x.items()}
    harness.run_driver(exe, work, x, {"doc_starts": ",".join(map(str, starts))})

    t = {n: torch.from_numpy(a).double().requires_grad_(not n.startswith("d")) for n, a in x.items()}
    out, final = torch_recurrence(t["q"], t["k"], t["v"], t["g"], t["beta"], t["initial_state"], starts)
    ((out * t["dout"]).sum() + (final * t["dfinal_state"]).sum()).backward()
    want = {"out": out, "final_state": final}
    want.update({"d" + n: t[n].grad for n in ("q", "k", "v", "g", "beta", "initial_state")})
    print(f"{name}: B={B} T={T} H={H} K={K} V={V} doc_starts={starts}")
    rows = []
    for precision, tol in TOL.items():
        ours = st.load(work / f"{precision}.safetensors")
        rows += [(f"{precision:6s} {what}", rel_err(ours[what], ref), tol) for what, ref in want.items()]
    return harness.report(rows)


def main():
    args = harness.parse_args()
    return harness.verdict(all([check(c, args.exe, args.workdir / c[0]) for c in CASES]))


if __name__ == "__main__":
    sys.exit(main())
