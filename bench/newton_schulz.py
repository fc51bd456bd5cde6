"""PyTorch's side of bench_newton_schulz: Muon's Newton-Schulz orthogonalization (5 quintic steps,
the usual step-by-step form) on a batch of matrices, timed like k3lab's. It prints "ready" once
its input is built, then answers each line it reads: "run" with the seconds of one
orthogonalization, "fro2" with the last output's Frobenius norm squared (a cross-check of the two
sides). The bench sends a "run" after each of k3lab's repetitions.

PyTorch gets its best form of the algorithm: fused multiply-adds (addmm / baddbmm), no extra
temporaries. The bench launches it with its own environment (see newton_schulz.cpp).
"""
import argparse
import sys
import time

import numpy as np
import torch

A, B, C = 3.4445, -4.7750, 2.0315


def newton_schulz(g, steps):
    """g: [m, n] or a batch [b, m, n]."""
    mul_add = torch.addmm if g.dim() == 2 else torch.baddbmm
    x = g / (torch.linalg.matrix_norm(g, keepdim=True) + 1e-7)
    for _ in range(steps):
        a = x @ x.mT
        b = mul_add(a, a, a, beta=B, alpha=C)  # bA + cA²
        x = mul_add(x, b, x, beta=A)           # aX + BX
    return x


def bench_input(batch, m, n):
    """The same deterministic values as the C++ side: splitmix64 of the element index."""
    z = np.arange(batch * m * n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    values = (z >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24) - np.float32(0.5)
    return torch.from_numpy(values.reshape(batch, m, n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = bench_input(args.batch, args.m, args.n)
    if args.batch == 1:
        g = g[0]
    x = None
    print("ready", flush=True)
    with torch.no_grad():
        for request in sys.stdin:
            if request.strip() == "run":
                start = time.perf_counter()
                x = newton_schulz(g, args.steps)
                print(f"{time.perf_counter() - start:.6f}", flush=True)
            elif request.strip() == "fro2" and x is not None:
                print(f"{float((x.double() ** 2).sum()):.9e}", flush=True)
            else:
                print(f"unknown request {request.strip()!r}", flush=True)


if __name__ == "__main__":
    main()
