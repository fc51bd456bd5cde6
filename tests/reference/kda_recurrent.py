"""The gated delta rule of KDA (k3lab's recurrent form in double and in float, and its chunked
form) against the same recurrence written token by token in PyTorch float64 with autograd: the
output, the final state, and the gradients of <out, dout> + <final_state, dfinal_state> with respect
to q, k, v, g, beta and the initial state. Cases: two batch rows, and three packed documents in one
row (the state restarts from each document's own initial state), with decays of the bounded gate's
typical size; slow decays (what a freshly initialized layer produces) over several full 64-token
chunks, with and without a final partial one, so that the state each chunk hands to the next
carries weight; and half the channels at the gate's lower bound."""
import sys

import numpy as np
import torch

import harness
import st
from harness import rel_err

# name, B, T, H, K, V, doc_starts, decay (see log_decays)
CASES = [
    ("batch", 2, 37, 3, 16, 12, [], "bounded"),
    ("packed", 1, 50, 2, 8, 8, [0, 1, 20], "bounded"),
    ("slow", 2, 4 * 64 + 17, 2, 16, 12, [], "slow"),
    ("slow_full_chunks", 1, 5 * 64, 2, 8, 8, [0, 128, 192], "slow"),
    ("at_bound", 1, 3 * 64 + 9, 2, 16, 8, [], "at_bound"),
]
SEED = 5
# Max |k3lab - torch| / max |torch| per tensor, per run of the driver (its output files). The double run differs from torch only by the final
# rounding to fp32 (~5e-8); the float runs accumulate fp32 rounding over the sequence (~2e-7 for
# the recurrent form; the chunked form's products over a chunk and its state carried over up to
# five chunks of slow decays: up to 2.5e-6, in dg).
TOL = {"double": 1e-6, "float": 2e-6, "chunked": 1e-5}


def log_decays(kind, rng, shape):
    """bounded: -5 sigmoid(N(0, 1)), -2.5 per token on average; slow: log-uniform in [-0.1, -0.01];
    at_bound: slow, with every even channel at the bound -5."""
    if kind == "bounded":
        return -5 / (1 + np.exp(-rng.standard_normal(shape)))
    g = -(10.0 ** (-1 - rng.random(shape)))
    if kind == "at_bound":
        g[..., ::2] = -5.0
    return g


def recurrence(q, k, v, g, beta, S):
    """One sequence per leading index: q, k, g [N,T,H,K]; v [N,T,H,V]; beta [N,T,H]; S [N,H,K,V]
    the initial states -> out [N,T,H,V], final [N,H,K,V]."""
    outs = []
    for t in range(q.shape[1]):
        S = S * torch.exp(g[:, t])[..., None]                                # Diag(e^g) S
        u = v[:, t] - (S * k[:, t, ..., None]).sum(-2)                      # v - Sᵀk
        S = S + beta[:, t][..., None, None] * k[:, t][..., None] * u[..., None, :]
        outs.append((S * q[:, t, ..., None]).sum(-2))                       # Sᵀq
    return torch.stack(outs, dim=1), S


def torch_recurrence(q, k, v, g, beta, s0, starts):
    """The batch rows side by side, or (starts given, B = 1) one document after the other."""
    if not starts:
        return recurrence(q, k, v, g, beta, s0)
    parts = [recurrence(*(x[:, b:e] for x in (q, k, v, g, beta)), s0[n:n + 1])
             for n, (b, e) in enumerate(zip(starts, starts[1:] + [q.shape[1]]))]
    return torch.cat([o for o, _ in parts], dim=1), torch.cat([f for _, f in parts])


def unit(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def check(case, exe, work):
    name, B, T, H, K, V, starts, decay = case
    N = len(starts) if starts else B
    rng = np.random.default_rng(SEED)
    x = {
        "q": unit(rng.standard_normal((B, T, H, K))) / np.sqrt(K),
        "k": unit(rng.standard_normal((B, T, H, K))),
        "v": rng.standard_normal((B, T, H, V)),
        "g": log_decays(decay, rng, (B, T, H, K)),
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
    print(f"{name}: B={B} T={T} H={H} K={K} V={V} doc_starts={starts} decays {decay}")
    rows = []
    for run, tol in TOL.items():
        ours = st.load(work / f"{run}.safetensors")
        rows += [(f"{run:7s} {what}", rel_err(ours[what], ref), tol) for what, ref in want.items()]
    return harness.report(rows)


def main():
    args = harness.parse_args()
    return harness.verdict(all([check(c, args.exe, args.workdir / c[0]) for c in CASES]))


if __name__ == "__main__":
    sys.exit(main())
