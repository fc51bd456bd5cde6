"""PyTorch's side of bench_decode_vs_torch: greedy generation with the reference model of a config
(k3ref.py's dense model, or k3torch.py's K3 model when it has MLA) on k3lab's weights and prompts,
through the reference's decoding caches (make_cache, decode), timed like k3lab's: a prefill of the
B prompts (one forward over [B, P], filling the caches), then one forward of a single token per
sequence and step. The dense model caches each layer's keys and values; the K3 model each KDA
layer's convolution windows and recurrent state, and each MLA layer's normalized latents and k_r,
over which it attends with kv_b_proj absorbed. With --precision bf16 the model runs under CPU
autocast to bfloat16: the attention caches hold bfloat16, KDA's state stays float32.

Served (--serve): prints `blas <library>` once ready, then answers each line with
`<prefill seconds> <decode seconds>` of one generation. By hand it prints both rates.
"""
import argparse
import contextlib
import json
import sys
import time

import torch

from train_vs_torch import blas_in_use  # this folder; it puts tests/reference on the path

import st  # noqa: E402
from k3ref import Config, K3Dense  # noqa: E402
from k3torch import Config as K3Config, K3Model  # noqa: E402


def reference_model(config_path, weights):
    """The reference model of a config (K3's when it has MLA, as k3lab decides) with k3lab's
    weights."""
    with open(config_path) as f:
        j = json.load(f)
    if j.get("text_config", j).get("q_lora_rank", 0) > 0:
        model = K3Model(K3Config(j))
    else:
        model = K3Dense(Config(j))
    model.load_k3lab(weights)
    return model.eval()


def generate(model, prompts, tokens, precision):
    """Greedy: the prefill's argmax, then tokens - 1 decode steps. Returns (prefill s, decode s)."""
    B, P = prompts.shape
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with torch.inference_mode(), autocast:
        cache = model.make_cache(B, P + tokens, dtype)
        start = time.perf_counter()
        next_tokens = model.decode(prompts, cache).argmax(-1)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(tokens - 1):
            next_tokens = model.decode(next_tokens[:, None], cache).argmax(-1)
        return prefill, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--weights", required=True, help="k3lab's weights (safetensors, K3 names)")
    ap.add_argument("--prompts", required=True, help="safetensors: `prompts` [B, P], ids as floats")
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", action="store_true",
                    help="print 'blas ...' once ready, then time one generation per input line")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = reference_model(args.config, args.weights)
    prompts = torch.from_numpy(st.load(args.prompts)["prompts"]).long()

    if args.serve:
        print(f"blas {blas_in_use()}", flush=True)
        for _ in sys.stdin:
            prefill, decode = generate(model, prompts, args.tokens, args.precision)
            print(f"{prefill:.6f} {decode:.6f}", flush=True)
        return
    generate(model, prompts, args.tokens, args.precision)  # warm-up
    prefill, decode = generate(model, prompts, args.tokens, args.precision)
    B, P = prompts.shape
    print(f"prefill_tokens_per_s {B * P / prefill:.1f}")
    print(f"decode_tokens_per_s {B * (args.tokens - 1) / decode:.1f}")


if __name__ == "__main__":
    main()
