#!/usr/bin/env bash
# k3lab under tensor parallelism, end to end: a tp2 run of k3-nano writes one set of files in
# global coordinates, the same twice over; its
# checkpoint evaluates in one process and under tp2 to the same loss, resumes under one process,
# tp4 and dp2 × tp2 (with sequence parallelism) to the same next losses, and samples the same text
# under tp2 as in one process; sizes that do not split are refused in one line naming the field.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
ONE=(--set train.threads=1)
NANO=("${TINY[@]}" "${ONE[@]}" --set model.config=configs/k3-nano.json --set data.seq_len=16)

"${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.tp=2 --set train.steps=6 \
  --set checkpoint.every=3 --set run.dir="$WORK/tp2" > "$WORK/out.txt"
[ "$(grep -c '^trained 6 steps' "$WORK/out.txt")" -eq 1 ] || fail "expected one summary: $(cat "$WORK/out.txt")"
[ "$(recorded_steps "$WORK/tp2")" -eq 6 ] || fail "metrics.jsonl should have 6 steps, one writer"
grep -q '"comm.tp.bytes"' "$WORK/tp2/metrics.jsonl" || fail "no tp counters in metrics.jsonl"
grep -Eq '"tp": ?2' "$WORK/tp2/checkpoints/step_00000006/manifest.json" || fail "the manifest does not record the layout"
echo "ok: a tp2 run, one writer"

# The same layout twice (here with ZeRO-1 and sequence parallelism) writes the same checkpoint.
for run in a b; do
  "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.tp=2 --set parallel.zero=1 \
    --set parallel.sequence_parallel=true --set train.steps=3 --set run.dir="$WORK/twice_$run" > /dev/null
done
same_checkpoint "$WORK/twice_a/checkpoints/step_00000003" "$WORK/twice_b/checkpoints/step_00000003"
echo "ok: deterministic under tp2"

# The checkpoint in global coordinates: the same validation loss in one process and under tp2.
# The two sum in different orders, so the printed 4 decimals may differ
# by one unit in the last digit when the loss lies near a rounding boundary: no more is allowed.
one=$("$K3LAB" eval --checkpoint "$WORK/tp2" --batches 2)
two=$("${MPI[@]}" -np 2 "$K3LAB" eval --checkpoint "$WORK/tp2" --batches 2)
awk -v a="$(awk '{ print $3 }' <<< "$one")" -v b="$(awk '{ print $3 }' <<< "$two")" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1.5e-4) }' ||
  fail "eval: one process '$one', tp2 '$two'"
echo "ok: $one (tp2: $two)"

# Resumed from step 3 under other layouts, each run's step 6 loss is the tp2 run's to 1e-4
# (fp32 rounding, which three steps of k3-nano's routing can amplify: measured within 5e-7; a
# wrongly resharded weight moves the loss by orders more).
resume_matches "$WORK/tp2" one 1 --set parallel.tp=1
resume_matches "$WORK/tp2" tp4 4 --set parallel.tp=4
resume_matches "$WORK/tp2" dp2_tp2_sp 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.sequence_parallel=1

# Generation under tp2 draws the same tokens as one process.
args=(--checkpoint "$WORK/tp2" --prompt "The " --max-tokens 24 --temperature 0.8 --seed 3)
one=$("$K3LAB" sample "${args[@]}")
two=$("${MPI[@]}" -np 2 "$K3LAB" sample "${args[@]}")
[ "$one" = "$two" ] || fail "sample: one process '$one', tp2 '$two'"
echo "ok: the same sample under tp2 as in one process"

# Refusals before any work: the first line names the field and the group size.
sed 's/"vocab_size": 264/"vocab_size": 259/' configs/dense-tiny.json > "$WORK/odd_vocab.json"
line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.tp=2 \
  --set model.config="$WORK/odd_vocab.json" --set run.dir="$WORK/bad")
grep -Eq "rank [01] of 2: error: .*odd_vocab.json.*vocab_size.*259 vocabulary rows do not split evenly over the tensor-parallel group of size 2" <<< "$line" || fail "vocab: $line"
line=$(first_error_line "${MPI[@]}" -np 3 "$K3LAB" train "${TINY[@]}" "${ONE[@]}" --set parallel.tp=3 --set run.dir="$WORK/bad")
grep -Eq "rank [012] of 3: error: .*num_attention_heads.*4 heads do not split evenly over the tensor-parallel group of size 3" <<< "$line" || fail "heads: $line"
line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true \
  --set train.batch_size=1 --set data.seq_len=15 --set run.dir="$WORK/bad")
grep -Eq "rank [01] of 2: error: .*data.seq_len.*15 tokens.*over tp = 2" <<< "$line" || fail "sequence split: $line"
line=$(first_error_line "${MPI[@]}" -np 4 "$K3LAB" sample --checkpoint "$WORK/tp2" --tp 3)
grep -Eq "error: .*--tp.*3 does not divide the job's 4 ranks" <<< "$line" || fail "--tp: $line"
[ ! -e "$WORK/bad/checkpoints" ] || fail "a refused run wrote checkpoints"
echo "ok: refusals"
