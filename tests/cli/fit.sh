#!/usr/bin/env bash
# `k3lab fit`: the full Chinchilla grid on synthetic runs (parameters recovered, JSON keys, SVG
# written, the same result on 1 and 2 threads), the compute form, fixed terms, and one-line errors.
source "$(dirname "$0")/common.sh"
CSV="$WORK/runs.csv"
# 60 runs of Chinchilla's law (E 1.69, A 406.4, B 410.7, alpha 0.34, beta 0.28) on a 6 x 10 grid
# of N in [1e7, 1e10] and D in [1e8, 1e12], without noise.
awk 'BEGIN { print "name,N,D,loss"; for (i = 0; i < 6; i++) for (j = 0; j < 10; j++) {
  n = 10 ^ (7 + 3 * i / 5); d = 10 ^ (8 + 4 * j / 9)
  printf "run%d_%d,%.17g,%.17g,%.17g\n", i, j, n, d, 1.69 + 406.4 / n ^ 0.34 + 410.7 / d ^ 0.28 } }' > "$CSV"
FIT=("$K3LAB" fit "$CSV" --params N --tokens D --loss loss)

json=$(K3_THREADS=2 "${FIT[@]}" --json --budgets 1e21,1e23 --svg "$WORK/fit.svg")
check() {  # PYTHON_EXPRESSION over the JSON object j
  /usr/bin/python3 -c "import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if ($1) else 1)" "$json" \
    || fail "not ($1): $json"
}
check "all(k in j for k in ('E', 'A', 'B', 'alpha', 'beta', 'objective', 'starts', 'seconds'))"
check "j['starts'] == 4500 and j['points'] == 60"
check "abs(j['E'] - 1.69) < 1e-3 and abs(j['alpha'] - 0.34) < 1e-3 and abs(j['beta'] - 0.28) < 1e-3"
check "abs(j['A'] / 406.4 - 1) < 1e-2 and abs(j['B'] / 410.7 - 1) < 1e-2"
check "len(j['compute_optimal']) == 2 and abs(6 * j['compute_optimal'][0]['params'] * j['compute_optimal'][0]['tokens'] / 1e21 - 1) < 1e-9"
grep -q "iso-loss contours" "$WORK/fit.svg" || fail "no contour panel in fit.svg"
grep -q "loss against compute" "$WORK/fit.svg" || fail "no compute panel in fit.svg"
one=$(K3_THREADS=1 "${FIT[@]}" --json | sed 's/"seconds":[^,}]*//')
[ "$one" = "$(sed 's/"seconds":[^,}]*//' <<< "$json" | sed 's/"compute_optimal":\[[^]]*\]/"compute_optimal":[]/')" ] \
  || fail "1 and 2 threads differ: $one vs $json"
echo "ok: full grid, json, svg, thread count"

text=$("${FIT[@]}" --bootstrap 10 --budgets 1e21 --fix alpha=0.34)
grep -Eq "^  alpha = 0\.34 +\(fixed\)" <<< "$text" || fail "alpha not shown fixed: $text"
grep -Eq "^  beta  = 0\.28.*95% \[" <<< "$text" || fail "no interval for beta: $text"
grep -Eq "best of 900 starts" <<< "$text" || fail "a fixed alpha should leave 900 starts: $text"
grep -Eq "^ +1e\+21 " <<< "$text" || fail "no compute-optimal row: $text"
e=$("${FIT[@]}" --fix E=1.69 --json)
/usr/bin/python3 -c "import json, sys; j = json.loads(sys.argv[1]); assert abs(j['E'] - 1.69) < 1e-12 and j['fixed'] == ['E'] and abs(j['alpha'] - 0.34) < 1e-3" "$e" \
  || fail "--fix E=1.69 (natural units): $e"
c=$("${FIT[@]}" --form c --json)
/usr/bin/python3 -c "import json, sys; j = json.loads(sys.argv[1]); assert j['form'] == 'c' and 'B' not in j and j['starts'] == 150" "$c" \
  || fail "form c: $c"
echo "ok: bootstrap, fixed term, form c"

# Outliers: the runs with +-0.5% of deterministic noise, and line 20's loss 30% too high.
awk -F, 'NR == 1 { print; next } { k++; f = (NR == 20 ? 1.3 : 1 + 0.005 * sin(17 * k))
  printf "%s,%s,%s,%.17g\n", $1, $2, $3, $4 * f }' "$CSV" > "$WORK/outlier.csv"
o=$("$K3LAB" fit "$WORK/outlier.csv" --params N --tokens D --loss loss --drop-outliers 5 --json)
/usr/bin/python3 -c "import json, sys; j = json.loads(sys.argv[1]); assert j['dropped_lines'] == [20] and j['points'] == 59 and abs(j['alpha'] - 0.34) < 0.02" "$o" \
  || fail "--drop-outliers 5 should drop line 20 alone: $o"
text=$("$K3LAB" fit "$WORK/outlier.csv" --params N --tokens D --loss loss --drop-outliers 5)
grep -q "dropped 1 outliers (residual beyond 5 robust sd), lines 20" <<< "$text" || fail "no dropped line: $text"
echo "ok: outliers"

# Weak identification: D spans 12% only, so B and beta are not pinned down while A and alpha are.
awk 'BEGIN { print "N,D,loss"; for (i = 0; i < 6; i++) for (j = 0; j < 10; j++) {
  n = 10 ^ (7 + 3 * i / 5); d = 10 ^ (10 + 0.05 * j / 9); k++
  printf "%.17g,%.17g,%.17g\n", n, d, (1.69 + 406.4 / n ^ 0.34 + 410.7 / d ^ 0.28) * (1 + 0.005 * sin(17 * k)) } }' \
  > "$WORK/narrow.csv"
w=$("$K3LAB" fit "$WORK/narrow.csv" --params N --tokens D --loss loss --bootstrap 30 --json)
/usr/bin/python3 -c "import json, sys; j = json.loads(sys.argv[1]); assert 'B' in j['weakly_identified'] and 'beta' in j['weakly_identified'] and 'alpha' not in j['weakly_identified'] and 'A' not in j['weakly_identified']" "$w" \
  || fail "B and beta should be weakly identified, A and alpha not: $w"
text=$("$K3LAB" fit "$WORK/narrow.csv" --params N --tokens D --loss loss --bootstrap 30)
grep -Eq "^  beta .*weakly identified: the interval spans [0-9.]+ orders of magnitude" <<< "$text" \
  || fail "beta not flagged: $text"
echo "ok: weak identification"

expect_error "file $CSV, field tokens: no such column" "$K3LAB" fit "$CSV" --params N --tokens tokens --loss loss
printf 'N,D,loss\n1e8,2e9,3.1\n1e9,0,2.9\n' > "$WORK/zero.csv"
expect_error "file $WORK/zero.csv, field D: line 3: '0' is not a finite positive number" \
  "$K3LAB" fit "$WORK/zero.csv" --params N --tokens D --loss loss
printf 'N,D,loss\n1e8,2e9,nan\n' > "$WORK/nan.csv"
expect_error "file $WORK/nan.csv, field loss: line 2: 'nan'" "$K3LAB" fit "$WORK/nan.csv" --params N --tokens D --loss loss
head -n 4 "$CSV" > "$WORK/short.csv"
expect_error "file $WORK/short.csv: 3 rows selected, the fit needs at least 6" \
  "$K3LAB" fit "$WORK/short.csv" --params N --tokens D --loss loss
expect_error "unknown term 'gamma'" "${FIT[@]}" --fix gamma=1
expect_error "unknown variable 'x'" "${FIT[@]}" --grid x=1
expect_error "$WORK/none.csv" "$K3LAB" fit "$WORK/none.csv" --params N --tokens D --loss loss
echo "ok: fit"
