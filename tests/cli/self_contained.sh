#!/usr/bin/env bash
# A checkpoint stands alone: eval, sample and resume use the configurations saved in it, so editing
# or moving the files the run started from changes nothing, and eval and sample need no optimizer
# state. A resume asking for another model, batch or sequence length, or finding changed data, is
# refused unless the change is stated with --allow-change; changes are recorded in history.jsonl
# and the run's original config.toml is never rewritten.
source "$(dirname "$0")/common.sh"
orig="$WORK/orig"
run="$WORK/run"
mkdir -p "$orig"
cp configs/dense-tiny.json "$orig/model.json"
cat > "$orig/run.toml" <<TOML
[model]
config = "model.json"
[data]
builtin_tokens = 200000
seq_len = 32
[train]
steps = 6
batch_size = 4
warmup_steps = 2
threads = 2
[eval]
every = 0
[checkpoint]
every = 3
[sample]
max_tokens = 1
[run]
dir = "$run"
TOML
"$K3LAB" train --quiet --config "$orig/run.toml"
[ -s "$run/checkpoints/step_00000006/config.json" ] || fail "no config.json in the checkpoint"
[ -s "$run/checkpoints/step_00000006/run_config.toml" ] || fail "no run_config.toml in the checkpoint"
eval_before=$("$K3LAB" eval --checkpoint "$run" --batches 2)
sample_before=$("$K3LAB" sample --checkpoint "$run" --prompt "The " --max-tokens 24 --temperature 0)

# Edit the original model and run configurations, then move them away.
sed -i 's/"hidden_size": 64/"hidden_size": 96/' "$orig/model.json"
sed -i 's/seq_len = 32/seq_len = 64/' "$orig/run.toml"
mv "$orig" "$WORK/moved"
[ "$("$K3LAB" eval --checkpoint "$run" --batches 2)" = "$eval_before" ] || fail "eval changed with the original files"
[ "$("$K3LAB" sample --checkpoint "$run" --prompt "The " --max-tokens 24 --temperature 0)" = "$sample_before" ] ||
  fail "sample changed with the original files"
cp -r "$run/checkpoints/step_00000006" "$WORK/model_only"
rm "$WORK/model_only/optimizer.safetensors"
[ "$("$K3LAB" eval --checkpoint "$WORK/model_only" --batches 2)" = "$eval_before" ] || fail "eval needs the optimizer state"
echo "ok: eval and sample use the checkpoint's own configurations and weights only"

config_sum=$(sha256sum < "$run/config.toml")
"$K3LAB" train --quiet --resume "$run" --set train.steps=9
[ -f "$run/checkpoints/step_00000009/manifest.json" ] || fail "resume without the original files did not train"
grep -q '"key":"train.steps","to":"9"' "$run/history.jsonl" || fail "the steps change is not in history.jsonl"

# Changes that make it another run are refused unless stated, all in one line.
expect_error "data.seq_len 32 -> 16.*--allow-change data.seq_len" \
  "$K3LAB" train --quiet --resume "$run" --set train.steps=12 --set data.seq_len=16
expect_error "data.seed 1234 -> 7.*--allow-change data.seed" \
  "$K3LAB" train --quiet --resume "$run" --set train.steps=12 --set data.seed=7
expect_error "train.batch_size 4 -> 2.*--allow-change train.batch_size" \
  "$K3LAB" train --quiet --resume "$run" --set train.steps=12 --set train.batch_size=2
expect_error "model.config .*data.seq_len 32 -> 64" \
  "$K3LAB" train --quiet --resume "$run" --config "$WORK/moved/run.toml" --set train.steps=12
expect_error "--allow-change bogus: expected one of model.config" \
  "$K3LAB" train --quiet --resume "$run" --allow-change bogus
expect_error "--allow-change: only meaningful with --resume" \
  "$K3LAB" train "${TINY[@]}" --allow-change data --set run.dir="$WORK/other"
[ ! -f "$run/checkpoints/step_00000012/manifest.json" ] || fail "a refused resume trained"

"$K3LAB" train --quiet --resume "$run" --set train.steps=12 --set data.seq_len=16 --allow-change data.seq_len
grep -q '^seq_len = 16' "$run/checkpoints/step_00000012/run_config.toml" || fail "the checkpoint does not carry the new seq_len"
grep -q '"key":"data.seq_len","to":"16"' "$run/history.jsonl" || fail "the seq_len change is not in history.jsonl"
[ "$(sha256sum < "$run/config.toml")" = "$config_sum" ] || fail "config.toml was rewritten"
echo "ok: guarded changes refused unless stated, recorded in history.jsonl, config.toml untouched"

# Data that changed since the run started.
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "line %d of a small text corpus, for a test.\n", i }' > "$WORK/text.txt"
"$K3LAB" train "${TINY[@]}" --set data.source="$WORK/text.txt" --set train.steps=4 --set run.dir="$WORK/text_run"
echo "one more line" >> "$WORK/text.txt"
expect_error "the data changed since the run started.*--allow-change data" \
  "$K3LAB" train --quiet --resume "$WORK/text_run" --set train.steps=6
"$K3LAB" train --quiet --resume "$WORK/text_run" --set train.steps=6 --allow-change data
grep -q '"key":"data"' "$WORK/text_run/history.jsonl" || fail "the data change is not in history.jsonl"
echo "ok: changed data refused unless stated"
