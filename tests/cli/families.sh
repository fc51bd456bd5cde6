#!/usr/bin/env bash
# The model families as released (docs/families.md): `model inspect` counts Llama 3.1 8B and
# DeepSeek-V3 from their published config.json (its multi-token prediction module apart), `plan`
# reads them, llama-nano and deepseek-v3-nano train (the loss falls), sample and resume
# bit-identically, and what k3lab reads but does not train is refused by `train` in one line
# naming the field.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1

"$K3LAB" model inspect configs/llama-3.1-8b.json > "$WORK/llama.txt"
grep -Eq '^total +8030261248 +8030261248$' "$WORK/llama.txt" || fail "llama: $(cat "$WORK/llama.txt")"
"$K3LAB" model inspect configs/deepseek-v3.json > "$WORK/v3.txt"
grep -Eq '^total +684489845504 ' "$WORK/v3.txt" || fail "deepseek-v3: $(cat "$WORK/v3.txt")"
grep -Eq '^mtp\.moe\.routed_experts +11274289152 +352321536$' "$WORK/v3.txt" ||
  fail "deepseek-v3's prediction module: $(cat "$WORK/v3.txt")"
"$K3LAB" plan --model configs/deepseek-v3.json --cluster H100 --layout pp=16,ep=64 --seq 4096 \
  --activation recompute > "$WORK/plan.txt"
grep -q '^parameters: 684B total, 40.1B active per token$' "$WORK/plan.txt" || fail "plan: $(head -3 "$WORK/plan.txt")"
echo "ok: inspect and plan"

RUN=("${TINY[@]}" --set train.threads=1 --set data.seq_len=32 --set train.steps=8
     --set checkpoint.every=4 --set sample.every=0)
for model in llama-nano deepseek-v3-nano; do
  "$K3LAB" train "${RUN[@]}" --set model.config="configs/$model.json" --set run.dir="$WORK/$model"
  first=$(field "$WORK/$model" 1 loss) last=$(field "$WORK/$model" 8 loss)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "$model: loss $first -> $last"
  "$K3LAB" sample --checkpoint "$WORK/$model" --prompt "The " --max-tokens 8 > /dev/null
  cp -r "$WORK/$model" "$WORK/$model-resumed"
  rm -r "$WORK/$model-resumed/checkpoints/step_00000008"
  "$K3LAB" train --quiet --resume "$WORK/$model-resumed"
  same_checkpoint "$WORK/$model/checkpoints/step_00000008" "$WORK/$model-resumed/checkpoints/step_00000008"
  echo "ok: $model trained (loss $first -> $last), sampled, resumed bit-identically"
done

# deepseek-v3-nano.json with one field changed: with_field NAME JSON_VALUE OUT.
with_field() {
  /usr/bin/python3 -c 'import json, sys; c = json.load(open("configs/deepseek-v3-nano.json")); c[sys.argv[1]] = json.loads(sys.argv[2]); json.dump(c, open(sys.argv[3], "w"))' "$@"
}
expect_error 'field num_nextn_predict_layers: .*not trained' \
  "$K3LAB" train "${RUN[@]}" --set model.config=configs/deepseek-v3.json --set run.dir="$WORK/v3"
with_field rope_scaling '{"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}' "$WORK/yarn.json"
expect_error 'field rope_scaling.rope_type: YaRN' \
  "$K3LAB" train "${RUN[@]}" --set model.config="$WORK/yarn.json" --set run.dir="$WORK/yarn"
with_field n_group 2 "$WORK/groups.json"
expect_error 'field n_group: group-limited routing' \
  "$K3LAB" train "${RUN[@]}" --set model.config="$WORK/groups.json" --set run.dir="$WORK/groups"
with_field attention_bias true "$WORK/bias.json"
expect_error 'field attention_bias: expected false' "$K3LAB" model inspect "$WORK/bias.json"
expect_error 'field num_key_value_heads: 4 key-value heads do not split evenly over the tensor-parallel group of size 8' \
  "$K3LAB" plan --model configs/llama-nano.json --layout tp=8 --seq 64
