#!/usr/bin/env bash
# `make bench`: every benchmark, one after the other (minutes; the host should be quiet).
set -euo pipefail
build=${1:-build/release}
cd "$(dirname "$0")/.."
for b in "$build"/bench/bench_*; do
  [[ $(basename "$b") == bench_distributed ]] && continue  # under mpirun, below
  echo "== $(basename "$b")"
  "$b"
done
echo "== muon_vs_adamw"
bash bench/muon_vs_adamw.sh "$build"
echo "== distributed"
bash bench/distributed.sh "$build"
