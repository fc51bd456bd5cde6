#!/usr/bin/env bash
# `k3lab report`: expert-load heatmaps from a run's expert_load.jsonl, and clear errors without one.
source "$(dirname "$0")/common.sh"
RUN="$WORK/run"
mkdir -p "$RUN"
for step in 1 2 3; do
  printf '{"step":%d,"layers":{"1":{"tokens":8,"load":[%d,4,4,%d]},"2":{"tokens":8,"load":[4,4,4,4]}}}\n' \
    "$step" $((3 + step)) $((5 - step)) >> "$RUN/expert_load.jsonl"
done
out=$("$K3LAB" report "$RUN" --layer 1)
[ -s "$RUN/expert_load.svg" ] || fail "no expert_load.svg"
[ -s "$RUN/expert_load_layer1.svg" ] || fail "no expert_load_layer1.svg"
grep -q "$RUN/expert_load.svg" <<< "$out" || fail "the path is not printed: $out"
grep -Eq "^ +1 +0\.500 +2 +6 +0$" <<< "$out" || fail "no summary of layer 1 at step 3: $out"
expect_error "no expert-load records for layer 7" "$K3LAB" report "$RUN" --layer 7
expect_error "$WORK/empty/expert_load.jsonl" "$K3LAB" report "$WORK/empty"
echo "ok: report"
