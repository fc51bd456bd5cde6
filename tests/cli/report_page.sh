#!/usr/bin/env bash
# `k3lab report RUN_DIR`'s page: a pipeline-parallel run of an MoE model under mpirun gives a
# report.html with every plot drawn, no network reference, that headless Chromium loads without a
# console message; and a trace.json in the Chrome trace format with the steps, the collectives
# and both pipeline ranks' schedule nodes. Skipped (77) without Chromium.
source "$(dirname "$0")/common.sh"
command -v chromium > /dev/null ||
  { echo "skipped: no chromium (Debian's chromium, scripts/install-deps.sh)"; exit 77; }
export OMP_NUM_THREADS=1
RUN="$WORK/run"
mpirun --allow-run-as-root --oversubscribe -q -np 2 "$K3LAB" train --quiet \
  --set model.config=configs/k3-nano.json --set data.builtin_tokens=200000 --set data.seq_len=32 \
  --set train.batch_size=2 --set train.grad_accum=4 --set parallel.pp=2 --set train.steps=4 \
  --set eval.every=2 --set eval.batches=1 --set checkpoint.every=0 --set sample.every=0 \
  --set train.threads=1 --set run.dir="$RUN" > "$WORK/train.log" 2>&1 ||
  fail "the run failed: $(tail -n 3 "$WORK/train.log")"
out=$("$K3LAB" report "$RUN")
grep -q "$RUN/report.html" <<< "$out" || fail "the page's path is not printed: $out"
! grep -q "not drawn" <<< "$out" || fail "a plot is missing: $out"

python3 - "$RUN/report.html" "$RUN/trace.json" <<'PY' || fail "the page or the trace is incomplete"
import json, re, sys
page = open(sys.argv[1]).read()
refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page)
assert not refs, f"the page refers to other files: {refs}"
outside = [u for u in re.findall(r'url\(([^)]*)\)', page) if not u.startswith("#")]
assert "<script" not in page and not outside, f"the page loads something: {outside}"
trace = json.load(open(sys.argv[2]))["traceEvents"]
cats = {(e.get("pid"), e.get("cat")) for e in trace if e.get("ph") == "X"}
for want in [(0, "forward"), (1, "forward"), (0, "backward"), (1, "backward"),
             (1000, "step"), (1000, "communication")]:
    assert want in cats, f"no {want[1]} event of process {want[0]} in the trace"
print(f"trace: {len(trace)} events")
PY

# Headless Chromium: the DOM it built has an <svg> in every plot's section, and it logged no
# console message (an error loading or parsing anything would be one).
chrome=(chromium --headless=new --no-sandbox --disable-gpu --enable-logging=stderr --v=0
        --user-data-dir="$WORK/profile")
"${chrome[@]}" --dump-dom "file://$RUN/report.html" > "$WORK/dom.html" 2> "$WORK/chromium.log" ||
  fail "chromium failed: $(tail -n 3 "$WORK/chromium.log")"
! grep -a "CONSOLE" "$WORK/chromium.log" || fail "console messages while loading the page"
python3 - "$WORK/dom.html" <<'PY' || fail "a plot is not in the rendered page"
import re, sys
dom = open(sys.argv[1]).read()
want = ["loss", "lr", "grad_norm", "throughput", "mfu", "expert_load", "comm_groups",
        "comm_ranks", "pipeline", "activations"]
sections = dict(re.findall(r'<section class="plot[^"]*" id="plot-([a-z_]+)">(.*?)</section>', dom, re.S))
missing = [p for p in want if "<svg" not in sections.get(p, "")]
assert not missing, f"no svg in: {missing}"
print(f"rendered: {len(want)} plots")
PY
"${chrome[@]}" --window-size=1100,7000 --screenshot="$WORK/report.png" "file://$RUN/report.html" \
  > /dev/null 2>&1 || fail "no screenshot"
[ -s "$WORK/report.png" ] || fail "empty screenshot"
echo "ok: report page rendered without console messages, screenshot $WORK/report.png"
