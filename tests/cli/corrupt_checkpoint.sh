#!/usr/bin/env bash
# A truncated or bit-flipped checkpoint is refused with one clear line when named; a resume skips a
# corrupt newest checkpoint (saying so, setting it aside) and continues from the newest valid one;
# leftovers of failed saves are removed; a finished run says it is finished; an edited manifest is
# refused naming the field.
source "$(dirname "$0")/common.sh"
run="$WORK/run"
"$K3LAB" train "${TINY[@]}" --set train.steps=8 --set checkpoint.every=4 --set checkpoint.keep_last=2 --set run.dir="$run"
new="$run/checkpoints/step_00000008"
old="$run/checkpoints/step_00000004"
"$K3LAB" eval --checkpoint "$new" --batches 1 >/dev/null

cp -r "$new" "$WORK/flipped"
python3 - "$WORK/flipped/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x10
open(p, "wb").write(bytes(b))
PY
expect_error "model.safetensors.*(checksum|corrupt)" "$K3LAB" eval --checkpoint "$WORK/flipped"
cp -r "$new" "$WORK/truncated"
truncate -s -100 "$WORK/truncated/model.safetensors"
expect_error "model.safetensors" "$K3LAB" eval --checkpoint "$WORK/truncated"

# Edited manifests: the field is named.
cp -r "$new" "$WORK/step_00000008"
sed -i 's/"step": 8/"step": 80/' "$WORK/step_00000008/manifest.json"
expect_error "manifest.json, field step: expected 8" "$K3LAB" eval --checkpoint "$WORK/step_00000008"
cp -r "$run" "$WORK/no_cursor"
rm -r "$WORK/no_cursor/checkpoints/step_00000004"
sed -i '/"data_cursor"/d' "$WORK/no_cursor/checkpoints/step_00000008/manifest.json"
expect_error "no usable checkpoint.*field data_cursor: missing from the manifest" \
  "$K3LAB" train --quiet --resume "$WORK/no_cursor" --set train.steps=12

# Corrupt the newest in place and leave a failed save behind: the resume says what it skipped,
# sets it aside, and continues from the previous checkpoint.
truncate -s -7 "$new/optimizer.safetensors"
mkdir -p "$run/checkpoints/.tmp.step_00000009.4242" && echo partial > "$run/checkpoints/.tmp.step_00000009.4242/model.safetensors"
err=$("$K3LAB" train --quiet --resume "$run" --set train.steps=12 2>&1 >/dev/null)
grep -q "skipped checkpoint $new: .*optimizer.safetensors" <<< "$err" || fail "the skip is not reported: $err"
grep -q "removed 1 unfinished checkpoint save" <<< "$err" || fail "the leftover save is not reported: $err"
[ ! -e "$run/checkpoints/.tmp.step_00000009.4242" ] || fail "the leftover save is still there"
[ -d "$run/checkpoints/unusable.step_00000008" ] || fail "the corrupt checkpoint was not set aside"
grep -q '"set_aside":\["' "$run/history.jsonl" || fail "history.jsonl does not record the set-aside checkpoint"
[ -f "$run/checkpoints/step_00000012/manifest.json" ] || fail "the resumed run did not reach step 12"
echo "ok: corrupt newest skipped: $err"

# Resuming a finished run says so and changes nothing.
before=$(ls -R "$run" | sha256sum)
out=$("$K3LAB" train --quiet --resume "$run" --set train.steps=12)
grep -q "finished at step 12" <<< "$out" || fail "a finished run is not reported as finished: $out"
! grep -qi "nan" <<< "$out" || fail "the finished run prints nan: $out"
[ "$(ls -R "$run" | sha256sum)" = "$before" ] || fail "resuming a finished run changed the run directory"
echo "ok: $out"
