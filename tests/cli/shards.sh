#!/usr/bin/env bash
# Token shards end to end: `k3lab data prepare` on a small text and a .jsonl (weighted), the same
# shards again from the same inputs, refusals in one line (an existing output, a malformed input
# that leaves no directory behind, a truncated shard, shards of another tokenizer); training on
# the shards in one process and under dp2 to the same losses, a checkpoint resumed in one
# process and under dp2 to the same next loss, and refused on other shards under the same path. Tiny Shakespeare, where present, is prepared too.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)

# About 120 KB of paragraphs (documents separated by blank lines), and a .jsonl of 200 more.
for i in $(seq 1 600); do
  printf 'Paragraph %d tells of the %d mills by the river.\nIt has a second line, number %d.\n\n' \
    "$i" $((i * 7 % 13)) $((i * 31 % 97))
done > "$WORK/text.txt"
for i in $(seq 1 200); do printf '{"text": "Record %d: a short line of json text."}\n' "$i"; done > "$WORK/more.jsonl"

WEIGHTS=(--weights 1 2)
prepare() { "$K3LAB" data prepare --quiet --tokenizer byte --input "$WORK/text.txt" "$WORK/more.jsonl" \
  "${WEIGHTS[@]}" --val-fraction 0.1 --shard-tokens 20000 "$@"; }
prepare --out "$WORK/shards" > "$WORK/prepare.out"
cat "$WORK/prepare.out"
grep -q "text.txt (weight 1): 540 + 60 documents" "$WORK/prepare.out" || fail "text.txt: not 540 + 60 documents"
grep -q "more.jsonl (weight 2): 360 + 40 documents" "$WORK/prepare.out" || fail "more.jsonl: not 2 x (180 + 20) documents"
[ "$(ls "$WORK"/shards/train-*.k3shard | wc -l)" -eq 3 ] || fail "expected 3 train shards of at most 20000 tokens"
prepare --out "$WORK/again" > /dev/null
for f in "$WORK"/shards/*; do cmp "$f" "$WORK/again/$(basename "$f")" || fail "prepare is not deterministic: $f"; done
echo "ok: the same inputs give the same shards"

expect_error "file $WORK/shards: already exists" prepare --out "$WORK/shards"
printf '{"text": "fine"}\n{"text": 3}\n' > "$WORK/bad.jsonl"
expect_error "file $WORK/bad.jsonl: line 2" "$K3LAB" data prepare --tokenizer byte --input "$WORK/bad.jsonl" --out "$WORK/bad"
[ -z "$(ls -A "$WORK" | grep bad[^.])" ] || fail "a failed prepare left $(ls -A "$WORK" | grep bad)"

SHARDS=("${TINY[@]}" --set train.threads=1 --set data.source=shards --set data.path="$WORK/shards"
        --set data.seq_len=16 --set train.steps=6 --set checkpoint.every=3)
"$K3LAB" train "${SHARDS[@]}" --set eval.every=3 --set run.dir="$WORK/one" > /dev/null
grep -q '"val_loss"' "$WORK/one/metrics.jsonl" || fail "no validation loss on the shards"
"${MPI[@]}" -np 2 "$K3LAB" train "${SHARDS[@]}" --set parallel.dp=2 --set run.dir="$WORK/dp2" > /dev/null
losses_match "$WORK/one" "$WORK/dp2" 1 2 3 4 5 6
echo "ok: one process and dp2 train on the same batches"
resume_matches "$WORK/one" one_again 1
resume_matches "$WORK/one" one_as_dp2 2 --set parallel.dp=2
resume_matches "$WORK/dp2" dp2_as_one 1 --set parallel.dp=1

# Shards that another tokenizer made: its fingerprint in the manifest and every header.
other=$(printf 'another tokenizer' | sha256sum | cut -c1-64)
mine=$(grep -o '"fingerprint": "[0-9a-f]*"' "$WORK/shards/manifest.json" | cut -d'"' -f4)
cp -r "$WORK/shards" "$WORK/other"
sed -i "s/$mine/$other/" "$WORK/other/manifest.json"
for f in "$WORK"/other/*.k3shard; do printf '%s' "$other" | dd of="$f" bs=1 seek=32 conv=notrunc status=none; done
expect_error "shards made by the byte tokenizer \(fingerprint $other\), but the run's byte tokenizer has fingerprint $mine" \
  "$K3LAB" train "${SHARDS[@]}" --set data.path="$WORK/other" --set run.dir="$WORK/wrong"

cp -r "$WORK/shards" "$WORK/cut"
truncate -s 5000 "$WORK/cut/train-00001.k3shard"
expect_error "file $WORK/cut/train-00001.k3shard: truncated at byte 5000" \
  "$K3LAB" train "${SHARDS[@]}" --set data.path="$WORK/cut" --set run.dir="$WORK/cut_run"
expect_error "field data.path: data.source = \"shards\" reads" \
  "$K3LAB" train "${TINY[@]}" --set data.source=shards --set run.dir="$WORK/nopath"
expect_error "field data.path: data.path is read only when data.source = \"shards\"" \
  "$K3LAB" train "${TINY[@]}" --set data.path="$WORK/shards" --set run.dir="$WORK/builtin_path"
"$K3LAB" data prepare --quiet --tokenizer byte --input "$WORK/text.txt" --val-fraction 0 --out "$WORK/no_val" > /dev/null
[ -z "$(ls "$WORK"/no_val/validation-* 2>/dev/null)" ] || fail "--val-fraction 0 wrote validation shards"
expect_error "field data.path: the shards' validation split of 0 tokens" \
  "$K3LAB" train "${SHARDS[@]}" --set data.path="$WORK/no_val" --set eval.every=3 --set run.dir="$WORK/no_val_run"

# The data fingerprint (the manifest's SHA-256) notices other shards under the same path, here
# as many tokens of another text.
mv "$WORK/shards" "$WORK/shards_first"
sed -i 's/mills/hills/' "$WORK/text.txt"
prepare --out "$WORK/shards" > /dev/null
cp -r "$WORK/one" "$WORK/changed" && rm -r "$WORK/changed/checkpoints/step_00000006"
expect_error "the data changed since the run started" "$K3LAB" train --quiet --resume "$WORK/changed"

SHAKESPEARE=$ROOT/../shared/data/tinyshakespeare.txt
if [ -f "$SHAKESPEARE" ]; then
  "$K3LAB" data prepare --quiet --tokenizer byte --input "$SHAKESPEARE" --out "$WORK/ts" > "$WORK/ts.out"
  grep -q "6860 + 362 documents, 1051161 + 57010 tokens" "$WORK/ts.out" || fail "tinyshakespeare: $(cat "$WORK/ts.out")"
  echo "ok: tinyshakespeare prepared"
else
  echo "skipped: tinyshakespeare ($SHAKESPEARE absent)"
fi
