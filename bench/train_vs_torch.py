"""PyTorch's side of bench_train_vs_torch: training steps of the k3ref dense model (zeroed
gradients, forward, backward, AdamW) in float32, or under bf16 autocast (matrix products in bf16,
float32 weights and optimizer), timed like k3lab's. By hand it runs --warmup and --steps steps at
--precision and prints `tokens_per_s <median>` last; the bench drives it with --serve, one step per
line "fp32" or "bf16".

The bench launches it with the environment it needs (see train_vs_torch.cpp); run by hand, set
OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive GLIBC_TUNABLES=glibc.malloc.hugetlb=1 and unset
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for the same conditions.
"""
import argparse
import ctypes
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "reference"))
from k3ref import Config, K3Dense, decay_groups  # noqa: E402


def blas_in_use():
    """The BLAS library torch's matmuls run on (and OpenBLAS's kernel): the reference BLAS is
    ~100x slower."""
    with open("/proc/self/maps") as f:
        path = next((line.split()[-1] for line in f if "blas" in line), "none found")
    if "openblas" not in path:
        return path
    lib = ctypes.CDLL(path)  # already loaded: this only looks it up
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return f"{path} (OpenBLAS kernel {lib.openblas_get_corename().decode()})"


def dense_model_and_batch(config_path, batch, seq):
    """The k3ref dense model of a config (normal init, seed 1) and a random batch of B x T tokens
    with their next-token targets (seed 2): what both PyTorch benches train on."""
    config = Config.load(config_path)
    model = K3Dense(config)
    model.init_normal(seed=1)
    gen = torch.Generator().manual_seed(2)
    data = torch.randint(0, config.vocab_size, (batch, seq + 1), generator=gen)
    return model, data[:, :-1].contiguous(), data[:, 1:].contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--serve", action="store_true",
                    help="print 'blas ...' once ready, then time one step per line read from stdin")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model, tokens, targets = dense_model_and_batch(args.config, args.batch, args.seq)
    # The fastest AdamW torch 1.13 has on CPU: the single-tensor loop (foreach=False, its default).
    # `fused` does not exist there (AdamW gained it later, for CUDA), and foreach=True measured
    # slower on this host: one step over L6 d384's parameters 0.37 s against 0.11 s, over L12
    # d768's 15.9 s against 8.7 s (medians, the two alternating, 2 threads, a loaded host).
    opt = torch.optim.AdamW(decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            foreach=False)

    def step(precision):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # Mixed precision as PyTorch users train on CPU: autocast around the forward only.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            total, count = model.loss(tokens, targets)
        (total / count).backward()
        opt.step()
        return time.perf_counter() - start

    if args.serve:
        print(f"blas {blas_in_use()}", flush=True)
        for line in sys.stdin:
            print(f"{step(line.strip()):.6f}", flush=True)
        return
    for _ in range(args.warmup):
        step(args.precision)
    times = [step(args.precision) for _ in range(args.steps)]
    print(f"blas {blas_in_use()}")
    print(f"step times (s): {' '.join(f'{t:.3f}' for t in times)}")
    print(f"tokens_per_s {args.batch * args.seq / statistics.median(times):.1f}")

if __name__ == "__main__":
    main()
