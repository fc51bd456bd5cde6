#!/usr/bin/env bash
# Expert parallelism, baseline all-to-all against MoonEP (bench/expert_parallel.cpp), under mpirun
# at 4 ranks, one thread each: on Zipf routings, and on the routings of a k3-small router trained
# here first (STEPS steps on the built-in corpus; its expert_load.jsonl records each MoE layer's
# per-expert load at the last step).
# Usage: bench/expert_parallel.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build/release}
steps=${2:-40}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 K3_THREADS=1
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
"$build/k3lab" train --quiet --set model.config=configs/k3-small.json --set train.steps="$steps" \
  --set train.batch_size=8 --set data.seq_len=128 --set train.warmup_steps=10 --set eval.every=0 \
  --set sample.every=0 --set checkpoint.every=0 --set train.threads=2 --set run.dir="$run/k3-small" > /dev/null
mpirun --allow-run-as-root --oversubscribe -np 4 "$build/bench/bench_expert_parallel" \
  --recorded "$run/k3-small/expert_load.jsonl"
