#!/usr/bin/env bash
# k3lab under context parallelism, end to end: a cp2 run of k3-nano (each sequence in 4 zig-zag
# chunks, KDA by KCP, gated MLA by ring attention) records its cp traffic, evaluates and samples
# during training; its checkpoint resumes in one process and under cp2 × dp2 to the same next
# loss; a sequence length that does not split is refused in one line; the pre-flight estimate
# is per rank; packed documents train as in one process.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
NANO=("${TINY[@]}" --set train.threads=1 --set model.config=configs/k3-nano.json --set data.seq_len=16)

"${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.cp=2 --set train.steps=6 \
  --set checkpoint.every=3 --set eval.every=3 --set sample.max_tokens=4 --set run.dir="$WORK/cp2" > /dev/null
[ "$(recorded_steps "$WORK/cp2")" -eq 6 ] || fail "metrics.jsonl should have 6 steps, one writer"
grep -q '"comm.cp.bytes"' "$WORK/cp2/metrics.jsonl" || fail "no cp counters in metrics.jsonl"
grep -q '"val_loss"' "$WORK/cp2/metrics.jsonl" || fail "no validation loss under cp2"
echo "ok: a cp2 run"

# Resumed from step 3: the step 6 loss is the cp2 run's to 1e-4 (fp32 rounding over three steps;
# measured within 1e-8).
resume_matches "$WORK/cp2" one 1 --set parallel.cp=1
resume_matches "$WORK/cp2" cp2_dp2 4 --set parallel.dp=2

line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.cp=2 --set data.seq_len=18 \
  --set run.dir="$WORK/bad")
grep -Eq "rank [01] of 2: error: .*data.seq_len.*2·cp = 4 zig-zag chunks: 18 tokens do not split evenly" <<< "$line" ||
  fail "sequence split: $line"
[ ! -e "$WORK/bad/checkpoints" ] || fail "a refused run wrote checkpoints"
echo "ok: refusals"

# The pre-flight estimate is per rank: a rank holds seq_len / cp tokens of each row.
out=$("${MPI[@]}" -np 2 "$K3LAB" train --dry-run "${NANO[@]}" --set parallel.cp=2 --set run.dir="$WORK/dry")
grep -Eq "^  activations .* 1 micro-batch of 4 x 8 tokens" <<< "$out" || fail "cp2 estimate: $out"
echo "ok: the memory estimate under cp2"

# Packed documents (data.documents = true: a token sees only its own document, which starts after an
# end-of-text token): under cp2 the run trains as in one process (step 4 loss within 1e-4), and
# not as without documents (the windows hold document ends). A rank's micro-batch of more than one
# sequence is refused in one line.
DOCS=("${NANO[@]}" --set data.documents=true --set train.batch_size=1 --set data.seq_len=64 --set train.steps=4)
"$K3LAB" train "${DOCS[@]}" --set run.dir="$WORK/docs_one" > /dev/null
"${MPI[@]}" -np 2 "$K3LAB" train "${DOCS[@]}" --set parallel.cp=2 --set run.dir="$WORK/docs_cp2" > /dev/null
"$K3LAB" train "${DOCS[@]}" --set data.documents=0 --set run.dir="$WORK/no_docs" > /dev/null
one=$(loss_at "$WORK/docs_one" 4) cp2=$(loss_at "$WORK/docs_cp2" 4) plain=$(loss_at "$WORK/no_docs" 4)
awk -v a="$one" -v b="$cp2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-4 * a) }' ||
  fail "packed documents: step 4 loss $cp2 under cp2, $one in one process"
awk -v a="$one" -v b="$plain" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d > 1e-6 * a) }' ||
  fail "packed documents changed nothing: $one with, $plain without"
echo "ok: packed documents under cp2: step 4 loss $cp2 (one process $one, without documents $plain)"
line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set data.documents=1 \
  --set parallel.cp=2 --set run.dir="$WORK/bad_docs")
grep -Eq "data.documents.*one sequence per rank's micro-batch: train.batch_size / \(dp·ep\) = 4" <<< "$line" ||
  fail "documents under cp with 4 rows: $line"
echo "ok: $line"

# The plain gated attention (dense-tiny's every layer) takes neither packed documents nor a split
# sequence: each is refused in one line naming the setting and the first such layer.
expect_error "data.documents.*layer 1 of this model is gated attention" \
  "$K3LAB" train "${TINY[@]}" --set data.documents=1 --set run.dir="$WORK/gated_docs"
line=$(first_error_line "${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" --set parallel.cp=2 \
  --set run.dir="$WORK/gated_cp2")
grep -Eq "parallel.cp.*layer 1 of this model is the plain gated attention" <<< "$line" ||
  fail "cp2 of gated attention: $line"
echo "ok: $line"
