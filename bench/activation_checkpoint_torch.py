"""PyTorch's activation checkpointing on the k3ref dense model, beside bench_activation_policies
on the same model (bench/activation_policies.sh): forward + backward steps with every decoder
layer kept and with every layer checkpointed (torch.utils.checkpoint, re-run in the backward),
the two alternating. For each it prints the median step time and the bytes the decoder layers
hold for the backward at the end of the forward (tensors saved through autograd, each storage
once, as saved_tensors_hooks see them).

Run it with OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive and OPENBLAS_CORETYPE unset, as the
script does.
"""
import argparse
import statistics
import time

import torch
import torch.utils.checkpoint

from train_vs_torch import dense_model_and_batch  # this folder: the same model and batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tokens, targets = dense_model_and_batch(args.config, args.batch, args.seq)
    decoder = model.model

    def step(checkpoint):
        held = {}

        def pack(t):
            held[t.storage().data_ptr()] = t.storage().nbytes()
            return t

        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        x = decoder.embed_tokens(tokens)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            for layer in decoder.layers:
                x = torch.utils.checkpoint.checkpoint(layer, x) if checkpoint else layer(x)
        logits = model.lm_head(decoder.norm(x))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1), reduction="sum")
        (loss / targets.numel()).backward()
        return time.perf_counter() - start, sum(held.values())

    step(False)
    step(True)
    runs = {False: [], True: []}
    for _ in range(args.steps):
        for checkpoint in (False, True):
            runs[checkpoint].append(step(checkpoint))
    for checkpoint, name in ((False, "keep"), (True, "checkpoint")):
        seconds = statistics.median(t for t, _ in runs[checkpoint])
        held = runs[checkpoint][-1][1]
        print(f"torch {name} step_s {seconds:.3f} layers_hold_mib {held / 2**20:.1f}")


if __name__ == "__main__":
    main()
