#!/usr/bin/env bash
# Muon (K3's parameter groups) against AdamW everywhere: k3-nano on the built-in corpus, the same
# token budget for both, each optimizer at its own best learning rate from a small sweep.
# Usage: bench/muon_vs_adamw.sh [BUILD_DIR]   (prints a table; the result is in docs/optimizers.md)
set -euo pipefail
build=${1:-build/release}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
steps=${STEPS:-100}
common=(--quiet --set model.config=configs/k3-nano.json --set data.builtin_tokens=600000
        --set data.seq_len=64 --set train.batch_size=8 --set train.steps=$steps
        --set train.warmup_steps=10 --set eval.every=$steps --set eval.batches=16
        --set checkpoint.every=0 --set sample.max_tokens=1)
printf "%-8s %-8s %s\n" optimizer lr "final validation loss"
for opt in adamw muon; do
  for lr in ${LRS:-1e-3 3e-3 1e-2}; do
    dir="$work/$opt-$lr"
    "$build/k3lab" train "${common[@]}" --set train.optimizer=$opt --set train.lr=$lr --set run.dir="$dir" >/dev/null
    loss=$(python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['val_loss'])" "$dir/metrics.jsonl")
    printf "%-8s %-8s %.4f\n" "$opt" "$lr" "$loss"
  done
done
rm -rf "$work"
