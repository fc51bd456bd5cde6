#!/usr/bin/env bash
# Errors before work: what a run can be refused for is refused before its first step, in one line
# naming the fields and the numbers, quickly and without writing anything; --dry-run runs the same
# checks and prints the memory estimate.
source "$(dirname "$0")/common.sh"

# Runs expect_error and checks that it answered within LIMIT seconds and created no run directory.
refused_early() {
  local limit=$1 dir=$2; shift 2
  local start=$SECONDS
  expect_error "$@"
  [ $((SECONDS - start)) -le "$limit" ] || fail "took $((SECONDS - start)) s, more than $limit s: ${*:2}"
  [ ! -e "$dir" ] || fail "the refused run wrote $dir"
}

# A validation split shorter than one evaluation window: refused with evaluation on, trained without.
SHORT_VAL=(--set data.val_fraction=0.0001 --set data.seq_len=1000 --set train.steps=2)
refused_early 30 "$WORK/val" "data.val_fraction.*0.0001.*data.seq_len \+ 1 = 1001.*train.batch_size = 4" \
  "$K3LAB" train "${TINY[@]}" "${SHORT_VAL[@]}" --set eval.every=1 --set run.dir="$WORK/val"
"$K3LAB" train "${TINY[@]}" "${SHORT_VAL[@]}" --set eval.every=0 --set run.dir="$WORK/val-off" >/dev/null
[ "$(wc -l < "$WORK/val-off/metrics.jsonl")" -eq 2 ] || fail "the run without evaluation did not train"

# A training split shorter than one batch.
refused_early 30 "$WORK/batch" "train.batch_size.*fewer than one batch of train.batch_size = 64" \
  "$K3LAB" train "${TINY[@]}" --set data.builtin_tokens=1000 --set train.batch_size=64 --set run.dir="$WORK/batch"

# A model too large for the memory limit: the estimate and the limit in the message.
refused_early 30 "$WORK/mem" \
  "run.memory_limit_gib: the run needs an estimated [0-9.]+ (MiB|GiB) \(parameters .*activations .*\), more than the 51.20 MiB of run.memory_limit_gib = 0.05" \
  "$K3LAB" train "${TINY[@]}" --set model.config=configs/k3-small.json --set run.memory_limit_gib=0.05 \
  --set train.steps=2 --set run.dir="$WORK/mem"

# --dry-run: the estimate by part, exit 0, no run directory.
# (here-strings, not pipes: grep -q stops reading at its match, and under pipefail the writer's
# broken pipe would fail the check)
out=$("$K3LAB" train "${TINY[@]}" --set model.config=configs/k3-micro.json --dry-run --set run.dir="$WORK/dry")
for part in parameters gradients "optimizer state" activations "expert balancing" data total available; do
  grep -Eq "^  $part +[0-9.]+ (B|KiB|MiB|GiB)" <<< "$out" || fail "--dry-run prints no '$part' line: $out"
done
grep -q "1 micro-batch of 4 x 32 tokens in flight" <<< "$out" || fail "--dry-run does not say the batch shape: $out"
[ ! -e "$WORK/dry" ] || fail "--dry-run wrote the run directory"
refused_early 30 "$WORK/dry" "data.val_fraction" \
  "$K3LAB" train "${TINY[@]}" "${SHORT_VAL[@]}" --set eval.every=1 --dry-run --set run.dir="$WORK/dry"

# Model config values without meaning, named; huge sizes refused at once by train and model inspect.
bad_config() {  # NAME KEY=JSON...: configs/k3-micro.json with the keys replaced
  python3 - "$WORK/$1.json" "${@:2}" <<'PY'
import json, sys
c = json.load(open("configs/k3-micro.json"))
for kv in sys.argv[2:]:
    key, value = kv.split("=", 1)
    *outer, last = key.split(".")
    node = c
    for k in outer:
        node = node[k]
    node[last] = json.loads(value)
json.dump(c, open(sys.argv[1], "w"))
PY
  echo "$WORK/$1.json"
}
expect_error "field moe_router_activation_func: expected \"sigmoid\"" \
  "$K3LAB" model inspect "$(bad_config router 'moe_router_activation_func="softmax"')"
expect_error "field hidden_act" "$K3LAB" model inspect "$(bad_config act 'hidden_act="relu"')"
expect_error "field attn_res_block_size: .*found -2" "$K3LAB" model inspect "$(bad_config block attn_res_block_size=-2)"
expect_error "field linear_attn_config.head_dim" "$K3LAB" model inspect "$(bad_config kda linear_attn_config.head_dim=0)"
expect_error "field kv_lora_rank: .*found -1" "$K3LAB" model inspect "$(bad_config rank kv_lora_rank=-1)"
expect_error "field num_experts_per_token" "$K3LAB" model inspect "$(bad_config topk num_experts_per_token=16)"
expect_error "field linear_attn_config.kda_layers: layer 9 is outside" \
  "$K3LAB" model inspect "$(bad_config layers 'linear_attn_config.kda_layers=[1,2,3,5,6,9]')"
experts=$(bad_config experts num_experts=1000000000)
layers=$(bad_config layers num_hidden_layers=10000000)
refused_early 10 "$WORK/huge" "field num_experts: .*found 1000000000" "$K3LAB" model inspect "$experts"
refused_early 10 "$WORK/huge" "field num_hidden_layers: .*found 10000000" "$K3LAB" model inspect "$layers"
refused_early 10 "$WORK/huge" "field num_experts: .*found 1000000000" \
  "$K3LAB" train "${TINY[@]}" --set model.config="$experts" --set run.dir="$WORK/huge"
refused_early 10 "$WORK/huge" "field num_hidden_layers" \
  "$K3LAB" train "${TINY[@]}" --set model.config="$layers" --set run.dir="$WORK/huge"

# model inspect: training memory per part, for the batch shape asked for.
out=$("$K3LAB" model inspect configs/k3-micro.json --batch-size 3 --seq-len 64)
grep -Eq "^  activations +[0-9.]+ MiB +1 micro-batch of 3 x 64 tokens" <<< "$out" ||
  fail "model inspect prints no activations line for 3 x 64: $out"

# More threads than cores: capped with a warning, and the run trains.
many=$(( $(nproc) + 3 ))
err=$(K3_THREADS=$many "$K3LAB" train "${TINY[@]}" --set train.threads=0 --set train.steps=2 \
      --set run.dir="$WORK/threads-env" 2>&1 >/dev/null)
grep -q "K3_THREADS = $many exceeds the $(nproc) cores" <<< "$err" || fail "no warning for K3_THREADS: $err"
err=$("$K3LAB" train "${TINY[@]}" --set train.threads=$many --set train.steps=2 --set run.dir="$WORK/threads" 2>&1 >/dev/null)
grep -q "train.threads = $many exceeds the $(nproc) cores" <<< "$err" || fail "no warning for train.threads: $err"
[ "$(wc -l < "$WORK/threads/metrics.jsonl")" -eq 2 ] || fail "the run with capped threads did not train"

# --config naming a directory.
expect_error "file $WORK: is a directory, expected a file" \
  "$K3LAB" train --config "$WORK" "${TINY[@]}" --set train.steps=1 --set run.dir="$WORK/dir-run"
