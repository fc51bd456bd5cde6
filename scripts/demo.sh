#!/usr/bin/env bash
# `make demo`: the command line, the kernel self-check, then a short training run on the built-in
# corpus with a live progress line, a sample, and where the run directory, plot and checkpoint are.
set -euo pipefail
build=${1:-build/release}
k3lab="$build/k3lab"
run_dir="runs/demo-$(date +%Y%m%d-%H%M%S)"

echo "== k3lab --help"
"$k3lab" --help
echo
echo "== k3lab selfcheck"
"$k3lab" selfcheck
echo
echo "== k3lab train --config configs/demo.toml   (run directory: $run_dir)"
"$k3lab" train --config configs/demo.toml --set run.dir="$run_dir"
echo
echo "== k3lab sample --checkpoint $run_dir --prompt 'The old'"
"$k3lab" sample --checkpoint "$run_dir" --prompt "The old" --max-tokens 120
