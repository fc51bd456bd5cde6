#!/usr/bin/env bash
# A run killed with SIGKILL at random moments, then resumed, ends bit-identical to a run that was
# never interrupted.
source "$(dirname "$0")/common.sh"
steps=100
args=(--set train.steps=$steps --set checkpoint.every=4 --set checkpoint.keep_last=2)

start=$(date +%s.%N)
"$K3LAB" train "${TINY[@]}" "${args[@]}" --set run.dir="$WORK/straight"
duration=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
echo "uninterrupted run: ${duration}s"

has_checkpoint() { ls "$WORK/killed/checkpoints" 2>/dev/null | grep -q '^step_'; }

kills=0
for attempt in 1 2 3 4 5 6 7 8; do
  resume=()
  if has_checkpoint; then resume=(--resume); fi
  "$K3LAB" train "${TINY[@]}" "${args[@]}" --set run.dir="$WORK/killed" "${resume[@]}" &
  pid=$!
  # A random moment within the run: 10% to 70% of an uninterrupted run's duration.
  sleep "$(awk -v r=$RANDOM -v d="$duration" 'BEGIN { printf "%.2f", d * (0.1 + 0.6 * r / 32767) }')"
  if kill -9 "$pid" 2>/dev/null; then
    kills=$((kills + 1))
    wait "$pid" 2>/dev/null || true
  else
    wait "$pid"  # it had finished: the run is complete
    break
  fi
done
# Finish whatever is left.
if ! [ -f "$WORK/killed/checkpoints/step_$(printf %08d $steps)/model.safetensors" ]; then
  resume=()
  if has_checkpoint; then resume=(--resume); fi
  "$K3LAB" train "${TINY[@]}" "${args[@]}" --set run.dir="$WORK/killed" "${resume[@]}"
fi
echo "interrupted $kills time(s)"
[ "$kills" -ge 1 ] || fail "the run was never interrupted: make it longer"

final=checkpoints/step_$(printf %08d $steps)
cmp "$WORK/straight/$final/model.safetensors" "$WORK/killed/$final/model.safetensors" ||
  fail "weights differ after kill + resume"
cmp "$WORK/straight/$final/optimizer.safetensors" "$WORK/killed/$final/optimizer.safetensors" ||
  fail "optimizer state differs after kill + resume"
# The metrics file holds each step once.
[ "$(grep -c '"step"' "$WORK/killed/metrics.jsonl")" -eq $steps ] || fail "metrics.jsonl has duplicate or missing steps"
echo "bit-identical after $kills kill(s)"
