#!/usr/bin/env bash
# k3lab train under pipeline parallelism: a pp2 run (dense-tiny, one layer a stage, 2 micro-batches
# a step) ends at the one-process run's losses (ZB-H1 at 1F1B's exactly), logs its split, draws its
# measured timeline beside the planned one, and ends with the one-process run's sample (decoded from
# its final checkpoint); pp2 × ep2 and pp2 × cp2 of k3-nano end at the one-process losses too, and
# record every stage's expert load; and its checkpoints are global: it resumes in one process, and a
# one-process run resumes under pp2. Bad pipeline settings are refused before any work, naming the
# field.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
RUN=("${TINY[@]}" --set train.threads=1 --set train.grad_accum=2 --set train.steps=6
     --set checkpoint.every=3 --set eval.every=3 --set sample.every=0
     --set sample.temperature=0 --set sample.max_tokens=12)
# The line after "sample:" in a run's printed summary.
sample_in() { sed -n '/^sample:$/{n;p;}' "$1"; }

"$K3LAB" train "${RUN[@]}" --set run.dir="$WORK/one" > "$WORK/one.out"
"${MPI[@]}" -np 2 "$K3LAB" train "${RUN[@]}" --set parallel.pp=2 --set run.dir="$WORK/pp2" > "$WORK/pp2.out"
losses_match "$WORK/one" "$WORK/pp2" 3 6
# ZB-H1 splits each backward and runs the same arithmetic: the same losses to the last digit.
"${MPI[@]}" -np 2 "$K3LAB" train "${RUN[@]}" --set parallel.pp=2 --set parallel.pp_schedule=zb \
  --set run.dir="$WORK/zb" > /dev/null
[ "$(grep -o '"loss":[^,}]*' "$WORK/zb/metrics.jsonl")" = "$(grep -o '"loss":[^,}]*' "$WORK/pp2/metrics.jsonl")" ] ||
  fail "the zb run's losses differ from 1f1b's"
va=$(grep -o '"val_loss":[^,}]*' "$WORK/one/metrics.jsonl" | tail -1)
vb=$(grep -o '"val_loss":[^,}]*' "$WORK/pp2/metrics.jsonl" | tail -1)
[ -n "$va" ] && [ "$va" = "$vb" ] || fail "validation loss: one process $va, pp2 $vb"
grep -q '"pp_layers":\[1,1\]' "$WORK/pp2/history.jsonl" || fail "history.jsonl does not record the split"
grep -q '>measured<' "$WORK/pp2/pipeline_timeline.svg" && grep -q '>planned<' "$WORK/pp2/pipeline_timeline.svg" ||
  fail "no planned and measured timeline in pipeline_timeline.svg"
echo "ok: pp2 (1f1b and zb) ends at the one-process losses ($(loss_at "$WORK/pp2" 6)), split recorded, timeline drawn"

# The end-of-run sample: the lead decodes the final checkpoint in one process. With the same
# weights, greedy decoding writes the one-process run's sample, and so does k3lab sample in one
# process on the pp2 run's checkpoint.
want=$(sample_in "$WORK/one.out")
[ -n "$want" ] || fail "the one-process run printed no sample"
[ "$(sample_in "$WORK/pp2.out")" = "$want" ] || fail "pp2 sample '$(sample_in "$WORK/pp2.out")', one process '$want'"
[ "$("$K3LAB" sample --checkpoint "$WORK/pp2" --temperature 0 --max-tokens 12)" = "$want" ] ||
  fail "k3lab sample on the pp2 checkpoint differs from the one-process run's sample"
echo "ok: pp2 ends with the one-process run's sample ($want), and its checkpoint samples in one process"

# The split and the schedule are logged at the start; a sample at a checkpoint step decodes that
# checkpoint.
"${MPI[@]}" -np 2 "$K3LAB" train "${RUN[@]:1}" --set parallel.pp=2 --set train.steps=2 \
  --set checkpoint.every=1 --set sample.every=1 --set run.dir="$WORK/logged" 2>&1 | tr '\r' '\n' > "$WORK/logged.out"
grep -q 'pipeline: 2 stages over pp 2: layers \[0, 1) \[1, 2), schedule 1f1b' "$WORK/logged.out" ||
  fail "the pipeline split is not logged"
step1=$("$K3LAB" sample --checkpoint "$WORK/logged/checkpoints/step_00000001" --temperature 0 --max-tokens 12)
grep -aqF "sample: $step1" "$WORK/logged.out" || fail "no sample of step 1 ('$step1') in: $(cat "$WORK/logged.out")"
echo "ok: the split is logged; sample.every samples each checkpoint"

resume_matches "$WORK/pp2" pp2_in_one_process 1 --set parallel.pp=1
resume_matches "$WORK/one" one_under_pp2 2 --set parallel.pp=2
"$K3LAB" eval --checkpoint "$WORK/pp2" --batches 2 > /dev/null

# With expert parallelism: k3-nano (LatentMoE) under pp2 × ep2 ends at the one-process losses, and
# the checkpoints resume across the two layouts.
NANO=(--set model.config=configs/k3-nano.json --set data.seq_len=16)
"$K3LAB" train "${RUN[@]}" "${NANO[@]}" --set run.dir="$WORK/nano" > /dev/null
"${MPI[@]}" -np 4 "$K3LAB" train "${RUN[@]}" "${NANO[@]}" --set parallel.pp=2 --set parallel.ep=2 \
  --set run.dir="$WORK/pp2_ep2" > /dev/null
losses_match "$WORK/nano" "$WORK/pp2_ep2" 3 6
echo "ok: pp2 × ep2 ends at the one-process losses ($(loss_at "$WORK/pp2_ep2" 6))"

# Each pp rank balances its own stages' MoE layers, and the lead records them all. pp2 routes bit
# for bit as one process does: the same expert_load.jsonl, the same moe.* metrics, the same report.
"${MPI[@]}" -np 2 "$K3LAB" train "${RUN[@]}" "${NANO[@]}" --set parallel.pp=2 --set run.dir="$WORK/nano_pp2" > /dev/null
cmp "$WORK/nano/expert_load.jsonl" "$WORK/nano_pp2/expert_load.jsonl" ||
  fail "pp2's expert_load.jsonl differs from one process's: $(head -c 300 "$WORK/nano_pp2/expert_load.jsonl")"
moe_metrics() { grep -o '"moe\.[^,}]*' "$1/metrics.jsonl"; }
[ "$(moe_metrics "$WORK/nano")" = "$(moe_metrics "$WORK/nano_pp2")" ] || fail "pp2's moe.* metrics differ from one process's"
# (Less the files written: the plots, the page and the trace, whose paths and contents differ.)
[ "$("$K3LAB" report "$WORK/nano" | grep -Ev 'svg|report.html|trace.json')" = \
  "$("$K3LAB" report "$WORK/nano_pp2" | grep -Ev 'svg|report.html|trace.json')" ] ||
  fail "k3lab report of pp2 differs from one process's"
# Under pp2 × ep2 every layer holds the same tokens, and its dispatch over the ep ranks.
/usr/bin/python3 - "$WORK/nano/expert_load.jsonl" "$WORK/pp2_ep2/expert_load.jsonl" <<'PY'
import json, sys
one, ep = ([json.loads(line) for line in open(path)] for path in sys.argv[1:])
assert [r["step"] for r in one] == [r["step"] for r in ep], "the steps differ"
for a, b in zip(one, ep):
    assert a["layers"].keys() == b["layers"].keys(), f"step {a['step']}: layers {sorted(b['layers'])}, one process {sorted(a['layers'])}"
    for layer, la in a["layers"].items():
        lb = b["layers"][layer]
        assert (la["tokens"], sum(la["load"])) == (lb["tokens"], sum(lb["load"])), f"step {a['step']} layer {layer}: tokens differ"
        assert len(lb["ranks"]["rows"]) == 2, f"step {a['step']} layer {layer}: no dispatch over 2 ep ranks"
PY
echo "ok: expert_load.jsonl under pp2 holds every MoE layer, as one process ($(grep -c . "$WORK/nano_pp2/expert_load.jsonl") records of $(head -1 "$WORK/nano_pp2/expert_load.jsonl" | grep -o '"[0-9]*":{"tokens"' | wc -l) layers)"
resume_matches "$WORK/pp2_ep2" pp2_ep2_in_one_process 1 --set parallel.pp=1 --set parallel.ep=1
resume_matches "$WORK/nano" nano_under_pp2_ep2 4 --set parallel.pp=2 --set parallel.ep=2

# With context parallelism: each stage's cp ranks run their chunks of every sequence.
"${MPI[@]}" -np 4 "$K3LAB" train "${RUN[@]}" "${NANO[@]}" --set parallel.pp=2 --set parallel.cp=2 \
  --set run.dir="$WORK/pp2_cp2" > /dev/null
losses_match "$WORK/nano" "$WORK/pp2_cp2" 3 6
echo "ok: pp2 × cp2 ends at the one-process losses ($(loss_at "$WORK/pp2_cp2" 6))"

# Refusals, before any work, naming the field.
for bad in "parallel.pp_layers --set parallel.pp_layers=1,x" "parallel.pp_layers --set parallel.pp_layers=2,1" \
           "sample.every --set sample.every=2" "parallel.pp_schedule --set parallel.pp_schedule=interleaved" \
           "parallel.cp --set parallel.cp=2 --set parallel.dp=1"; do
  read -r field settings <<< "$bad"
  np=2
  [[ $settings == *cp=2* ]] && np=4  # dense-tiny's plain gated attention has no cp algorithm
  # shellcheck disable=SC2086
  line=$(first_error_line "${MPI[@]}" -np $np "$K3LAB" train "${RUN[@]}" --set parallel.pp=2 $settings --set run.dir="$WORK/bad")
  [[ $line == *"$field"* ]] || fail "expected an error naming $field, got: $line"
  [ ! -e "$WORK/bad/checkpoints" ] || fail "a refused run wrote checkpoints"
done
echo "ok: bad pipeline settings refused, naming the field"
