#!/usr/bin/env bash
# `k3lab plan`: its parameter counts are `k3lab model inspect`'s for every config; on k3lab's own
# CPU layouts (the "cpu" preset) its bytes per step equal, group by group, the counters the same
# run under mpirun records in metrics.jsonl, and its activation estimate is within 10% of the
# measured peak; the released K3 plans and searches on H200s; bad input gets one line.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)

for config in configs/*.json; do
  inspected=$("$K3LAB" model inspect "$config" | awk '$1 == "total" { print $2 " " $3; exit }')
  planned=$("$K3LAB" plan --model "$config" --cluster H200 --layout dp=1 --seq 64 --json |
    python3 -c 'import json, sys; p = json.load(sys.stdin); print(p["params_total"], p["params_active"])')
  [ "$inspected" = "$planned" ] || fail "$config: model inspect says $inspected, plan $planned"
done
echo "ok: parameter counts equal model inspect for every config"

# One run of 4 steps per layout; step 3 is compared (steps 2 and 4 also gather the pipeline's
# measured timeline, a diagnostic the plan leaves out; the world group carries the memory and
# stop-flag gathers, also left out).
STEPS=(--quiet --set data.builtin_tokens=200000 --set data.seq_len=32 --set train.batch_size=4
       --set train.warmup_steps=5 --set eval.every=0 --set train.threads=1 --set checkpoint.every=0
       --set sample.every=0 --set train.steps=4)
TABLE="$WORK/table.txt"
# compare CONFIG OPTIMIZER ZERO LAYOUT MICRO_BATCHES [DISPATCH [ACTIVATION]]. Under expert
# parallelism the plan takes the run's routing of step 3 (--routing): the rows each rank computes,
# and MoonEP's replicas, follow from it. Under recompute the layers' forward collectives run twice.
compare() {
  local config=$1 optimizer=$2 zero=$3 layout=$4 m=$5 dispatch=${6:-alltoall} activation=${7:-keep}
  local name np=1 readers=1 sets=() routing=() part key value
  name=$(tr ',=' '_-' <<< "$config-$optimizer-z$zero-$layout-$dispatch-$activation")
  IFS=, read -ra parts <<< "$layout"
  for part in "${parts[@]}"; do
    key=${part%=*} value=${part#*=}
    if [ "$key" = sp ]; then sets+=(--set parallel.sequence_parallel=true); continue; fi
    sets+=(--set "parallel.$key=$value")
    [ "$key" = vp ] || np=$((np * value))
    if [ "$key" = dp ] || [ "$key" = ep ]; then readers=$((readers * value)); fi
    if [ "$key" = ep ] && [ "$value" -gt 1 ]; then routing=(--routing "$WORK/$name" --routing-step 3); fi
  done
  "${MPI[@]}" -np "$np" "$K3LAB" train "${STEPS[@]}" "${sets[@]}" --set model.config="configs/$config" \
    --set train.optimizer="$optimizer" --set parallel.zero="$zero" --set train.grad_accum="$m" \
    --set parallel.moe_dispatch="$dispatch" --set activation.policy="$activation" \
    --set run.dir="$WORK/$name" > "$WORK/$name.log" 2>&1 ||
    fail "$name: the run failed: $(tail -n 3 "$WORK/$name.log")"
  "$K3LAB" plan --cluster cpu --model "configs/$config" --layout "$layout" --zero "$zero" \
    --optimizer "$optimizer" --seq 32 --micro-batch $((4 / readers)) --global-batch $((32 * 4 * m)) \
    --moe-dispatch "$dispatch" --activation "$activation" "${routing[@]}" --json > "$WORK/$name.plan.json" ||
    fail "$name: the plan failed"
  python3 - "$WORK/$name/metrics.jsonl" "$WORK/$name.plan.json" "$config $optimizer ZeRO-$zero $layout $dispatch $activation" >> "$TABLE" <<'PY' || fail "$name: planned and measured bytes differ: $(tail -n 3 "$TABLE")"
import json, sys
metrics, plan, what = sys.argv[1:]
step = next(r for r in map(json.loads, open(metrics)) if r.get("step") == 3)
planned = json.load(open(plan))["comm_bytes_by_group"]
measured = {k.split(".")[1]: v for k, v in step.items()
            if k.startswith("comm.") and k.endswith(".bytes") and k.count(".") == 2}
measured.pop("world", None)
ok = True
for g in sorted(set(planned) | set(measured)):
    p, m = planned.get(g, 0), measured.get(g, 0)
    if p == 0 and m == 0:
        continue
    ok &= p == m
    verdict = "=" if p == m else f"DIFFERS ({100 * (p / m - 1):+.2f}%)"
    print(f"| {what} | {g} | {p:.0f} | {m:.0f} | {verdict} |")
# Activations: the plan's (the pre-flight estimate of the rank needing the most) against the
# largest measured peak of any rank, within 10% either way (measured: from 6.8% below under
# sequence parallelism to 1% above).
plan_acts = next(m["bytes"] for m in json.load(open(plan))["memory"] if m["part"] == "activations")
peak = max(step.get("activation.peak_bytes.ranks", [step["activation.peak_bytes"]]))
close = abs(plan_acts - peak) <= 0.10 * peak
ok &= close
print(f"| {what} | activations | {plan_acts:.0f} | {peak:.0f} | {100 * (plan_acts / peak - 1):+.1f}% |")
sys.exit(0 if ok else 1)
PY
}
compare dense-tiny.json adamw 0 dp=2 1
compare dense-tiny.json adamw 1 dp=2 1
compare dense-tiny.json adamw 2 dp=4 2
compare dense-tiny.json muon 0 dp=2 1
compare dense-tiny.json muon 1 dp=2 1
compare dense-tiny.json muon 2 dp=4 2
compare dense-tiny.json muon 0 tp=2 1
compare dense-tiny.json muon 1 dp=2,tp=2,sp=1 1
compare dense-tiny.json adamw 0 tp=2 1
compare dense-tiny.json adamw 0 tp=2,sp=1 1
compare dense-tiny.json adamw 1 dp=2,tp=2,sp=1 1
compare dense-tiny.json adamw 0 pp=2 4
compare k3-nano.json adamw 0 pp=2,vp=2 4
compare k3-nano.json adamw 1 dp=2 1
compare k3-nano.json adamw 0 pp=2 4
compare k3-nano.json adamw 0 ep=2 1 alltoall
compare k3-nano.json adamw 0 ep=2 2 moonep
compare k3-nano.json adamw 0 cp=2 1
compare k3-nano.json adamw 0 tp=2 1 alltoall recompute
compare k3-nano.json adamw 0 tp=2,sp=1 1 alltoall recompute
compare k3-nano.json adamw 0 ep=2 1 alltoall recompute
compare k3-nano.json adamw 0 ep=2 2 moonep recompute
compare k3-nano.json adamw 0 cp=2 1 alltoall recompute
cat "$TABLE"
echo "ok: planned bytes per step equal the measured counters"

# The released K3 on 1,024 H200s, the layout docs/planner.md details: its counts, and it fits.
"$K3LAB" plan --model configs/k3.json --cluster H200 --layout dp=8,tp=8,pp=16,sp=1 \
  --activation recompute --seq 8192 --global-batch 16777216 --json > "$WORK/k3.json"
python3 - "$WORK/k3.json" <<'PY' || fail "the released K3's plan: $(head -c 600 "$WORK/k3.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert (p["params_total"], p["params_active"]) == (2779484476000, 105364017760), p["params_total"]
assert p["fits"] and p["gpus"] == 1024 and p["micro_batches"] == 256, p
assert 0 < p["bubble"] < 0.1 and 0 < p["mfu"] < 0.5 and p["step_seconds"] > p["compute_seconds"], p
PY
echo "ok: the released K3 plans on 1024 H200s"

expect_error "--cluster: unknown preset 'H999'" "$K3LAB" plan --model configs/k3.json --cluster H999 --layout dp=8
expect_error "--layout: unknown part 'tq'" "$K3LAB" plan --model configs/k3.json --layout dp=8,tq=3
expect_error "field vocab_size: .* do not split evenly over the tensor-parallel group of size 3" \
  "$K3LAB" plan --model configs/k3.json --layout dp=8,tp=3
expect_error "--activation 'sometimes': one of keep, recompute, fp8, offload or bf16" \
  "$K3LAB" plan --model configs/k3.json --layout dp=8 --activation sometimes
