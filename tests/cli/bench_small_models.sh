#!/usr/bin/env bash
# bench_small_models runs end to end at its smallest: one width, both thread counts, k3lab beside
# the PyTorch K3 reference, each row with its tokens/s, shares of the peaks, the Newton-Schulz
# share and the profile split. (A speed is never asserted: only that every figure is there.)
source "$(dirname "$0")/common.sh"
bench=$(dirname "$K3LAB")/bench/bench_small_models
[ -x "$bench" ] || { echo "skipped: $bench is not built"; exit 77; }
out=$("$bench" --sizes 32 --threads 1,2 --warmup 1 --steps 1 --profile-steps 1 --batch 2 \
        --seq 16 --torch-max-width 32) || fail "the bench failed: $out"
for threads in 1 2; do
  grep -Eq "^d32 L4 N[0-9]+K +$threads +[0-9]+ +[0-9.]+% +[0-9.]+% +[0-9]+% +[0-9]+ +[0-9.]+ \[.*\]x +moe [0-9]+% kda [0-9]+% .*optimizer [0-9]+% \| gemm [0-9]+%$" \
    <<< "$out" || fail "no full row for d32 on $threads thread(s): $out"
done
grep -q "^torch BLAS: /" <<< "$out" || fail "the PyTorch side did not run: $out"
expect_error "--sizes: every value must be >= 1" "$bench" --sizes 64,0
echo "bench small models: ok"
