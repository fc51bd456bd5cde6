"""Model families as released, built by k3lab against k3torch.py in float64: logits, mean loss and
the gradient of every parameter, from the weights k3lab initialized and saved (the model driver of
k3_model.cpp, which moves the norm weights and router biases off their identity values).
  configs/llama-nano.json        Llama: grouped-query attention (8 heads on 4 of keys and values),
                                 rotary embeddings with Llama 3's scaled frequencies, no output
                                 gate, SwiGLU MLPs;
  configs/deepseek-v3-nano.json  DeepSeek-V3: MLA without the gate, q_r and k_r turned by rotary
                                 embeddings; a dense first layer, then the standard MoE (sigmoid
                                 scores, the router bias selecting, routed_scaling_factor 2.5) with
                                 a shared expert.
Both sides read the configs' own field names (n_routed_experts, num_experts_per_tok, ...). The
sequences are long enough (T = 96) for the fastest pairs to turn several times."""
import sys

import numpy as np
import torch

import harness
from harness import rel_err
from k3ref import IGNORE_INDEX
from k3torch import Config, K3Model

B, T, SEED = 2, 96, 2468
# Errors are max |k3lab - torch| / max |torch| over a tensor (loss: relative).
# Measured (float32 k3lab vs float64 torch, 2 threads): llama-nano logits 3.8e-7, loss 1.3e-8,
# grads <= 1.0e-6; deepseek-v3-nano logits 3.7e-7, loss 6.9e-9, grads <= 1.0e-6. The tolerances
# leave ~10x for other GEMM kernels, thread counts and reduction orders.
TOL_LOGITS, TOL_LOSS, TOL_GRAD = 5e-6, 1e-6, 1e-5
MIN_MARGIN = 1e-6  # a top-k choice this close to a tie could flip between fp32 and fp64


def check(exe, work, name):
    config_path = harness.config_path(name)
    config = Config.load(config_path)
    tokens, targets = harness.make_batch(config.vocab_size, SEED, B, T, IGNORE_INDEX, drop_fraction=0.1)
    (work / config_path.stem).mkdir(exist_ok=True)
    ours, weights = harness.run_model_driver(exe, work / config_path.stem, config_path, SEED, tokens, targets)
    model = K3Model(config).double()
    model.load_k3lab(weights)
    tok, tgt = torch.from_numpy(tokens), torch.from_numpy(targets)
    rows = []  # (what, error, tolerance)
    with torch.no_grad():
        rows.append(("logits", rel_err(ours["logits"], model(tok).reshape(B * T, -1)), TOL_LOGITS))
    total, count = model.loss(tok, tgt)
    loss = total / count
    loss.backward()
    rows.append(("loss", rel_err(ours["loss"], loss.reshape(1)), TOL_LOSS))
    # The router biases only select: k3lab's gradient of them must be exactly zero.
    zero = [n for n, p in model.named_parameters() if p.grad is None and np.any(ours["grad." + n] != 0)]
    rows += [("grad." + n, rel_err(ours["grad." + n], p.grad), TOL_GRAD)
             for n, p in model.named_parameters() if p.grad is not None]
    margins = model.moe_margins()
    margin = float(margins.min()) if margins.numel() else float("inf")
    grads = sorted(rows[2:], key=lambda r: -r[1])
    print(f"{name}: B={B} T={T} targets counted={count}; loss k3lab {float(ours['loss'][0]):.7f} "
          f"torch {float(loss):.7f}; smallest top-k margin {margin:.2e}")
    ok = harness.report(rows, shown=rows[:2] + grads[:6])
    for n in zero:
        print(f"FAIL: grad.{n} is not zero")
    if margin < MIN_MARGIN:
        print(f"FAIL: a top-k selection is within {margin:.1e} of a tie; choose another batch or seed")
    print(f"{sum(err <= tol for _, err, tol in rows)}/{len(rows)} within tolerance")
    return ok and not zero and margin >= MIN_MARGIN


def main():
    args = harness.parse_args()
    torch.manual_seed(0)
    results = [check(args.exe, args.workdir, name) for name in ("llama-nano.json", "deepseek-v3-nano.json")]
    return harness.verdict(all(results))


if __name__ == "__main__":
    sys.exit(main())
