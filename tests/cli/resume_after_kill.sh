#!/usr/bin/env bash
# A run killed with SIGKILL at random moments, then resumed, ends bit-identical to a run that was
# never interrupted. The moments are random steps (read off metrics.jsonl) plus a random delay,
# so a kill can land in a step, in an evaluation or in the middle of writing a checkpoint.
source "$(dirname "$0")/common.sh"
steps=60
args=(--set train.steps=$steps --set checkpoint.every=4 --set checkpoint.keep_last=2)

"$K3LAB" train "${TINY[@]}" "${args[@]}" --set run.dir="$WORK/straight"

has_checkpoint() { ls "$WORK/killed/checkpoints" 2>/dev/null | grep -q '^step_'; }
recorded() {
  local n
  n=$(grep -c '"step"' "$WORK/killed/metrics.jsonl" 2>/dev/null) || true
  echo "${n:-0}"
}
resume_flag() { if has_checkpoint; then echo --resume; fi; }

kills=0
for round in 1 2 3; do
  target=$(( $(recorded) + 3 + RANDOM % 12 ))
  [ "$target" -lt "$steps" ] || break
  "$K3LAB" train "${TINY[@]}" "${args[@]}" --set run.dir="$WORK/killed" $(resume_flag) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$(recorded)" -lt "$target" ]; do sleep 0.02; done
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.3 * r / 32767 }')"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null || true
done
"$K3LAB" train "${TINY[@]}" "${args[@]}" --set run.dir="$WORK/killed" $(resume_flag)
echo "interrupted $kills time(s)"
[ "$kills" -ge 1 ] || fail "the run was never interrupted"

final=checkpoints/step_$(printf %08d $steps)
cmp "$WORK/straight/$final/model.safetensors" "$WORK/killed/$final/model.safetensors" ||
  fail "weights differ after kill + resume"
cmp "$WORK/straight/$final/optimizer.safetensors" "$WORK/killed/$final/optimizer.safetensors" ||
  fail "optimizer state differs after kill + resume"
# The metrics file holds each step once.
[ "$(recorded)" -eq $steps ] || fail "metrics.jsonl has duplicate or missing steps"
echo "bit-identical after $kills kill(s)"
