#!/usr/bin/env bash
# Long-context tasks: `data longctx` writes them as shards + tasks.jsonl, deterministically from
# the seed, with answer spans that decode to the answers; `eval longctx` scores a checkpoint on
# them (a 4-step model answers nothing) beside the model-free oracle (which answers everything),
# as a table and an SVG heatmap; bad inputs are refused in one line.
source "$(dirname "$0")/common.sh"

# Base text: 400 paragraphs of made-up words, as blank-line separated documents.
awk 'BEGIN { srand(7); for (d = 0; d < 400; d++) { line = "";
  for (w = 0; w < 40 + int(rand() * 40); w++) {
    word = ""; for (c = 0; c < 2 + int(rand() * 6); c++) word = word sprintf("%c", 97 + int(rand() * 26));
    line = line word (rand() < 0.1 ? ".\n" : " ") }
  print line "\n" } }' > "$WORK/base.txt"
"$K3LAB" data prepare --input "$WORK/base.txt" --tokenizer byte --out "$WORK/base" > /dev/null

make_tasks() { "$K3LAB" data longctx --base "$WORK/base" --lengths 768,1K --per-length 6 "$@"; }
make_tasks --out "$WORK/tasks" --seed 1 > "$WORK/made.txt"
grep -q "^12 tasks from" "$WORK/made.txt" || fail "summary: $(cat "$WORK/made.txt")"
make_tasks --out "$WORK/again" --seed 1 > /dev/null
make_tasks --out "$WORK/other" --seed 2 > /dev/null
cmp "$WORK/tasks/tasks.jsonl" "$WORK/again/tasks.jsonl" || fail "the same seed gave other tasks"
cmp "$WORK/tasks/train-00000.k3shard" "$WORK/again/train-00000.k3shard" || fail "other documents"
! cmp -s "$WORK/tasks/train-00000.k3shard" "$WORK/other/train-00000.k3shard" || fail "seed ignored"

# Read the shard file directly (header, uint16 ids, document ends): every document is exactly its
# length, and its answer span decodes to the answer.
/usr/bin/python3 - "$WORK/tasks" <<'PY' || fail "tasks do not match their shard"
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/train-00000.k3shard", "rb").read()
width, n, docs = struct.unpack_from("<IQQ", raw, 12)
assert width == 2, width
ids = struct.unpack_from("<%dH" % n, raw, 4096)
index = 4096 + (n * 2 + 7) // 8 * 8
ends = struct.unpack_from("<%dQ" % docs, raw, index)
tasks = [json.loads(l) for l in open(d + "/tasks.jsonl")]
assert len(tasks) == docs == 12, (len(tasks), docs)
start = 0
for t, end in zip(tasks, ends):
    doc = ids[start:end - 1]  # without its eos
    assert ids[end - 1] == 257
    assert len(doc) == t["length"] == (768 if t["document"] < 6 else 1024), t
    span = bytes(doc[t["answer_offset"]:t["answer_offset"] + t["answer_length"]]).decode()
    assert span == t["answer"], (span, t)
    assert 0 <= t["depth"] < 1
    start = end
print("ok: 12 tasks decode to their answers")
PY

"$K3LAB" train "${TINY[@]}" --set train.threads=1 --set train.steps=4 --set run.dir="$WORK/run" > /dev/null
"$K3LAB" eval longctx --checkpoint "$WORK/run" --tasks "$WORK/tasks" --out "$WORK/heat.svg" \
  > "$WORK/eval.txt"
cat "$WORK/eval.txt"
grep -q "^model (greedy" "$WORK/eval.txt" || fail "no model table"
[ "$(grep -c '^768 \|^1K ' "$WORK/eval.txt")" -eq 6 ] ||
  fail "expected a 768 and a 1K row per table (whole answers, answer tokens, oracle)"
grep -q "^model, answer tokens right" "$WORK/eval.txt" || fail "no answer-token table"
tokens=$(sed -n '/^model, answer tokens right/,/^oracle/p' "$WORK/eval.txt" | grep '^all ' | grep -o '([0-9]*/[0-9]*)$')
answers=$(grep -o '"answer_length":[0-9]*' "$WORK/tasks/tasks.jsonl" | awk -F: '{ n += $2 } END { print n }')
[[ "$tokens" == *"/$answers)" ]] || fail "answer tokens counted: $tokens, the tasks have $answers"
# The oracle's table (after its heading) answers all 12; the model's rows hold 12 tasks too.
[ "$(sed -n '/^oracle/,$p' "$WORK/eval.txt" | grep -c '^all .* 12/12  100%')" -eq 1 ] ||
  fail "the oracle must answer every task"
[ "$(sed -n '/^model/,/^oracle/p' "$WORK/eval.txt" | grep -c '^all .* [0-9]*/12 ')" -eq 1 ] ||
  fail "the model table must count 12 tasks"
/usr/bin/python3 - "$WORK/heat.svg" <<'PY' || fail "bad heatmap"
import sys, xml.dom.minidom
svg = xml.dom.minidom.parse(sys.argv[1])
cells = [t for t in svg.getElementsByTagName("title") if t.parentNode.tagName == "rect"]
assert len(cells) == 10, len(cells)  # 2 lengths x 5 depth bins
labels = [t.firstChild.data for t in svg.getElementsByTagName("text")]
assert "768" in labels and "1K" in labels and "0.8-1" in labels, labels
print("ok: heatmap with", len(cells), "cells")
PY

# Bad inputs: one line each.
expect_error "'4Q' is not a length" "$K3LAB" data longctx --base "$WORK/base" --lengths 1K,4Q --out "$WORK/x1"
expect_error "no-base" "$K3LAB" data longctx --base "$WORK/no-base" --lengths 1K --out "$WORK/x2"
expect_error "/base, field base: the base documents hold [0-9]+ tokens, too few for a task of 1M tokens" \
  "$K3LAB" data longctx --base "$WORK/base" --lengths 1M --per-length 1 --out "$WORK/x3"
expect_error "too short" "$K3LAB" data longctx --base "$WORK/base" --lengths 300 --out "$WORK/x4"
expect_error "tasks" "$K3LAB" data longctx --base "$WORK/base" --lengths 1K --out "$WORK/tasks"
expect_error "no-tasks" "$K3LAB" eval longctx --checkpoint "$WORK/run" --tasks "$WORK/no-tasks"
