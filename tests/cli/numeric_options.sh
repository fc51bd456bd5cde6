#!/usr/bin/env bash
# Numbers on the command line of plan, fit, sweep and sandbox: text that is no number of the
# option's type ("nan", "inf", "-5" for a count, "2^40", past 64 bits) and numbers outside the
# option's bounds are refused in one line naming the option and the bounds, before anything runs.
source "$(dirname "$0")/common.sh"
PLAN=("$K3LAB" plan --model configs/k3.json)

expect_error "^k3lab: error: --layout: dp='4294967296' is not a whole number in \[1, 1048576\]$" \
  "${PLAN[@]}" --layout dp=4294967296,tp=4294967296
expect_error "--layout: dp=1024,tp=1024,pp=2,.* takes more than 1048576 GPUs" \
  "${PLAN[@]}" --layout dp=1024,tp=1024,pp=2
expect_error "--layout: dp is given twice" "${PLAN[@]}" --layout dp=8,dp=8
expect_error "--layout ',,,': an empty part" "${PLAN[@]}" --layout ,,,
expect_error "--gemm-ceiling 0: must be in \(0, 1\]" "${PLAN[@]}" --layout dp=8 --gemm-ceiling 0
expect_error "--gemm-ceiling 'nan' is not a finite number" "${PLAN[@]}" --layout dp=8 --gemm-ceiling nan
expect_error "--seq 1099511627776: must be in \[1, 16777216\] tokens" \
  "${PLAN[@]}" --layout dp=8 --seq 1099511627776
expect_error "--seq '2\^40' is not a whole number" "${PLAN[@]}" --layout dp=8 --seq '2^40'
expect_error "--micro-batch '99999999999999999999' is not a whole number" \
  "${PLAN[@]}" --layout dp=8 --micro-batch 99999999999999999999
expect_error "--top '-1' is not a whole number in \[1, 1000\]" "${PLAN[@]}" --search --top -1
expect_error "--gpus 2000000: must be in \[0, 1048576\]" "${PLAN[@]}" --search --gpus 2000000
expect_error "--gemm-ceiling 'inf' is not a finite number" "${PLAN[@]}" --search --gpus 64 --gemm-ceiling inf

FIT=("$K3LAB" fit "$WORK/runs.csv" --params n --tokens d --loss l)
printf 'n,d,l\n1e6,1e9,3.1\n' > "$WORK/runs.csv"
expect_error "--bootstrap -5: must be in \[0, 1000000\]" "${FIT[@]}" --bootstrap -5
expect_error "--huber-delta 'nan' is not a finite number > 0" "${FIT[@]}" --huber-delta nan
expect_error "--budgets 'inf' is not a finite number > 0" "${FIT[@]}" --budgets 1e20,inf
expect_error "--seed '-1' is not a whole number" "${FIT[@]}" --seed -1

expect_error "--parallel -2: must be in \[0, 1024\]" "$K3LAB" sweep "$WORK/none.toml" --parallel -2
expect_error "--resamples '1e3' is not a whole number" "$K3LAB" sweep "$WORK/none.toml" --resamples 1e3

for t in inf nan -1 0 1e300; do
  expect_error "--timeout .*$t.*(not a finite number|must be) in \[0.001, 604800\]" \
    "$K3LAB" sandbox run --timeout "$t" host -- true
done
expect_error "--memory 1e30: must be in \[16, 16777216\]" "$K3LAB" sandbox run --memory 1e30 host -- true
expect_error "--port 70000: must be in \[0, 65535\]" "$K3LAB" sandbox serve --port 70000
expect_error "--warm '-1' is not a whole number in \[0, 256\]" "$K3LAB" sandbox serve --warm -1
