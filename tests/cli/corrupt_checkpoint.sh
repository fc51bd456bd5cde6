#!/usr/bin/env bash
# A truncated or bit-flipped checkpoint is refused with one clear line; the previous one still loads.
source "$(dirname "$0")/common.sh"
"$K3LAB" train "${TINY[@]}" --set train.steps=8 --set checkpoint.every=4 --set checkpoint.keep_last=2 --set run.dir="$WORK/run"
new="$WORK/run/checkpoints/step_00000008"
old="$WORK/run/checkpoints/step_00000004"
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

# Corrupt the newest in place: resuming refuses it, and the previous checkpoint still loads.
truncate -s -7 "$new/optimizer.safetensors"
expect_error "optimizer.safetensors" "$K3LAB" train --config /dev/null --set run.dir="$WORK/run" --resume
"$K3LAB" eval --checkpoint "$old" --batches 1
