#!/usr/bin/env bash
# Tensor parallelism in one process (the reference) and under mpirun at 2 and 4 ranks, one thread
# each: one table (bench/tensor_parallel.cpp).
# Usage: bench/tensor_parallel.sh [BUILD_DIR] [bench_tensor_parallel flags...]
set -euo pipefail
build=${1:-build/release}
shift $(( $# > 0 ? 1 : 0 ))
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 K3_THREADS=1
"$build/bench/bench_tensor_parallel" --header 1 "$@"
for np in 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$build/bench/bench_tensor_parallel" \
    --header 0 "$@"
done
