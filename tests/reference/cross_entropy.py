"""The fused LM head + cross-entropy (k3lab, fp32, chunk not dividing N) against PyTorch autograd
in float64: mean loss over non-ignored tokens, dh and dW."""
import sys

import numpy as np
import torch
import torch.nn.functional as F

import harness
import st
from harness import rel_err

N, D, V, CHUNK, SEED = 300, 64, 1000, 64, 7  # 300 = 4 * 64 + 44
IGNORE_INDEX = -100
# Errors are max |k3lab - torch| / max |torch| over a tensor (the loss: relative).
# fp32 logits with d = 64 and a 1000-way softmax; measured: loss ~1e-8, dh and dW ~1e-6.
TOL_LOSS, TOL_GRAD = 1e-6, 1e-5


def main():
    args = harness.parse_args()
    rng = np.random.default_rng(SEED)
    h = rng.standard_normal((N, D)).astype(np.float32)
    w = (0.5 * rng.standard_normal((V, D))).astype(np.float32)
    targets = rng.integers(0, V, size=N)
    targets[rng.random(N) < 0.2] = IGNORE_INDEX
    harness.run_driver(args.exe, args.workdir, {"h": h, "w": w, "targets": targets}, {"chunk": CHUNK})
    ours = st.load(args.workdir / "outputs.safetensors")

    th = torch.from_numpy(h).double().requires_grad_()
    tw = torch.from_numpy(w).double().requires_grad_()
    loss = F.cross_entropy(th @ tw.T, torch.from_numpy(targets), ignore_index=IGNORE_INDEX)
    loss.backward()
    count = int((targets != IGNORE_INDEX).sum())

    rows = [
        ("loss", rel_err(ours["loss"][0], loss), TOL_LOSS),
        ("dh", rel_err(ours["dh"], th.grad), TOL_GRAD),
        ("dW", rel_err(ours["dw"], tw.grad), TOL_GRAD),
    ]
    count_ok = int(ours["count"][0]) == count
    print(f"lm_head + cross-entropy, N={N} d={D} V={V} chunk={CHUNK}, {count} counted tokens"
          f" ({'ok' if count_ok else 'MISMATCH: k3lab counted ' + str(int(ours['count'][0]))})")
    return harness.verdict(harness.report(rows) and count_ok)


if __name__ == "__main__":
    sys.exit(main())
