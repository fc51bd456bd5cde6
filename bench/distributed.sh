#!/usr/bin/env bash
# Data parallelism under mpirun at 2 and 4 ranks, one thread each: one table (bench/distributed.cpp).
# Usage: bench/distributed.sh [BUILD_DIR] [bench_distributed flags...]   NP="2 4" sets the rank counts.
set -euo pipefail
build=${1:-build/release}
shift $(( $# > 0 ? 1 : 0 ))
cd "$(dirname "$0")/.."
header=1
for np in ${NP:-2 4}; do
  OMP_NUM_THREADS=1 K3_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$np" \
    "$build/bench/bench_distributed" --header $header "$@"
  header=0
done
