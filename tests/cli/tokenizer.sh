#!/usr/bin/env bash
# `k3lab tokenizer`: train a BPE tokenizer on tinyshakespeare (skipped without ../shared), encode |
# decode round-trips the file, and bad tokenizers are refused in one line.
source "$(dirname "$0")/common.sh"

TEXT=$ROOT/../shared/data/tinyshakespeare.txt
if [ ! -f "$TEXT" ]; then
  echo "skipped: needs ../shared/data/tinyshakespeare.txt, absent here"
  exit 77
fi

out=$("$K3LAB" tokenizer train --input "$TEXT" --vocab-size 32768 --out "$WORK/tok")
echo "$out"
# tinyshakespeare holds no pair of tokens twice long before 32K ids.
grep -q "^stopped early at [0-9]* of the 32768 ids asked for" <<< "$out" || fail "no early stop: $out"
ids=$(sed -n 's/.* merges, \([0-9]*\) ids in .*/\1/p' <<< "$out")
[ "$ids" -gt 10000 ] || fail "only $ids ids learned"
[ "$(grep -c . "$WORK/tok/tiktoken.model")" -eq $((ids - 3)) ] || fail "tiktoken.model: not $((ids - 3)) tokens"
grep -q '"bos_token": "\[BOS\]"' "$WORK/tok/tokenizer_config.json" || fail "no bos_token in the config"

"$K3LAB" tokenizer encode --tokenizer "$WORK/tok" < "$TEXT" > "$WORK/ids.txt"
[ "$(wc -l < "$WORK/ids.txt")" -eq 1 ] || fail "encode printed more than one line"
tokens=$(wc -w < "$WORK/ids.txt")
bytes=$(wc -c < "$TEXT")
[ "$tokens" -lt $((bytes / 3)) ] || fail "$tokens tokens for $bytes bytes: the merges do not apply"
"$K3LAB" tokenizer decode --tokenizer "$WORK/tok" < "$WORK/ids.txt" > "$WORK/decoded.txt"
cmp "$TEXT" "$WORK/decoded.txt" || fail "decode(encode(text)) differs from the text"
echo "ok: $bytes bytes -> $tokens tokens -> the same bytes"

# Any bytes, invalid UTF-8 included, round-trip; the byte tokenizer works the same way.
printf 'caf\xc3\xa9 \xff\xfe \xe4\xb8 end\n' > "$WORK/odd.txt"
"$K3LAB" tokenizer encode --tokenizer "$WORK/tok" < "$WORK/odd.txt" |
  "$K3LAB" tokenizer decode --tokenizer "$WORK/tok" > "$WORK/odd.out"
cmp "$WORK/odd.txt" "$WORK/odd.out" || fail "invalid UTF-8 does not round-trip"
[ "$(printf 'hi' | "$K3LAB" tokenizer encode --tokenizer byte)" = "104 105" ] || fail "byte encode"

expect_error "unknown tokenizer '$WORK/none': neither \"byte\" nor a directory" \
  "$K3LAB" tokenizer encode --tokenizer "$WORK/none"
mkdir -p "$WORK/bad"
cp "$WORK/tok/tokenizer_config.json" "$WORK/bad/"
sed '5s/ .*/ x/' "$WORK/tok/tiktoken.model" > "$WORK/bad/tiktoken.model"
expect_error "file $WORK/bad/tiktoken.model: line 5: rank 'x' is not a non-negative integer" \
  "$K3LAB" tokenizer encode --tokenizer "$WORK/bad"
expect_error "vocab-size: 100 is too small" \
  "$K3LAB" tokenizer train --input "$TEXT" --vocab-size 100 --out "$WORK/small"
