#!/usr/bin/env bash
# The whole real-text study, in the order it was run (docs/real-text.md). Resumable: a finished
# job is never rerun, so running it again continues where it stopped. From the repository root:
#   bash studies/real-text/run.sh [K3LAB]
set -euo pipefail
k3lab=${1:-build/release/k3lab}
[ -d studies/real-text/corpus ] || scripts/real-corpus.sh --out studies/real-text/corpus --k3lab "$k3lab"
for sweep in architectures ablations schedules ablations-rope; do
  "$k3lab" sweep "studies/real-text/$sweep.toml"
done
