#!/usr/bin/env bash
# k3lab fit against the same fit with scipy's L-BFGS-B (bench/fit_vs_scipy.py), side by side in one
# run: same points, same 4,500 starts, same objective. k3lab runs on 2 threads, then on 1; prints
# each side's seconds, objective and parameters.
#   bench/fit_vs_scipy.sh [K3LAB] [PORIAN_CSV]
# K3LAB defaults to build/release/k3lab; PORIAN_CSV to the isoFLOP table of Porian et al. (2024),
# whose rw / tuned / short warmup / constant LR / standard count / val rows (121) are fitted.
set -euo pipefail
cd "$(dirname "$0")/.."
K3LAB=${1:-build/release/k3lab}
PORIAN=${2:-../shared/data/scaling/porian2024_isoflop.csv}
PY=/usr/bin/python3  # Debian's python with scipy (a pyenv python3 may lack it)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 300 synthetic runs from Chinchilla's law (E 1.69, A 406.4, B 410.7, alpha 0.34, beta 0.28) with
# 1% multiplicative noise, N from 1e7 to 1e10, D from 1e8 to 1e12.
"$PY" - "$WORK/synthetic.csv" <<'PYEOF'
import sys, numpy as np
rng = np.random.default_rng(7)
n = 10 ** rng.uniform(7, 10, 300)
d = 10 ** rng.uniform(8, 12, 300)
loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28) * np.exp(rng.normal(0, 0.01, 300))
with open(sys.argv[1], "w") as f:
    f.write("N,D,loss\n")
    for row in zip(n, d, loss):
        f.write("%.17g,%.17g,%.17g\n" % row)
PYEOF

fit_both() {  # NAME CSV ARGS...
  local name=$1 csv=$2; shift 2
  local k3 k3_one sp
  k3=$(nice env K3_THREADS=2 "$K3LAB" fit "$csv" "$@" --json)
  k3_one=$(nice env K3_THREADS=1 "$K3LAB" fit "$csv" "$@" --json)
  sp=$(nice "$PY" bench/fit_vs_scipy.py "$csv" "$@")
  "$PY" - "$name" "$k3" "$k3_one" "$sp" <<'PYEOF'
import json, sys
name = sys.argv[1]
k3, k3_one, sp = (json.loads(a) for a in sys.argv[2:])
print(f"\n{name}: {k3['points']} points, {k3['starts']} starts")
print(f"{'':16}{'seconds':>9}{'objective':>20}{'E':>10}{'A':>11}{'B':>11}{'alpha':>9}{'beta':>9}")
for side, r in (("k3lab 2 threads", k3), ("k3lab 1 thread", k3_one), ("scipy L-BFGS-B", sp)):
    print(f"{side:16}{r['seconds']:9.2f}{r['objective']:20.13g}{r['E']:10.4f}{r['A']:11.4g}"
          f"{r['B']:11.4g}{r['alpha']:9.4f}{r['beta']:9.4f}")
rel = (k3['objective'] - sp['objective']) / sp['objective']
print(f"speed-up {sp['seconds'] / k3['seconds']:.1f}x on 2 threads, "
      f"{sp['seconds'] / k3_one['seconds']:.1f}x on 1; objective k3lab - scipy: {rel:+.2e} relative")
PYEOF
}

echo "scipy runs on one core (numpy on 300 points does not thread); load: $(cut -d' ' -f1-3 /proc/loadavg)"
fit_both synthetic "$WORK/synthetic.csv" --params N --tokens D --loss loss
if [ -f "$PORIAN" ]; then
  fit_both "porian2024 rw tuned" "$PORIAN" --params N --tokens D_tokens --loss loss \
    --where source_file=summary_df --where dataset=rw --where hparams=tuned --where warmup=short \
    --where decay=const --where param_count=standard --where loss_split=val
else
  echo "(no $PORIAN: the published isoFLOP rows are skipped)"
fi
