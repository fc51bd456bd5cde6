"""PyTorch's side of bench_decode_vs_torch: greedy generation with the k3ref dense model and a KV
cache, timed like k3lab's: a prefill of the B prompts (one forward over [B, P], filling the
cache), then one forward of a single token per sequence and step, reading the cache. With
--precision bf16 the model runs under CPU autocast to bfloat16 (the cache holds bfloat16).

Served (--serve): prints `blas <library>` once ready, then answers each line with
`<prefill seconds> <decode seconds>` of one generation. By hand it prints both rates.
"""
import argparse
import contextlib
import math
import sys
import time

import torch

from train_vs_torch import blas_in_use, dense_model_and_batch


class CachedDecoder:
    """The k3ref dense model's forward over new tokens at positions pos.., keys and values
    appended to per-layer caches [B, H, max_len, D]."""

    def __init__(self, model, batch, max_len, dtype):
        c = model.config
        self.model, self.H, self.D = model, c.num_attention_heads, c.head_dim
        shape = (batch, self.H, max_len, self.D)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in model.model.layers]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in model.model.layers]

    def forward(self, tokens, pos):
        """tokens [B, T] at positions pos..pos+T-1 -> the last position's logits [B, V]."""
        B, T = tokens.shape
        decoder = self.model.model
        x = decoder.embed_tokens(tokens)
        for i, layer in enumerate(decoder.layers):
            a, h = layer.self_attn, layer.input_layernorm(x)
            q, k, v = (f(h).view(B, T, self.H, self.D).transpose(1, 2)
                       for f in (a.q_proj, a.k_proj, a.v_proj))
            self.k[i][:, :, pos:pos + T] = k
            self.v[i][:, :, pos:pos + T] = v
            keys, values = self.k[i][:, :, :pos + T], self.v[i][:, :, :pos + T]
            scores = (q @ keys.transpose(-1, -2)) * (1.0 / math.sqrt(self.D))
            if T > 1:  # query t sees keys up to pos + t
                future = torch.ones(T, pos + T, dtype=torch.bool).triu(pos + 1)
                scores = scores.masked_fill(future, float("-inf"))
            attn = (scores.softmax(-1) @ values).transpose(1, 2).reshape(B, T, self.H * self.D)
            x = x + a.o_proj(attn * torch.sigmoid(a.g_proj(h)))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(decoder.norm(x[:, -1]))


def generate(model, prompts, tokens, precision):
    """Greedy: the prefill's argmax, then tokens - 1 decode steps. Returns (prefill s, decode s)."""
    B, P = prompts.shape
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with torch.inference_mode(), autocast:
        cache = CachedDecoder(model, B, P + tokens, dtype)
        start = time.perf_counter()
        next_tokens = cache.forward(prompts, 0).argmax(-1)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(tokens - 1):
            next_tokens = cache.forward(next_tokens[:, None], P + i).argmax(-1)
        return prefill, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", action="store_true",
                    help="print 'blas ...' once ready, then time one generation per input line")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, prompts, _ = dense_model_and_batch(args.config, args.batch, args.prompt)
    model.eval()

    if args.serve:
        print(f"blas {blas_in_use()}", flush=True)
        for _ in sys.stdin:
            prefill, decode = generate(model, prompts, args.tokens, args.precision)
            print(f"{prefill:.6f} {decode:.6f}", flush=True)
        return
    generate(model, prompts, args.tokens, args.precision)  # warm-up
    prefill, decode = generate(model, prompts, args.tokens, args.precision)
    print(f"prefill_tokens_per_s {args.batch * args.prompt / prefill:.1f}")
    print(f"decode_tokens_per_s {args.batch * (args.tokens - 1) / decode:.1f}")


if __name__ == "__main__":
    main()
