#!/usr/bin/env bash
# k3lab train with the activation manager's policies: recompute (either granularity), offload
# (host, and a peer rank's memory under mpirun) and per-class rules end at keep's losses to the
# last digit, in one process and under tp, ep, cp and pp (fp8 storage over a whole run:
# fp8_training.sh); budget mode stays within its budget at every step, logs its plan, predicts its
# peak, prints its table under --profile, and refuses a budget too small in one line naming the
# least that works; bad settings are refused naming the field.
source "$(dirname "$0")/common.sh"
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
NANO=("${TINY[@]}" --set model.config=configs/k3-nano.json --set train.steps=6
      --set checkpoint.every=0 --set train.threads=1)
same_losses() {  # A B: the same loss at every step, to the last digit
  [ "$(grep -o '"loss":[^,}]*' "$1/metrics.jsonl")" = "$(grep -o '"loss":[^,}]*' "$2/metrics.jsonl")" ] ||
    fail "$(basename "$2")'s losses differ from $(basename "$1")'s"
}

"$K3LAB" train "${NANO[@]}" --set run.dir="$WORK/keep" > /dev/null
for setting in "policy=recompute" "policy=recompute activation.granularity=layer" "policy=offload" \
               "rules=*.*.block_sparse_moe.*=recompute,mla.*.self_attn.*=offload"; do
  name=$(tr -c 'a-z0-9\n' '_' <<< "$setting")
  sets=()
  for s in $setting; do [[ $s == activation.* ]] && sets+=(--set "$s") || sets+=(--set "activation.$s"); done
  "$K3LAB" train "${NANO[@]}" "${sets[@]}" --set run.dir="$WORK/$name" > /dev/null
  same_losses "$WORK/keep" "$WORK/$name"
  keep_peak=$(field "$WORK/keep" 6 activation.peak_bytes) peak=$(field "$WORK/$name" 6 activation.peak_bytes)
  [ "$peak" -lt "$keep_peak" ] || fail "$setting: peak $peak bytes, not below keep's $keep_peak"
  echo "ok: $setting ends at keep's losses, peak $peak bytes against keep's $keep_peak"
done
[ "$(field "$WORK/policy_recompute" 6 activation.predicted_peak_bytes)" -gt 0 ] ||
  fail "no predicted peak in metrics.jsonl"

# Offload to the peer rank's memory, under dp2: the dp2 keep run's losses.
"${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.dp=2 --set run.dir="$WORK/dp2" > /dev/null
"${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" --set parallel.dp=2 --set activation.policy=offload \
  --set activation.offload_to=peer --set run.dir="$WORK/dp2_peer" > /dev/null
same_losses "$WORK/dp2" "$WORK/dp2_peer"
[ "$(field "$WORK/dp2_peer" 6 activation.offloaded_peak_bytes)" -gt 0 ] || fail "nothing went to the peer"
echo "ok: dp2 with tensors offloaded to the peer rank ends at dp2's losses"

# Under tp, ep (MoonEP), cp and pp a recompute re-runs the layers' collectives on every rank of
# their groups (and offload and fp8 are per rank): each layout ends at its keep run's losses.
for layout in "tp=2:recompute" "ep=2:recompute" "cp=2:recompute" "pp=2:offload" "tp=2:offload"; do
  dim=${layout%%:*} policy=${layout#*:}
  extra=(--set "parallel.$dim")
  [ "$dim" = ep=2 ] && extra+=(--set parallel.moe_dispatch=moonep)
  [ "$dim" = pp=2 ] && extra+=(--set train.grad_accum=2)
  [ -d "$WORK/$dim" ] || "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" "${extra[@]}" --set run.dir="$WORK/$dim" > /dev/null
  "${MPI[@]}" -np 2 "$K3LAB" train "${NANO[@]}" "${extra[@]}" --set activation.policy="$policy" \
    --set run.dir="$WORK/${dim}_$policy" > /dev/null
  same_losses "$WORK/$dim" "$WORK/${dim}_$policy"
  echo "ok: $dim with $policy ends at its keep run's losses"
done

# Budget mode: between the least (everything recomputed) and keep's peak.
least=$(field "$WORK/policy_recompute" 6 activation.peak_bytes)
for budget in $(( (least + keep_peak) / 2 )) $(( least + (keep_peak - least) / 5 )); do
  out=$("$K3LAB" train "${NANO[@]:1}" --set activation.budget="$budget" --profile \
        --set run.dir="$WORK/budget_$budget" 2>&1 | tr '\r' '\n')
  grep -q "activation budget .*recomputed and .*offloaded; predicted peak" <<< "$out" || fail "no plan logged: $out"
  grep -q "^activations (MiB a step" <<< "$out" || fail "--profile printed no activation table"
  grep -q "kda.self_attn.q " <<< "$out" || fail "the activation table has no kda.self_attn.q row"
  same_losses "$WORK/keep" "$WORK/budget_$budget"
  for s in 1 2 3 4 5 6; do
    p=$(field "$WORK/budget_$budget" $s activation.peak_bytes)
    [ "$p" -le "$budget" ] || fail "budget $budget: step $s peaked at $p bytes"
  done
  echo "ok: budget $budget bytes met at every step (last peak $p, predicted $(field "$WORK/budget_$budget" 6 activation.predicted_peak_bytes))"
done
expect_error "activation.budget .* is below the least this run can use: .* \\(${least} bytes" \
  "$K3LAB" train "${NANO[@]}" --set activation.budget=$((least - 1)) --set run.dir="$WORK/too_small"

expect_error "activation.rules" "$K3LAB" train "${NANO[@]}" --set activation.rules=mla.q --set run.dir="$WORK/bad1"
expect_error "activation.budget" "$K3LAB" train "${NANO[@]}" --set activation.budget=lots --set run.dir="$WORK/bad2"
expect_error "activation.offload_to" "$K3LAB" train "${NANO[@]}" --set activation.offload_to=peer \
  --set activation.policy=offload --set run.dir="$WORK/bad3"
echo "ok: bad activation settings are refused naming the field"
