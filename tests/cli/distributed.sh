#!/usr/bin/env bash
# k3lab train under mpirun: a data-parallel run writes one set of files from rank 0 and loads in
# one process; bad grids are refused before any work; a rank that fails or is killed ends the
# whole job promptly (never a hang), and the run resumes from its last checkpoint.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
ONE=(--set train.threads=1)

# A dp2 run under ZeRO-2: one progress summary, metrics with the communication counters.
"${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set parallel.zero=2 \
  --set train.steps=6 --set checkpoint.every=3 --set run.dir="$WORK/dp2" > "$WORK/out.txt"
[ "$(grep -c '^trained 6 steps' "$WORK/out.txt")" -eq 1 ] || fail "expected one summary: $(cat "$WORK/out.txt")"
[ "$(recorded_steps "$WORK/dp2")" -eq 6 ] || fail "metrics.jsonl should have 6 steps, one writer"
for key in bytes calls seconds; do
  grep -q "\"comm.dp.$key\"" "$WORK/dp2/metrics.jsonl" || fail "no comm.dp.$key in metrics.jsonl"
done
grep -Eq '"dp": ?2' "$WORK/dp2/checkpoints/step_00000006/manifest.json" || fail "the manifest does not record the layout"
echo "ok: dp2 × ZeRO-2 run, one writer"

# Its checkpoint is in global coordinates: evaluated, and resumed, in one process.
"$K3LAB" eval --checkpoint "$WORK/dp2" --batches 2 > /dev/null
"$K3LAB" train --quiet --resume "$WORK/dp2" --set train.steps=8 --set parallel.dp=1 --set parallel.zero=0 > /dev/null 2>&1
[ "$(recorded_steps "$WORK/dp2")" -eq 8 ] || fail "the one-process resume did not continue to step 8"
grep -q '"key":"parallel.dp"' "$WORK/dp2/history.jsonl" || fail "the layout change is not in history.jsonl"
echo "ok: resumed in one process"

# The same layout twice gives bit-identical checkpoints (no reduction order depends on timing);
# a run that changes layout on the way (dp2 × ZeRO-2, then dp4 × ZeRO-1) ends where one process
# ends, to fp32 rounding.
loss_at() { grep "\"step\":$2[,}]" "$1/metrics.jsonl" | grep -o '"loss":[^,}]*' | cut -d: -f2; }
for run in a b; do
  "${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set parallel.zero=2 \
    --set train.steps=8 --set run.dir="$WORK/twice_$run" > /dev/null
done
same_checkpoint "$WORK/twice_a/checkpoints/step_00000008" "$WORK/twice_b/checkpoints/step_00000008"
"$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set train.steps=8 --set run.dir="$WORK/one" > /dev/null
"${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set parallel.zero=2 \
  --set train.steps=8 --set checkpoint.every=4 --set run.dir="$WORK/moved" > /dev/null
rm -r "$WORK/moved/checkpoints/step_00000008"  # continue from step 4 under another layout
"${MPI[@]}" -np 4 "$K3LAB" train --quiet --resume "$WORK/moved" \
  --set parallel.dp=4 --set parallel.zero=1 > /dev/null 2>&1
awk -v a="$(loss_at "$WORK/one" 8)" -v b="$(loss_at "$WORK/moved" 8)" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * a) }' ||
  fail "step 8 loss: one process $(loss_at "$WORK/one" 8), dp2 then dp4 $(loss_at "$WORK/moved" 8)"
echo "ok: deterministic; a layout change on resume ends at the one-process loss"

# SIGTERM to mpirun stops the job gracefully: a checkpoint of the last step, the stop recorded.
# (mpirun sends the ranks SIGCONT, SIGTERM and SIGKILL odls_base_sigkill_timeout seconds apart,
# 1 by default: on a busy host the last step and its checkpoint can take longer.)
"${MPI[@]}" --mca odls_base_sigkill_timeout 8 -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set train.steps=100000 \
  --set checkpoint.every=0 --set run.dir="$WORK/stopped" > /dev/null 2>&1 &
pid=$!
wait_for_steps "$pid" "$WORK/stopped" 5
kill -TERM "$pid"
wait "$pid" || true
grep -q '"event":"stop","signal":"SIGTERM"' "$WORK/stopped/history.jsonl" || fail "no stop in history.jsonl"
compgen -G "$WORK/stopped/checkpoints/step_*" > /dev/null || fail "no checkpoint after SIGTERM"
echo "ok: SIGTERM to mpirun stopped the job with a checkpoint"

# Refusals before any work, the first line naming the rank and the field.
line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=3 --set run.dir="$WORK/bad")
grep -Eq "rank [01] of 2: error: .*parallel.*dp·tp·pp·ep·cp = .*job has 2 processes" <<< "$line" || fail "grid: $line"
line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set train.batch_size=3 --set run.dir="$WORK/bad")
grep -Eq "rank [01] of 2: error: .*train.batch_size.*3 sequences does not split over dp·ep = 2" <<< "$line" || fail "batch: $line"
[ ! -e "$WORK/bad/checkpoints" ] || fail "a refused run wrote checkpoints"
echo "ok: refusals"

# One rank failing alone (here: a data file only rank 1 is given, which does not exist) ends
# the job while rank 0 already waits in a collective.
start=$SECONDS
line=$(first_error_line mpirun --allow-run-as-root --oversubscribe -q \
  -np 1 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set run.dir="$WORK/solo" : \
  -np 1 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set run.dir="$WORK/solo" --set data.source=/nonexistent.txt)
grep -Eq "rank 1 of 2: error: .*nonexistent" <<< "$line" || fail "one failing rank: $line"
[ $((SECONDS - start)) -lt 30 ] || fail "the job took $((SECONDS - start)) s to end"
echo "ok: one failing rank ended the job in $((SECONDS - start)) s"

# Different configurations on different ranks are refused, not left to hang.
line=$(first_error_line mpirun --allow-run-as-root --oversubscribe -q \
  -np 1 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set run.dir="$WORK/mixed" : \
  -np 1 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.dp=2 --set run.dir="$WORK/mixed" --set train.steps=7)
grep -Eq "rank 1 of 2: error: .*another run configuration than rank 0" <<< "$line" || fail "mixed: $line"
echo "ok: mismatched ranks refused"
