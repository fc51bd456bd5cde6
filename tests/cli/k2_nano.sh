#!/usr/bin/env bash
# The K2-style baseline configs/k2-nano.json (MLA in every layer, the standard top-k MoE with the
# bias balancer, plain residuals): `model inspect` describes it, a run trains it (the loss falls),
# reports its expert load and moves every router bias by the update rate, keeps no Quantile
# Balancing state, and resumed from a checkpoint ends bit-identical to the straight run. Bad
# values of the two switches are refused in one line.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
K2=("${TINY[@]}" --set train.threads=1 --set model.config=configs/k2-nano.json --set data.seq_len=16)

"$K3LAB" model inspect configs/k2-nano.json > "$WORK/inspect.txt"
grep -Eq '^moe\.routed_experts +301056 +75264$' "$WORK/inspect.txt" ||
  fail "inspect: 7 layers x 8 experts of 3 x 28 x 64, 2 active: $(cat "$WORK/inspect.txt")"
! grep -q 'moe.latent\|kda\|attn_res' "$WORK/inspect.txt" || fail "inspect: $(cat "$WORK/inspect.txt")"
echo "ok: inspect"

"$K3LAB" train "${K2[@]}" --set train.steps=8 --set checkpoint.every=4 --set run.dir="$WORK/straight"
first=$(loss_at "$WORK/straight" 1) last=$(loss_at "$WORK/straight" 8)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || fail "loss $first -> $last"
grep -q '"moe.maxvio.1"' "$WORK/straight/metrics.jsonl" || fail "no moe.maxvio.1 in metrics.jsonl"
[ "$(wc -l < "$WORK/straight/expert_load.jsonl")" -eq 8 ] || fail "expert_load.jsonl: one line a step"
"$K3LAB" report "$WORK/straight" > "$WORK/report.txt"
/usr/bin/python3 - "$WORK/straight" <<'PY'
import json, sys
sys.path.insert(0, "tests/reference")
import numpy as np
import st
run = sys.argv[1]
records = [json.loads(line) for line in open(run + "/expert_load.jsonl")]
for r in records:
    assert sorted(r["layers"], key=int) == [str(l) for l in range(1, 8)], r["layers"].keys()
    for layer in r["layers"].values():
        assert sum(layer["load"]) == 2 * layer["tokens"] == 2 * 64, layer
w = st.load(run + "/checkpoints/step_00000008/model.safetensors")
assert not [n for n in w if "quantile_balancing" in n or "routed_expert" in n], sorted(w)
biases = [n for n in w if n.endswith("e_score_correction_bias")]
assert len(biases) == 7, biases
for n in biases:
    # Eight sign updates of 0.001: every bias a multiple of it, at most 8 of them, and moved.
    steps = w[n].astype(np.float64) / 1e-3
    assert np.all(np.abs(steps - np.round(steps)) < 1e-3) and np.all(np.abs(steps) < 8.001), (n, w[n])
    assert np.any(steps != 0), n
print(f"ok: loads of 7 layers in 8 records; {len(biases)} router biases moved in steps of 0.001")
PY
echo "ok: trained, loss $first -> $last"

cp -r "$WORK/straight" "$WORK/resumed"
rm -r "$WORK/resumed/checkpoints/step_00000008"
"$K3LAB" train --quiet --resume "$WORK/resumed"
same_checkpoint "$WORK/straight/checkpoints/step_00000008" "$WORK/resumed/checkpoints/step_00000008"
[ "$(wc -l < "$WORK/resumed/expert_load.jsonl")" -ge 8 ] || fail "the resumed run's expert load"
echo "ok: resumed from step 4, bit-identical at step 8"

# k2-nano.json with one field changed: with_field NAME JSON_VALUE OUT.
with_field() {
  /usr/bin/python3 -c 'import json, sys; c = json.load(open("configs/k2-nano.json")); c[sys.argv[1]] = json.loads(sys.argv[2]); json.dump(c, open(sys.argv[3], "w"))' "$@"
}
with_field routed_expert_hidden_size 32 "$WORK/latent_width.json"
expect_error 'routed_expert_hidden_size.*moe_latent false.*hidden_size \(64\)' \
  "$K3LAB" model inspect "$WORK/latent_width.json"
with_field moe_balancer '"aux_loss"' "$WORK/balancer.json"
expect_error 'moe_balancer.*"quantile" or "bias"' "$K3LAB" model inspect "$WORK/balancer.json"
with_field moe_bias_update_rate 0 "$WORK/rate.json"
expect_error 'moe_bias_update_rate.*positive' "$K3LAB" model inspect "$WORK/rate.json"
