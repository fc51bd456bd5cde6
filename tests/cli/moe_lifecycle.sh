#!/usr/bin/env bash
# The K3 structure (KDA + MLA, LatentMoE with Quantile Balancing, Attention Residuals) through a
# run's life: the router biases move during training, moe.* metrics are written, and a run killed
# at random moments and resumed ends bit-identical, balancing state included (it lives in
# model.safetensors beside the weights).
source "$(dirname "$0")/common.sh"
NANO=(--set model.config=configs/k3-nano.json --set data.seq_len=32)
kill_and_resume_matches 24 "${NANO[@]}"

run="$WORK/straight"
grep -q '"moe.maxvio"' "$run/metrics.jsonl" || fail "no moe.maxvio in metrics.jsonl"
grep -q '"moe.maxvio.1"' "$run/metrics.jsonl" || fail "no per-layer moe.maxvio.1 in metrics.jsonl"
[ -s "$run/expert_load.jsonl" ] || fail "no expert_load.jsonl"
# The router biases (Quantile Balancing) and the balancing ranges differ between step 20 and 24.
/usr/bin/python3 - "$run/checkpoints/step_00000020/model.safetensors" "$run/checkpoints/step_00000024/model.safetensors" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np
import st
a, b = st.load(sys.argv[1]), st.load(sys.argv[2])
biases = [n for n in a if n.endswith("e_score_correction_bias")]
assert biases, "no router bias in the checkpoint: " + ", ".join(sorted(a)[:8])
moved = [n for n in biases if not np.array_equal(a[n], b[n])]
assert len(moved) == len(biases), f"router biases that never moved: {sorted(set(biases) - set(moved))}"
print(f"ok: {len(moved)} router biases moved between steps 20 and 24")
PY
