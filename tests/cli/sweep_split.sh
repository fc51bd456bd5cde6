#!/usr/bin/env bash
# `k3lab sweep` with parallel and threads left "auto": the sweep probes each split of the cores
# once, says what it chose in one line and records it, and a resumed sweep reuses the record
# without probing; the jobs run with the chosen threads; numbers given for both bypass the probe,
# one given fills the cores with the other; anything else is refused naming the key.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
cores=$(getconf _NPROCESSORS_ONLN)  # as k3lab counts them (OMP_NUM_THREADS=1 changes nproc)
splits=0
for ((t = 1; t <= cores; t++)); do ((cores % t == 0)) && splits=$((splits + 1)); done

sweep_file() {  # OUT [SWEEP KEYS...]
  printf '[sweep]\nout = "%s/%s"\n' "$WORK" "$1"
  shift
  printf '%s\n' "$@"
  cat <<TOML
sizes = [7e3]
tokens_per_param = 0.5
lr = [1e-2, 2e-2]
evals = 1
[set]
data.seq_len = 64
train.batch_size = 8
eval.batches = 1
[[arm]]
name = "a"
preset = "$ROOT/configs/k3-nano.json"
TOML
}
threads_of_jobs() { grep -h '^threads' "$WORK/$1"/jobs/*/run.toml | sed 's/ *#.*//; s/ //g' | sort -u; }

sweep_file auto > "$WORK/auto.toml"
"$K3LAB" sweep "$WORK/auto.toml" > /dev/null 2> "$WORK/auto.err" || fail "sweep: $(cat "$WORK/auto.err")"
line=$(grep '^sweep: ' "$WORK/auto.err") || fail "no line on the split: $(cat "$WORK/auto.err")"
[ "$(wc -l <<< "$line")" -eq 1 ] || fail "one line on the split: $line"
if ((splits > 1)); then
  grep -Eq "^sweep: [0-9]+ jobs? x [0-9]+ threads? \(aggregate [0-9]+ tok/s(; [0-9]+ x [0-9]+: [0-9]+ tok/s){$((splits - 1))}\), measured on a, N [0-9]+ \(hidden 8, 4 layers\), batch 8 x 64$" <<< "$line" ||
    fail "the line on the split: $line"
fi
[ ! -e "$WORK/auto/auto.probe" ] || fail "the probes' scratch directory was left"
python3 - "$WORK/auto/auto.split.json" "$line" "$cores" "$splits" <<'PY' || fail "the record: $(cat "$WORK/auto/auto.split.json")"
import json, re, sys
r, line, cores, splits = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = re.match(r"sweep: (\d+) jobs? x (\d+) threads?", line)
assert (r["jobs"], r["threads"]) == (int(m.group(1)), int(m.group(2))), (r, line)
assert r["cores"] == cores and r["jobs"] * r["threads"] == cores, r
assert len(r["measured"]) == (splits if splits > 1 else 0), r
for s in r["measured"]:
    assert s["jobs"] * s["threads"] == cores, s
    assert len(s["tokens_per_second"]) == min(s["jobs"], 2), s  # the sweep has 2 jobs
    assert all(t > 0 for t in s["tokens_per_second"]), s
    assert abs(sum(s["tokens_per_second"]) - s["aggregate"]) <= 1e-9 * s["aggregate"], s
    if splits > 1 and s["jobs"] == r["jobs"]:
        assert "aggregate %.0f tok/s" % s["aggregate"] in line, (s, line)
PY
chosen=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["threads"])' "$WORK/auto/auto.split.json")
[ "$(threads_of_jobs auto)" = "threads=$chosen" ] || fail "the jobs' threads: $(threads_of_jobs auto), chose $chosen"
[ "$(grep -c ',done$' "$WORK/auto/auto.csv")" -eq 2 ] || fail "both jobs should be done: $(cat "$WORK/auto/auto.csv")"
echo "ok: $line"

cp "$WORK/auto/auto.split.json" "$WORK/record.json"
"$K3LAB" sweep "$WORK/auto.toml" > /dev/null 2> "$WORK/again.err" || fail "resumed sweep: $(cat "$WORK/again.err")"
again=$(grep '^sweep: ' "$WORK/again.err") || fail "no line on the split: $(cat "$WORK/again.err")"
split=${line%% (*}
[ "$again" = "${split%%,*}, as chosen before ($WORK/auto/auto.split.json)" ] ||
  fail "the resumed sweep should reuse the split: $again"
cmp -s "$WORK/auto/auto.split.json" "$WORK/record.json" || fail "the record changed"
echo "ok: $again"

sweep_file fixed "parallel = 2" "threads = 1" > "$WORK/fixed.toml"
"$K3LAB" sweep "$WORK/fixed.toml" > /dev/null 2> "$WORK/fixed.err" || fail "fixed sweep: $(cat "$WORK/fixed.err")"
! grep -q '^sweep: ' "$WORK/fixed.err" || fail "numbers given: $(grep '^sweep: ' "$WORK/fixed.err")"
[ ! -e "$WORK/fixed/fixed.split.json" ] || fail "numbers given, yet a split was recorded"
[ "$(threads_of_jobs fixed)" = "threads=1" ] || fail "the jobs' threads: $(threads_of_jobs fixed)"
echo "ok: parallel and threads given, no probe"

sweep_file one "threads = 1" > "$WORK/one.toml"
"$K3LAB" sweep "$WORK/one.toml" > /dev/null 2> "$WORK/one.err" || fail "sweep: $(cat "$WORK/one.err")"
s=$( ((cores > 1)) && echo s || true)
[ "$(grep '^sweep: ' "$WORK/one.err")" = "sweep: $cores job$s x 1 thread, filling $cores core$s" ] ||
  fail "threads given: $(cat "$WORK/one.err")"
echo "ok: threads given, jobs fill the cores"

for bad in 0 -2 '"many"' 1.5; do
  sweep_file bad "threads = $bad" > "$WORK/bad.toml"
  expect_error "field sweep.threads: expected a positive integer or \"auto\", found $bad$" \
    "$K3LAB" sweep "$WORK/bad.toml"
done
sweep_file bad "parallel = 0" > "$WORK/bad.toml"
expect_error "field sweep.parallel: expected a positive integer or \"auto\", found 0$" "$K3LAB" sweep "$WORK/bad.toml"
