"""The k3lab dense model against k3ref.py in float64: logits, loss, every parameter gradient, and
the losses of 10 AdamW steps, starting from the weights k3lab initialized and saved."""
import sys

import numpy as np
import torch

import harness
from harness import rel_err
from k3ref import IGNORE_INDEX, Config, K3Dense, decay_groups

B, T, SEED = 2, 24, 1234
LR, BETAS, EPS, WEIGHT_DECAY, TRAIN_STEPS = 1e-2, (0.9, 0.95), 1e-8, 0.1, 10
# Errors are max |k3lab - torch| / max |torch| over a tensor (losses: relative, per step).
# Measured (float32 k3lab vs float64 torch): logits 2.7e-7, loss 2e-8, grads <= 8.8e-7, train
# losses <= 7.8e-7; the tolerances leave ~10x for other GEMM kernels and reduction orders.
TOL_LOGITS, TOL_LOSS, TOL_GRAD, TOL_TRAIN = 5e-6, 1e-6, 1e-5, 1e-5


def main():
    args = harness.parse_args()
    config_path = harness.config_path("dense-tiny.json")
    config = Config.load(config_path)
    tokens, targets = harness.make_batch(config.vocab_size, SEED, B, T, IGNORE_INDEX, drop_fraction=0.15)
    ours, weights = harness.run_model_driver(args.exe, args.workdir, config_path, SEED, tokens, targets)

    model = K3Dense(config).double()
    model.load_k3lab(weights)
    tok, tgt = torch.from_numpy(tokens), torch.from_numpy(targets)
    rows = []  # (what, error, tolerance)
    rows.append(("logits", rel_err(ours["logits"], model(tok).reshape(B * T, -1)), TOL_LOGITS))
    total, count = model.loss(tok, tgt)
    loss = total / count
    loss.backward()
    rows.append(("loss", rel_err(ours["loss"], loss.reshape(1)), TOL_LOSS))
    for name, p in model.named_parameters():
        rows.append(("grad." + name, rel_err(ours["grad." + name], p.grad), TOL_GRAD))

    opt = torch.optim.AdamW(decay_groups(model, WEIGHT_DECAY), lr=LR, betas=BETAS, eps=EPS)
    losses = []
    for _ in range(TRAIN_STEPS):
        opt.zero_grad()
        total, count = model.loss(tok, tgt)
        (total / count).backward()
        opt.step()
        losses.append(float(total / count))
    steps_err = np.abs(ours["train_losses"] - np.array(losses)) / np.abs(np.array(losses))
    rows += [(f"train loss {i}", float(e), TOL_TRAIN) for i, e in enumerate(steps_err)]

    print(f"train losses: k3lab {np.round(ours['train_losses'].astype(float), 5).tolist()}")
    print(f"              torch {np.round(losses, 5).tolist()}")
    return harness.verdict(harness.report(rows))


if __name__ == "__main__":
    sys.exit(main())
