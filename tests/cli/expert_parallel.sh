#!/usr/bin/env bash
# k3lab under expert parallelism, end to end: an ep2 MoonEP run of k3-nano records its dispatch per
# MoE layer in metrics.jsonl (every rank at exactly S·K rows), `k3lab report` prints each rank's
# rows before and after the balancing, the same run twice writes the same checkpoint, and the
# checkpoint (in global coordinates) resumes in one process, under the baseline all-to-all and
# under ep2 × dp2 to the same next losses; experts that do not split are refused in one line.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
ONE=(--set train.threads=1)
NANO=("${TINY[@]}" "${ONE[@]}" --set model.config=configs/k3-nano.json --set data.seq_len=16)
EP2=(--set parallel.ep=2 --set parallel.moe_dispatch=moonep)

"${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" "${EP2[@]}" --set train.steps=6 \
  --set checkpoint.every=3 --set run.dir="$WORK/ep2" > "$WORK/out.txt"
[ "$(recorded_steps "$WORK/ep2")" -eq 6 ] || fail "metrics.jsonl should have 6 steps, one writer"
grep -q '"comm.ep.bytes"' "$WORK/ep2/metrics.jsonl" || fail "no ep counters in metrics.jsonl"
# 4 sequences of 16 tokens over 2 ranks, top 2: S·K = 64 rows a rank per step.
for key in rows_max rows_mean; do
  n=$(grep -o "\"moe.$key.1\":[0-9.]*" "$WORK/ep2/metrics.jsonl" | cut -d: -f2 | sort -u)
  [ "$n" = 64 ] || [ "$n" = 64.0 ] || fail "moe.$key.1 should be 64 on every step: $n"
done
grep -q '"moe.home_rows_max.1"' "$WORK/ep2/metrics.jsonl" || fail "no load before balancing"
grep -q '"moe.replicas.1"' "$WORK/ep2/metrics.jsonl" || fail "no replica count"
"$K3LAB" report "$WORK/ep2" > "$WORK/report.txt"
grep -q "rows per expert-parallel rank" "$WORK/report.txt" || fail "report: $(cat "$WORK/report.txt")"
# Every rank's row of the table: layer, rank, before, after = 64.
[ "$(grep -Ec '^ +[0-9]+ +[01] +[0-9]+ +64$' "$WORK/report.txt")" -eq 14 ] ||
  fail "report: 7 layers x 2 ranks at 64 rows: $(cat "$WORK/report.txt")"
echo "ok: an ep2 MoonEP run, every rank at S·K rows, reported"

for run in a b; do
  "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" "${EP2[@]}" --set parallel.zero=1 --set train.steps=3 \
    --set run.dir="$WORK/twice_$run" > /dev/null
done
same_checkpoint "$WORK/twice_a/checkpoints/step_00000003" "$WORK/twice_b/checkpoints/step_00000003"
echo "ok: deterministic under ep2 MoonEP"

# Resumed from step 3 under other layouts: each run's step 6 loss is the ep2 run's to 1e-4 (fp32
# rounding carried over three steps of routing; measured within 1e-6).
resume_matches "$WORK/ep2" one 1 --set parallel.ep=1 --set parallel.moe_dispatch=alltoall
resume_matches "$WORK/ep2" ep2_alltoall 2 --set parallel.moe_dispatch=alltoall
resume_matches "$WORK/ep2" ep2_dp2 4 --set parallel.dp=2

line=$(first_error_line "${MPI[@]}" -np 3 "$K3LAB" train "${NANO[@]}" --set parallel.ep=3 --set train.batch_size=3 \
  --set run.dir="$WORK/bad")
grep -Eq "rank [012] of 3: error: .*num_experts.*8 experts do not split evenly over the expert-parallel group of size 3" <<< "$line" ||
  fail "experts: $line"
[ ! -e "$WORK/bad/checkpoints" ] || fail "a refused run wrote checkpoints"
echo "ok: refusals"
