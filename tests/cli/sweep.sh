#!/usr/bin/env bash
# `k3lab sweep`: a sweep of two identical arms runs every job once (results table, the best
# learning rate per size, the same law `k3lab fit` finds on those optima, a compute multiplier of
# exactly 1); a second invocation reruns nothing; a sweep killed with SIGKILL leaves no job
# running and, run again, resumes its half-run job from its checkpoint to the loss of a sweep never
# interrupted, without rerunning the finished one; mistakes are refused in one line; the comparison
# alone on results written by hand: an arm at two sizes compared point by point, with seed noise.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3

sweep_file() {  # OUT SIZES TOKENS_PER_PARAM LRS PARALLEL ARMS [WARMUP]
  cat <<TOML
[sweep]
out = "$WORK/$1"
parallel = $5
threads = 1
sizes = [$2]
tokens_per_param = $3
lr = [$4]
evals = 4
[set]
data.seq_len = 64
train.batch_size = 8
train.warmup_fraction = ${7:-0.05}
eval.batches = 4
TOML
  for arm in $6; do printf '[[arm]]\nname = "%s"\npreset = "%s/configs/k3-nano.json"\n' "$arm" "$ROOT"; done
}

# Two arms with the same settings: 4 sizes x 2 learning rates each.
sweep_file ab "7e3, 16e3, 35e3, 80e3" 0.5 "1e-2, 3e-2" 2 "a b" > "$WORK/ab.toml"
"$K3LAB" sweep "$WORK/ab.toml" > "$WORK/ab.out" 2> "$WORK/ab.err" || fail "sweep: $(cat "$WORK/ab.err")"
[ "$(grep -c '^started' "$WORK/ab.err")" -eq 16 ] || fail "16 jobs should start: $(cat "$WORK/ab.err")"
$PY - "$WORK/ab/ab.csv" "$WORK/ab/ab.val_loss.json" "$WORK/optima.csv" <<'PY' || fail "results or comparison"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 16 and all(r["status"] == "done" for r in rows), rows
for r in rows:
    assert int(r["tokens"]) == int(r["steps"]) * 8 * 64, r
    assert float(r["flops_6nd"]) == float("%.6e" % (6 * int(r["params"]) * int(r["tokens"]))), r
    assert float(r["flops_exact"]) > float(r["flops_6nd"]), r
    assert float(r["val_loss"]) > 0 and float(r["val_loss_smoothed"]) > 0, r
comparison = json.load(open(sys.argv[2]))
with open(sys.argv[3], "w") as out:
    out.write("N,D,loss\n")
    for arm in comparison["arms"]:
        mine = [r for r in rows if r["arm"] == arm["arm"]]
        for o in arm["optima"]:
            at_size = [r for r in mine if int(r["params"]) == int(o["params"])]
            best = min(at_size, key=lambda r: float(r["val_loss"]))
            assert float(best["lr"]) == o["lr"] and float(best["val_loss"]) == o["loss"], (best, o)
            if arm["arm"] == "a":
                out.write("%s,%s,%s\n" % (best["params"], best["tokens"], best["val_loss"]))
refs = comparison["references"]
assert len(refs) == 4, refs
for r in refs:
    m = r["multipliers"]
    assert len(m) == 1 and m[0]["arm"] == "b" and m[0]["value"] == 1 and m[0]["interval"] == [1, 1], r
print("law a:", {k: comparison["arms"][0][k] for k in ("E", "A", "alpha")})
PY
fit=$("$K3LAB" fit "$WORK/optima.csv" --params N --tokens D --loss loss --form c --json)
$PY - "$fit" "$WORK/ab/ab.val_loss.json" <<'PY' || fail "the sweep's law differs from k3lab fit's: $fit"
import json, sys
fit, arm = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))["arms"][0]
for k in ("E", "A", "alpha"):
    assert abs(fit[k] / arm[k] - 1) < 1e-9, (k, fit[k], arm[k])
PY
grep -Eq "^ +[0-9.e+]+ +[0-9.]+ +1x \[1, 1\]$" "$WORK/ab.out" || fail "multiplier rows: $(cat "$WORK/ab.out")"
for f in ab.val_loss.txt ab.val_loss.svg ab.val_loss.lr.svg; do [ -s "$WORK/ab/$f" ] || fail "no $f"; done
echo "ok: 16 jobs, optima, the law of k3lab fit, multiplier 1"

"$K3LAB" sweep "$WORK/ab.toml" > /dev/null 2> "$WORK/again.err" || fail "second sweep"
! grep -q '^started' "$WORK/again.err" || fail "a finished job ran again: $(cat "$WORK/again.err")"
echo "ok: a finished sweep reruns nothing"

# What a repository keeps of a sweep (every job's files but its run directory, where the
# checkpoints are), cloned elsewhere: nothing runs again, the table is the same.
mkdir "$WORK/clone"
(cd "$WORK" && tar cf - --exclude=run ab) | (cd "$WORK/clone" && tar xf -)
sed "s#^out = .*#out = \"$WORK/clone/ab\"#" "$WORK/ab.toml" > "$WORK/clone/ab.toml"
"$K3LAB" sweep "$WORK/clone/ab.toml" > "$WORK/clone.out" 2> "$WORK/clone.err" ||
  fail "sweep of the clone: $(cat "$WORK/clone.err")"
! grep -q '^started' "$WORK/clone.err" || fail "the clone ran a finished job again: $(cat "$WORK/clone.err")"
cmp "$WORK/ab/ab.csv" "$WORK/clone/ab/ab.csv" || fail "the clone's table differs"
grep -q "\"$WORK/clone/ab/jobs/" "$WORK/clone/ab/jobs/a-n7000-tpp0.5-lr0.01-b8-s1234/run.toml" ||
  fail "the clone's run.toml still points at the original"
echo "ok: the kept files of a finished sweep, elsewhere, rerun nothing"

# Killed: a small job finishes, the next is killed after its first checkpoint, with the sweep.
sweep_file kill "7e3, 35e3" 4 "1e-2" 1 a > "$WORK/kill.toml"
"$K3LAB" sweep "$WORK/kill.toml" > /dev/null 2>&1 &
pid=$!
big="$WORK/kill/jobs/a-n35000-tpp4-lr0.01-b8-s1234"
for ((i = 0; i < 6000; i++)); do
  compgen -G "$big/run/checkpoints/step_*" > /dev/null && break
  kill -0 "$pid" 2> /dev/null || fail "the sweep ended before it could be killed"
  sleep 0.02
done
kill -9 "$pid"
wait "$pid" 2> /dev/null || true
for ((i = 0; i < 20; i++)); do pgrep -f "$WORK/kill" > /dev/null || break; sleep 0.05; done
! pgrep -f "$WORK/kill" > /dev/null || fail "a job outlived its killed sweep: $(pgrep -af "$WORK/kill")"
small="$WORK/kill/jobs/a-n7000-tpp4-lr0.01-b8-s1234"
[ -f "$small/result.json" ] || fail "the small job had not finished"
[ ! -f "$big/result.json" ] || fail "the big job had finished before the kill"
cp "$small/result.json" "$WORK/small.json"
"$K3LAB" sweep "$WORK/kill.toml" > /dev/null 2> "$WORK/resumed.err" || fail "resumed sweep: $(cat "$WORK/resumed.err")"
cmp -s "$small/result.json" "$WORK/small.json" || fail "the finished job ran again"
[ "$(grep -c '"event":"start"' "$small/run/history.jsonl")" -eq 1 ] || fail "the small job restarted"
grep -q '"event":"resume"' "$big/run/history.jsonl" || fail "the big job did not resume from its checkpoint"
sweep_file straight "7e3, 35e3" 4 "1e-2" 1 a > "$WORK/straight.toml"
"$K3LAB" sweep "$WORK/straight.toml" > /dev/null 2>&1 || fail "uninterrupted sweep"
[ "$(cut -d, -f16 "$WORK/kill/kill.csv")" = "$(cut -d, -f16 "$WORK/straight/straight.csv")" ] ||
  fail "killed and resumed: $(cut -d, -f16 "$WORK/kill/kill.csv") vs $(cut -d, -f16 "$WORK/straight/straight.csv")"
echo "ok: killed with SIGKILL, nothing left running, resumed to the uninterrupted losses"

# Mistakes, one line each.
sweep_file kill "7e3, 35e3" 4 "1e-2" 1 a 0.1 > "$WORK/edited.toml"
expect_error "job a-n7000-tpp4-lr0.01-b8-s1234 was planned with other settings \(train.warmup_fraction: 0.05 -> 0.1\)" \
  "$K3LAB" sweep "$WORK/edited.toml"
sweep_file x "7e3" 1 "1e-2" 1 a > "$WORK/owned.toml"
sed -i 's/^eval.batches = 4/eval.batches = 4\ntrain.lr = 1e-3/' "$WORK/owned.toml"
expect_error "field set.train.lr: set by the sweep" "$K3LAB" sweep "$WORK/owned.toml" --list
sweep_file x "7e3, 7.5e3" 1 "1e-2" 1 a > "$WORK/same.toml"
expect_error "sizes 7000 and 7500 give the same model" "$K3LAB" sweep "$WORK/same.toml" --list
sed 's/^evals = 4/evals = 4\ncolour = 1/' "$WORK/same.toml" > "$WORK/unknown.toml"
expect_error "field sweep.colour: unknown key" "$K3LAB" sweep "$WORK/unknown.toml"

# The comparison alone (--no-run) on results written by hand, no training: arm `ablated` has
# finished at two sizes only, at half the compute efficiency of `base` (its loss at C is base's
# at C / 2), with two seeds at the smallest size (0.01 apart: a pooled sd of 0.01 / sqrt 2).
sweep_file handmade "7e3, 16e3, 35e3, 80e3" 2 "1e-2, 3e-2" 1 "base ablated" > "$WORK/handmade.toml"
sed -i 's/^lr = .*/&\nseeds = [1, 2]\nseed_sizes = [7e3]/' "$WORK/handmade.toml"
"$K3LAB" sweep "$WORK/handmade.toml" --list | $PY -c '
import json, os, sys
next(sys.stdin)
for line in sys.stdin:
    job, n, d = line.split()[0], int(line.split()[3]), int(line.split()[4])
    ablated = job.startswith("ablated")
    if ablated and n > 20000: continue
    loss = 1 + 2000 / (6 * n * d / (2 if ablated else 1)) ** 0.3
    loss += (0.05 if "-lr0.03-" in job else 0) + (0.01 if job.endswith("-s2") else 0)
    os.makedirs(sys.argv[1] + "/" + job)
    json.dump({"status": "done", "val_loss": loss}, open(sys.argv[1] + "/" + job + "/result.json", "w"))
' "$WORK/handmade/jobs"
"$K3LAB" sweep "$WORK/handmade.toml" --no-run > "$WORK/handmade.out" || fail "comparison: $(cat "$WORK/handmade.out")"
grep -q "^seed spread: sd 0.007071 over 4 points with 2 seeds (pooled over each size.s best lr and its neighbours), added to every resample$" \
  "$WORK/handmade.out" || fail "seed spread: $(cat "$WORK/handmade.out")"
grep -q "^effective compute, point by point" "$WORK/handmade.out" || fail "no point-wise table"
$PY - "$WORK/handmade/handmade.val_loss.json" <<'PY' || fail "point-wise ratios: $(cat "$WORK/handmade.out")"
import json, sys
c = json.load(open(sys.argv[1]))
assert [a["pointwise"] for a in c["arms"]] == [False, True], c["arms"]
rows = c["pointwise"]
assert [r["target"] for r in rows] == [7000, 16000], rows
for r in rows:
    m = r["ratios"][0]
    assert m["arm"] == "ablated" and abs(m["value"] / 2 - 1) < 0.01, r
    assert m["interval"][0] < m["value"] < m["interval"][1], r
    assert r["product"] is None, r
PY
grep -q "ablated best (no law)" "$WORK/handmade/handmade.val_loss.svg" || fail "the point-wise arm is not on the plot"
echo "ok: an arm at two sizes compared point by point through the first arm's law, with the seed spread"
