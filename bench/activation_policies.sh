#!/usr/bin/env bash
# The activation manager's policies (bench/activation_policies.cpp): k3-small at T = 4K (the cases
# in turn) and T = 16K (one case after another: all of them at once would not fit in memory), then
# the dense model of bench/configs/l6-d384.json beside PyTorch's activation checkpointing on the
# same model (bench/activation_checkpoint_torch.py).
# Usage: bench/activation_policies.sh [BUILD_DIR] [--skip-16k]
set -euo pipefail
build=${1:-build/release}
cd "$(dirname "$0")/.."
"$build/bench/bench_activation_policies" --seq 4096 --steps 2
"$build/bench/bench_activation_policies" --config bench/configs/l6-d384.json --batch 4 --seq 1024 --steps 3
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 \
  /usr/bin/python3 bench/activation_checkpoint_torch.py --config bench/configs/l6-d384.json \
  --batch 4 --seq 1024 --steps 3
[ "${2:-}" = "--skip-16k" ] || "$build/bench/bench_activation_policies" --seq 16384 --steps 1 --in-turn 0
