#!/usr/bin/env bash
# Activations stored in FP8 over a whole run: 100 steps of k3-micro with activation.policy = fp8
# end where keep ends, on the same batches, and hold fewer bytes.
#
# What is compared, and why. One step's training loss is one batch of 4 × 64 tokens: it moves by
# ~6% from step to step, and two runs that differ only in rounding (fp8 or not, another thread
# count, another instruction set) draw apart along the way, so one step's loss passes or fails by
# the machine. The validation loss after the last step, on 32 fixed batches (8,192 tokens), is
# what is compared.
#
# Its noise, measured (val_loss at step 100, 1 thread; fp8 against keep, relative):
#   model.seed 1234 (the default)      keep 1.31655  fp8 1.31803  +0.11%
#   model.seed 1234, oneDNN AVX2       keep 1.31726  fp8 1.31648  -0.06%
#   model.seed 1                       keep 1.33866  fp8 1.33485  -0.28%
#   model.seed 2                       keep 1.32856  fp8 1.32731  -0.09%
#   model.seed 3                       keep 1.34082  fp8 1.34375  +0.22%
# The difference has mean -0.02% and standard deviation 0.19%: fp8 costs nothing measurable here
# and the rest is rounding carried through the run. The tolerance is 1%, about 5 standard
# deviations. (The run was 200 steps until the noise and the catch below were measured at 100:
# at 200 the noise was the same, 0.24%, and the catch smaller.)
#
# The test runs the 1-thread configuration. What it catches: a block scale of amax/896 instead of
# amax/448 (the top half of every block clipped) ends at +1.66% (+1.46% with oneDNN held to
# AVX2; +1.54% after 200 steps). A codec that keeps 2 mantissa bits instead of 3 ended at +0.31%
# after 200 steps, inside the noise: no loss over a run this size can see it; the codec's own
# tests do (Fp8E4M3.*, and the gradient of one step against keep's in
# ActivationPolicies.LossyStorageStaysWithinItsTolerance).
source "$(dirname "$0")/common.sh"
# One thread each, the two runs side by side: two-threaded runs beside other work lose most of
# their time waiting for each other's threads.
MICRO=("${TINY[@]}" --set model.config=configs/k3-micro.json --set data.seq_len=64
       --set train.steps=100 --set checkpoint.every=0 --set eval.every=100 --set eval.batches=32
       --set train.threads=1)

"$K3LAB" train "${MICRO[@]}" --set run.dir="$WORK/keep" > /dev/null &
keep=$!
"$K3LAB" train "${MICRO[@]}" --set activation.policy=fp8 --set run.dir="$WORK/fp8" > /dev/null
wait "$keep" || fail "the keep run failed"
vk=$(field "$WORK/keep" 100 val_loss) vf=$(field "$WORK/fp8" 100 val_loss)
within "$vk" "$vf" 0.01 || fail "fp8's validation loss $vf is not within 1% of keep's $vk"
# Keep leaves its segments in the arena, fp8 stores them in the pool: the peaks of both together.
k=$(field "$WORK/keep" 100 activation.peak_bytes) f=$(field "$WORK/fp8" 100 activation.peak_bytes)
[ "$f" -lt "$k" ] || fail "fp8 peaked at $f bytes, keep at $k"
echo "ok: fp8's validation loss $vf within 1% of keep's $vk; activation peak $f bytes against $k"
