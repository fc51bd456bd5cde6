#!/usr/bin/env bash
# `k3lab export`: a dense and a K3 (k3-nano) checkpoint as Hugging Face-style folders, in fp32 and
# bf16, in one file and sharded, each loaded by name in PyTorch and compared with the checkpoint
# (export_check.py); then the refusals, each with one clear line.
source "$(dirname "$0")/common.sh"

"$K3LAB" train "${TINY[@]}" --set train.steps=2 --set run.dir="$WORK/dense"
"$K3LAB" train "${TINY[@]}" --set model.config=configs/k3-nano.json --set train.steps=2 --set run.dir="$WORK/nano"
dense_step="$WORK/dense/checkpoints/step_00000002"
nano_step="$WORK/nano/checkpoints/step_00000002"

# A run directory resolves to its latest checkpoint.
"$K3LAB" export "$WORK/dense" --out "$WORK/dense-fp32"
"$K3LAB" export "$dense_step" --out "$WORK/dense-bf16" --dtype bf16 --max-shard-size 20KB
"$K3LAB" export "$WORK/nano" --out "$WORK/nano-fp32" --max-shard-size 64KiB
# An existing empty directory is used; 1KB puts nearly every tensor in a file of its own.
mkdir "$WORK/nano-bf16"
"$K3LAB" export "$nano_step" --out "$WORK/nano-bf16/" --dtype bf16 --max-shard-size 1KB
"$K3LAB" export "$nano_step" --out "$WORK/nano-bf16-single" --dtype bf16
out=$(/usr/bin/python3 "$ROOT/tests/cli/export_check.py" \
  "$WORK/dense-fp32" "$dense_step" fp32 single \
  "$WORK/dense-bf16" "$dense_step" bf16 sharded \
  "$WORK/nano-fp32" "$nano_step" fp32 sharded \
  "$WORK/nano-bf16" "$nano_step" bf16 sharded \
  "$WORK/nano-bf16-single" "$nano_step" bf16 single) || fail "$out"
echo "$out"
# The checkpoint's Quantile Balancing ranges are state, not parameters: they stay behind.
[ "$(grep -c "left in the checkpoint: 7 tensors \['block_sparse_moe.quantile_balancing.range'\]" <<<"$out")" -eq 3 ] ||
  fail "expected every k3-nano checkpoint to hold 7 balancing ranges, not exported"

expect_error "field --dtype.*expected fp32 or bf16.*fp16" "$K3LAB" export "$dense_step" --out "$WORK/x" --dtype fp16
expect_error "field --max-shard-size.*5GB.*found '5 GB'" "$K3LAB" export "$dense_step" --out "$WORK/x" --max-shard-size "5 GB"
expect_error "field --max-shard-size.*found '0MB'" "$K3LAB" export "$dense_step" --out "$WORK/x" --max-shard-size 0MB
expect_error "$WORK/nowhere.*not a directory" "$K3LAB" export "$WORK/nowhere" --out "$WORK/x"
mkdir "$WORK/empty-run"
expect_error "no usable checkpoint" "$K3LAB" export "$WORK/empty-run" --out "$WORK/x"
[ ! -e "$WORK/x" ] || fail "a refused export left $WORK/x behind"
# A folder already there is never overwritten.
before=$(ls -l "$WORK/dense-fp32" | md5sum)
expect_error "dense-fp32.*not empty" "$K3LAB" export "$dense_step" --out "$WORK/dense-fp32"
[ "$(ls -l "$WORK/dense-fp32" | md5sum)" = "$before" ] || fail "the refused export changed $WORK/dense-fp32"
[ -z "$(find "$WORK" -maxdepth 1 -name '.*.tmp.*')" ] || fail "temporary folders left behind"
echo "export: ok"
