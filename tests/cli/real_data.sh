#!/usr/bin/env bash
# The walkthrough of docs/data.md, "From a text file to a trained model", on tinyshakespeare
# (skipped without ../shared): a 4096-id BPE tokenizer, shards, a k3-micro-4k run on them whose
# loss falls and whose sample decodes to text; a model whose vocabulary is smaller than the
# tokenizer's is refused in one line.
source "$(dirname "$0")/common.sh"

TEXT=$ROOT/../shared/data/tinyshakespeare.txt
if [ ! -f "$TEXT" ]; then
  echo "skipped: needs ../shared/data/tinyshakespeare.txt, absent here"
  exit 77
fi
cd "$WORK"
cp "$TEXT" tinyshakespeare.txt

"$K3LAB" tokenizer train --input tinyshakespeare.txt --vocab-size 4096 --out tok > /dev/null
[ "$(wc -l < tok/tiktoken.model)" -eq 4093 ] || fail "expected 4093 ranks (4096 ids less 3 specials)"
out=$("$K3LAB" data prepare --input tinyshakespeare.txt --tokenizer tok --out shakespeare \
  --val-fraction 0.05 2>/dev/null)
grep -q "train 6860 documents, 300131 tokens; validation 362 documents, 16184 tokens" <<< "$out" ||
  fail "prepare: $out"

RUN=(--quiet --set model.config="$ROOT/configs/k3-micro-4k.json" --set data.source=shards
     --set data.path=shakespeare --set data.tokenizer=tok --set data.seq_len=128
     --set train.batch_size=4 --set train.steps=30 --set eval.every=30 --set eval.batches=2
     --set train.threads=1 --set sample.prompt="ROMEO:" --set sample.max_tokens=8)
out=$("$K3LAB" train "${RUN[@]}" --set run.dir=runs/shakespeare)
first=$(loss_at runs/shakespeare 1) last=$(loss_at runs/shakespeare 30)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }' || fail "loss $first -> $last"
grep -q '"val_loss"' runs/shakespeare/metrics.jsonl || fail "no validation loss"
sample=$(sed -n '/^sample:$/{n;p}' <<< "$out")
[[ "$sample" == ROMEO:* ]] || fail "sample: $sample"
echo "ok: tokenizer, shards, 30 steps (loss $first -> $last), sample: $sample"

expect_error "vocab_size.*tok tokenizer needs a vocabulary of at least 4096, found 264" \
  "$K3LAB" train "${RUN[@]}" --set model.config="$ROOT/configs/k3-micro.json" --set run.dir=runs/small
