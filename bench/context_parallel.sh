#!/usr/bin/env bash
# Context parallelism on k3-micro-long (k3-micro with a 64K context), one sequence a step:
#  1. Bytes per step over the cp group, measured (metrics.jsonl `comm.cp.bytes`, rank 0) beside
#     the analytic count (a mismatch fails the bench), at cp2 and cp4 for T = 1K, 4K and 16K:
#     the gradient sum and KCP's all-gathers and conv halos do not depend on T, the ring grows
#     with it.
#  2. T = LONG (default 65536): STEPS steps in one process and over cp4 (4 ranks sharing the
#     cores), with each rank's peak resident memory, the last step's time, and where rank 0's time
#     goes (--profile: the KDA and MLA layers beside KCP's all-gathers, the halos and the ring's
#     waits, which are time blocked, mostly waiting for the slowest rank).
# Usage: bench/context_parallel.sh [BUILD_DIR] [LONG] [STEPS]
set -euo pipefail
build=${1:-build/release}
long=${2:-65536}
steps=${3:-2}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 K3_THREADS=1
model=configs/k3-micro-long.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
params=$("$build/k3lab" model inspect "$model" | awk '$1 == "total" {print $2; exit}')

train() {  # RUN_DIR T CP [extra args]: STEPS steps (2 for the byte counts) of one sequence
  local dir=$1 T=$2 cp=$3; shift 3
  local launch=()
  [ "$cp" -gt 1 ] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$cp")
  "${launch[@]}" "$build/k3lab" train --quiet --set model.config="$model" \
    --set data.builtin_tokens=$((4 * T + 200000)) --set data.seq_len="$T" --set train.batch_size=1 \
    --set train.warmup_steps=1 --set eval.every=0 --set sample.max_tokens=1 \
    --set checkpoint.every=0 --set parallel.cp="$cp" --set run.dir="$dir" "$@"
}

echo "== bytes per step over cp (rank 0), measured and analytic"
printf '%4s %7s %14s %14s %12s %12s %12s %12s\n' cp T measured analytic gradients kcp halos ring
for cp in 2 4; do
  for T in 1024 4096 16384; do
    train "$work/b$cp-$T" "$T" "$cp" --set train.steps=2 > /dev/null
    python3 - "$model" "$params" "$cp" "$T" "$work/b$cp-$T/metrics.jsonl" <<'PY'
import json, sys
config, params, P, T, metrics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
m = json.load(open(config))
la = m["linear_attn_config"]
H, K, Kc = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
V = K
kda, mla = len(la["kda_layers"]), len(la["full_attn_layers"])
B = 1
# Floats handed to operations by rank 0 (dist/comm.h), per step of one micro-batch:
grads = params                                             # every gradient summed over cp
kcp = kda * (2 * P * B * H * K * (V + K) + 2 * P * B * H * K * V)  # (M, S~) pairs; dS_in
halos = kda * 4 * 3 * B * (Kc - 1) * H * K                 # q, k, v windows, forward and backward
n = B * (T // P) * (m["kv_lora_rank"] + m["qk_rope_head_dim"])  # a rank's [c_kv | k_r]
ring = mla * ((P - 1) * 2 * n + (P - 1) * 2 * n + P * 2 * n)    # forward; backward latent + grad
analytic = 4 * (grads + kcp + halos + ring)
measured = [json.loads(l) for l in open(metrics)][-1]["comm.cp.bytes"]
print(f"{P:4d} {T:7d} {measured:14d} {analytic:14d} {4*grads:12d} {4*kcp:12d} {4*halos:12d} {4*ring:12d}"
      + ("" if measured == analytic else "  MISMATCH"))
sys.exit(0 if measured == analytic else 1)
PY
  done
done

echo
echo "== T = $long, $steps steps: one process, then cp4 (oversubscribed)"
for cp in 1 4; do
  out=$(train "$work/long$cp" "$long" "$cp" --set train.steps="$steps" --profile)
  python3 - "$cp" "$work/long$cp/metrics.jsonl" <<'PY'
import json, sys
cp, rec = int(sys.argv[1]), [json.loads(l) for l in open(sys.argv[2])][-1]
ranks = rec.get("peak_memory_mib.ranks", [rec["peak_memory_mib"]])
print(f"cp{cp}: last step {rec['step_seconds']:.1f} s, loss {rec['loss']:.4f}, "
      f"peak memory per rank (MiB): " + ", ".join(f"{x:.0f}" for x in ranks)
      + (f"; cp bytes/step {rec['comm.cp.bytes']}" if cp > 1 else ""))
PY
  sed -n '/^profile/,$p' <<< "$out"
done
