#!/usr/bin/env bash
# `k3lab bench decode` reports prefill and decode tokens/s per batch size, for a model JSON (K3
# structure: KDA, MLA, MoE) and for a checkpoint, in fp32 (a model's default) or bf16 (--precision);
# `k3lab sample --timing` prints both rates. Bad arguments are refused in one line.
source "$(dirname "$0")/common.sh"
for precision in fp32 bf16; do
out=$("$K3LAB" bench decode --model configs/k3-nano.json --batch 1,3 --prompt 9 --tokens 4 \
        --repeats 1 --precision $precision --json)
python3 - "$out" $precision <<'PY' || fail "bench decode --precision $precision --json: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["precision"] == sys.argv[2], r
assert [x["batch"] for x in r["results"]] == [1, 3], r
for x in r["results"]:
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "ms_per_step"):
        assert x[k]["min"] <= x[k]["median"] <= x[k]["max"] and x[k]["median"] > 0, (k, x)
PY
done

"$K3LAB" train "${TINY[@]}" --set train.steps=2 --set run.dir="$WORK/run"
table=$("$K3LAB" bench decode --checkpoint "$WORK/run" --batch 2 --prompt 5 --tokens 3 --repeats 1)
grep -Eq '^2 +[0-9]' <<< "$table" || fail "no row for batch 2: $table"
"$K3LAB" sample --checkpoint "$WORK/run" --prompt "The " --max-tokens 5 --timing 2> "$WORK/stderr" > /dev/null
grep -Eq '^prefill: [0-9]+ tokens in .* tokens/s; decode: [0-9]+ tokens in .* tokens/s$' "$WORK/stderr" ||
  fail "no timing line: $(cat "$WORK/stderr")"

expect_error "give either --model CONFIG or --checkpoint DIR" "$K3LAB" bench decode
expect_error "give either --model CONFIG or --checkpoint DIR" \
  "$K3LAB" bench decode --model configs/k3-nano.json --checkpoint "$WORK/run"
expect_error "field tokens: expected at least 2" "$K3LAB" bench decode --model configs/k3-nano.json --tokens 1
expect_error "field batch: .*got 0" "$K3LAB" bench decode --model configs/k3-nano.json --batch 0
expect_error "field --precision: expected fp32 or bf16, got \"fp16\"" \
  "$K3LAB" bench decode --model configs/k3-nano.json --precision fp16
expect_error "field --precision: expected fp32 or bf16, got \"half\"" \
  "$K3LAB" sample --checkpoint "$WORK/run" --precision half
expect_error "field prompt: a prompt of 5000 tokens" "$K3LAB" bench decode --model configs/k3-nano.json --prompt 5000
