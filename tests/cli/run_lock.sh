#!/usr/bin/env bash
# One trainer per run directory: a second `k3lab train` on a directory in use is refused at once,
# naming the process that holds it; once that process is killed, the run resumes without cleanup.
source "$(dirname "$0")/common.sh"
run="$WORK/run"
args=("${TINY[@]}" --set train.steps=100000 --set checkpoint.every=3 --set run.dir="$run")
"$K3LAB" train "${args[@]}" &
pid=$!
wait_for_steps "$pid" "$run" 4
expect_error "$run: in use by process $pid \(k3lab train\)" "$K3LAB" train "${args[@]}" --resume
expect_error "$run: in use by process $pid" "$K3LAB" train "${args[@]}"
kill -0 "$pid" || fail "the first trainer died"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
last=$(ls "$run/checkpoints" | grep '^step_' | sort | tail -1)
target=$(( 10#${last#step_} + 2 ))
"$K3LAB" train --quiet --resume "$run" --set train.steps=$target
[ -f "$run/checkpoints/step_$(printf %08d $target)/manifest.json" ] || fail "the resumed run did not finish"
echo "ok: second trainer refused; resumed after kill -9 without cleanup"
