# Shared by the command-line tests: $K3LAB is the binary, $WORK a fresh directory.
set -euo pipefail
K3LAB=$1
WORK=$2
ROOT=${K3LAB_ROOT:?}
rm -rf "$WORK" && mkdir -p "$WORK"
cd "$ROOT"

fail() { echo "FAIL: $*" >&2; exit 1; }

# A tiny, fast run on the built-in corpus: "$K3LAB" train "${TINY[@]}" [more --set ...].
TINY=(--quiet --set model.config=configs/dense-tiny.json --set data.builtin_tokens=200000
      --set data.seq_len=32 --set train.batch_size=4 --set train.warmup_steps=5 --set eval.every=0
      --set sample.max_tokens=1 --set train.threads=2)

# COMMAND... must fail within 60 s (as a job must, whichever of its ranks fails); prints the first
# line of its stderr.
first_error_line() {  # COMMAND...: must fail; prints its first stderr line
  local err rc=0
  err=$(timeout 60 "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "expected a prompt failure (rc $rc): $*"
  head -n 1 <<< "$err"
}

# Runs a command that must fail with exactly one line on stderr matching a pattern.
expect_error() {
  local pattern=$1; shift
  local err rc=0
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -ne 0 ] || fail "expected failure: $*"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "expected one error line, got: $err"
  grep -Eq -e "$pattern" <<< "$err" || fail "error '$err' does not match '$pattern'"
  echo "ok: $err"
}

# The value of KEY in the record of step STEP in RUN/metrics.jsonl.
field() { grep "\"step\":$2[,}]" "$1/metrics.jsonl" | grep -o "\"$3\":[^,}]*" | cut -d: -f2; }

# A B TOLERANCE: succeeds when |B - A| / A is below TOLERANCE.
within() {
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(a > 0 && d < t) }'
}

# The number of step records in RUN/metrics.jsonl.
recorded_steps() {
  local n
  n=$(grep -c '"step"' "$1/metrics.jsonl" 2>/dev/null) || true
  echo "${n:-0}"
}

# Waits (at most 120 s) until process PID has recorded at least N steps in RUN; fails if it ends first.
wait_for_steps() {
  local pid=$1 run=$2 n=$3 tries=0
  while [ "$(recorded_steps "$run")" -lt "$n" ]; do
    kill -0 "$pid" 2>/dev/null || fail "the run in $run ended before step $n"
    tries=$((tries + 1))
    [ "$tries" -lt 6000 ] || fail "the run in $run did not reach step $n in 120 s"
    sleep 0.02
  done
}

# Fails unless two step directories hold the same weights (with balancing state) and optimizer state.
same_checkpoint() {
  cmp "$1/model.safetensors" "$2/model.safetensors" || fail "weights differ: $1 vs $2"
  cmp "$1/optimizer.safetensors" "$2/optimizer.safetensors" || fail "optimizer state differs: $1 vs $2"
}

# The processes SIGKILL targets in a run started as PID: the run itself, or under a launcher
# (LAUNCH, e.g. mpirun) one of its ranks, chosen at random.
kill_target() {
  if [ ${#LAUNCH[@]} -eq 0 ]; then echo "$1"; return; fi
  local ranks
  mapfile -t ranks < <(pgrep -P "$1" -f k3lab)
  [ ${#ranks[@]} -gt 0 ] && echo "${ranks[RANDOM % ${#ranks[@]}]}"
}

# A run of STEPS steps (extra args: the model and more --set) killed with SIGKILL at random moments,
# then resumed, ends bit-identical to a run that was never interrupted. The moments are random
# steps (read off metrics.jsonl) plus a random delay, so a kill can land in a step, in an
# evaluation or in the middle of writing a checkpoint. With LAUNCH set (an mpirun command line),
# every run goes through it and a kill hits one rank, after which the whole job must end within
# 20 s.
LAUNCH=()
kill_and_resume_matches() {
  local steps=$1; shift
  local args=("${TINY[@]}" "$@" --set train.steps="$steps" --set checkpoint.every=4 --set checkpoint.keep_last=2)
  "${LAUNCH[@]}" "$K3LAB" train "${args[@]}" --set run.dir="$WORK/straight"
  local kills=0 round target pid resume victim killed_at
  for round in 1 2 3; do
    target=$(( $(recorded_steps "$WORK/killed") + 3 + RANDOM % 12 ))
    [ "$target" -lt "$steps" ] || break
    resume=()
    if compgen -G "$WORK/killed/checkpoints/step_*" >/dev/null; then resume=(--resume); fi
    "${LAUNCH[@]}" "$K3LAB" train "${args[@]}" --set run.dir="$WORK/killed" "${resume[@]}" 2>/dev/null &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ "$(recorded_steps "$WORK/killed")" -lt "$target" ]; do sleep 0.02; done
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.3 * r / 32767 }')"
    victim=$(kill_target "$pid") || true
    killed_at=$SECONDS
    if [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null; then kills=$((kills + 1)); fi
    wait "$pid" 2>/dev/null || true
    [ $((SECONDS - killed_at)) -le 20 ] || fail "the job took $((SECONDS - killed_at)) s to end after a kill"
  done
  "${LAUNCH[@]}" "$K3LAB" train --quiet --resume "$WORK/killed"
  echo "interrupted $kills time(s)"
  [ "$kills" -ge 1 ] || fail "the run was never interrupted"
  local final=checkpoints/step_$(printf %08d "$steps")
  same_checkpoint "$WORK/straight/$final" "$WORK/killed/$final"
  [ "$(recorded_steps "$WORK/killed")" -eq "$steps" ] || fail "metrics.jsonl has duplicate or missing steps"
  echo "bit-identical after $kills kill(s)"
}

# The loss RUN recorded at STEP.
loss_at() { grep "\"step\":$2[,}]" "$1/metrics.jsonl" | grep -o '"loss":[^,}]*' | cut -d: -f2; }

# Fails unless runs A and B recorded the same loss (within 1e-6 relative) at every STEP.
losses_match() {  # A B STEP...
  local a=$1 b=$2 step x y
  shift 2
  for step in "$@"; do
    x=$(loss_at "$a" "$step") y=$(loss_at "$b" "$step")
    awk -v a="$x" -v b="$y" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-6 * a) }' ||
      fail "step $step loss: $(basename "$a") $x, $(basename "$b") $y"
  done
}

# Resumes a copy of RUN (a 6-step run with a checkpoint at step 3) as NAME on NP ranks with
# SETTINGS, and expects its step 6 loss within 1e-4 of RUN's.
resume_matches() {  # RUN NAME NP SETTINGS...
  local from=$1 name=$2 np=$3
  shift 3
  local want got
  want=$(loss_at "$from" 6)
  cp -r "$from" "$WORK/$name"
  rm -r "$WORK/$name/checkpoints/step_00000006"
  mpirun --allow-run-as-root --oversubscribe -q -np "$np" "$K3LAB" train --quiet --resume "$WORK/$name" \
    --set train.threads=1 "$@" > /dev/null 2>&1 || fail "resume as $name"
  got=$(loss_at "$WORK/$name" 6)
  awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-4 * a) }' ||
    fail "step 6 loss: $(basename "$from") $want, resumed as $name $got"
  echo "ok: resumed as $name: step 6 loss $got ($(basename "$from"): $want)"
}

# Stops the sandbox service PID (SIGTERM: it destroys its sandboxes; SIGKILL past 10 s, after
# which its guardian removes them), then removes its store STORE once nothing is left in it.
stop_service() {  # PID STORE
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
  for _ in $(seq 50); do rm -rf "$2" 2>/dev/null && return 0; sleep 0.1; done
  rm -rf "$2"
}
