#!/usr/bin/env bash
# The vision tower as pipeline filler against running it before the pipeline, inside the first
# stage's forward, and text only (bench/vision_filler.cpp), under mpirun at 2 ranks, one thread
# each (one core a rank here).
# Usage: bench/vision_filler.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build/release}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 K3_THREADS=1
mpirun --allow-run-as-root --oversubscribe -np 2 "$build/bench/bench_vision_filler"
