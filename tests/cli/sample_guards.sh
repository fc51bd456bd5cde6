#!/usr/bin/env bash
# Sampling respects the model: NaN, infinite or out-of-range sampling arguments are refused with
# one line naming the option; a prompt (plus max tokens) longer than the model's context is
# refused at once, or with --truncate-prompt cut to its last tokens; a [sample] section that
# cannot fit is refused before training starts.
source "$(dirname "$0")/common.sh"
# The tiny model with a context of 64 positions.
sed 's/"max_position_embeddings": 1024/"max_position_embeddings": 64/' configs/dense-tiny.json > "$WORK/short.json"
grep -q '"max_position_embeddings": 64' "$WORK/short.json" || fail "could not shorten the context"
short=(--set model.config="$WORK/short.json")
"$K3LAB" train "${TINY[@]}" "${short[@]}" --set train.steps=2 --set run.dir="$WORK/run"
sample=("$K3LAB" sample --checkpoint "$WORK/run")

for bad in nan inf -inf -0.5; do expect_error "field temperature: .*got $bad" "${sample[@]}" --temperature=$bad; done
for bad in nan inf 0 -0.1 1.5; do expect_error "field top_p: .*got $bad" "${sample[@]}" --top-p=$bad; done
expect_error "field top_k: .*got -1" "${sample[@]}" --top-k=-1
for bad in 0 -5 64 1000000000000; do
  expect_error "field max_tokens: expected from 1 to 63 .*got $bad" "${sample[@]}" --max-tokens=$bad
done

long=$(printf 'a%.0s' $(seq 640))  # ten times the context
started=$(date +%s%N)
expect_error "field prompt: a prompt of 640 tokens plus max_tokens 8 exceeds the model's context of 64 tokens.*--truncate-prompt" \
  "${sample[@]}" --prompt "$long" --max-tokens 8
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
[ "$elapsed_ms" -lt 10000 ] || fail "refusing the long prompt took $elapsed_ms ms"
out=$("${sample[@]}" --prompt "$long" --max-tokens 8 --truncate-prompt 2> "$WORK/stderr")
grep -q "prompt of 640 tokens was truncated to its last 56" "$WORK/stderr" ||
  fail "no truncation note: $(cat "$WORK/stderr")"
[[ $out == "$long"* ]] || fail "the sample does not continue the prompt: $out"
# An empty prompt is one token: with 63 new ones the context is full, and nothing is truncated.
"${sample[@]}" --max-tokens 63 > /dev/null 2> "$WORK/stderr" ||
  fail "a sample filling the context exactly fails: $(cat "$WORK/stderr")"
[ ! -s "$WORK/stderr" ] || fail "a sample that fits the context was noted: $(cat "$WORK/stderr")"

# [sample] in a run config: checked against the model before any step (two steps at most, should
# the check be missing).
short+=(--set train.steps=2)
expect_error "field sample.max_tokens: expected from 1 to 63" \
  "$K3LAB" train "${TINY[@]}" "${short[@]}" --set sample.max_tokens=100 --set run.dir="$WORK/r1"
expect_error "field sample.prompt: a prompt of 640 tokens plus max_tokens 1 exceeds" \
  "$K3LAB" train "${TINY[@]}" "${short[@]}" --set sample.prompt="$long" --set run.dir="$WORK/r2"
[ ! -e "$WORK/r2/metrics.jsonl" ] || fail "the run started before its [sample] section was refused"
expect_error "field sample.temperature: .*expected a finite number" "$K3LAB" train "${TINY[@]}" --set sample.temperature=nan
expect_error "field sample.top_p: .*expected a value in \(0, 1\]" "$K3LAB" train "${TINY[@]}" --set sample.top_p=0
echo "ok: sample guards"
