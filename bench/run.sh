#!/usr/bin/env bash
# `make bench`: every benchmark, one after the other (minutes; the host should be quiet).
set -euo pipefail
build=${1:-build/release}
cd "$(dirname "$0")/.."
for b in "$build"/bench/bench_*; do
  case $(basename "$b") in bench_distributed | bench_tensor_parallel | bench_expert_parallel | bench_pipeline_parallel | bench_vision_filler | bench_activation_policies) continue ;; esac  # below
  echo "== $(basename "$b")"
  "$b"
done
echo "== muon_vs_adamw"
bash bench/muon_vs_adamw.sh "$build"
echo "== distributed"
bash bench/distributed.sh "$build"
echo "== tensor_parallel"
bash bench/tensor_parallel.sh "$build"
echo "== expert_parallel"
bash bench/expert_parallel.sh "$build"
echo "== context_parallel"
bash bench/context_parallel.sh "$build"
echo "== pipeline_parallel"
bash bench/pipeline_parallel.sh "$build"
echo "== vision_filler"
bash bench/vision_filler.sh "$build"
echo "== activation_policies"
bash bench/activation_policies.sh "$build"
