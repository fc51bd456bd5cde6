#!/usr/bin/env bash
# Pipeline parallelism, measured bubbles against the plan and Megatron-Core's formula
# (bench/pipeline_parallel.cpp), under mpirun at 2 ranks, one thread each (one core a rank here:
# more ranks would share cores and measure the sharing, not the schedule).
# Usage: bench/pipeline_parallel.sh [BUILD_DIR] [PLOT.svg]
set -euo pipefail
build=${1:-build/release}
plot=${2:-pipeline_timeline.svg}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 K3_THREADS=1
mpirun --allow-run-as-root --oversubscribe -np 2 "$build/bench/bench_pipeline_parallel" --plot "$plot"
