"""PyTorch's side of bench_small_models: training steps of the K3 reference model
(tests/reference/k3torch.py: KDA in its recurrent form, token by token; the MoE looping over
experts) in float32 with AdamW, timed like k3lab's. The bench drives it with --serve: it prints
`blas <library>` once its model is built, then the seconds of one step per line it reads.
The environment is the bench's (see bench/README.md, train_vs_torch).
"""
import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "reference"))
from k3ref import decay_groups  # noqa: E402
from k3torch import Config, K3Model  # noqa: E402
from train_vs_torch import blas_in_use  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--serve", action="store_true", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = Config.load(args.config)
    model = K3Model(config)
    model.init_normal(seed=1)
    gen = torch.Generator().manual_seed(2)
    data = torch.randint(0, config.vocab_size, (args.batch, args.seq + 1), generator=gen)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    opt = torch.optim.AdamW(decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            foreach=False)

    def step():
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total, count = model.loss(tokens, targets)
        (total / count).backward()
        opt.step()
        return time.perf_counter() - start

    print(f"blas {blas_in_use()}", flush=True)
    for _ in sys.stdin:
        print(f"{step():.6f}", flush=True)


if __name__ == "__main__":
    main()
