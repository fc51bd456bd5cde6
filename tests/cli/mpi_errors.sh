#!/usr/bin/env bash
# Errors under mpirun read like errors in one process: a layout, value or option that every rank
# refuses is said in one line, once, and the job exits non-zero; a rank killed mid-run ends the
# job promptly, and the survivors say in one line, once, which checkpoint a resume continues from.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe)

# The lines of stdin that k3lab (or CLI11) wrote: without Open MPI's banners and its "[host:pid] "
# diagnostics (a survivor's shared-memory copy from a killed rank fails with one).
without_open_mpi() {
  grep -Ev '^(-+|Primary job .*|a non-zero exit code.*|mpirun .*|the job to be terminated.*|  Process name: .*|  Exit code: .*|\[[^]]*:[0-9]+\] .*|)$' || true
}

# COMMAND... must fail within 60 s; prints its own lines on stderr.
own_lines() {
  local err rc=0
  err=$(timeout 60 "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "expected a prompt failure (rc $rc): $*"
  without_open_mpi <<< "$err"
}

# Exactly one line, matching PATTERN.
one_line() {  # WHAT PATTERN LINES
  [ "$(grep -c . <<< "$3")" -eq 1 ] || fail "$1: expected one line, got: $3"
  grep -Eq -e "$2" <<< "$3" || fail "$1: '$3' does not match '$2'"
  echo "ok: $1: $3"
}

lines=$(own_lines "${MPI[@]}" -q -np 2 "$K3LAB" train "${TINY[@]}" --set parallel.tp=3 --set run.dir="$WORK/bad")
one_line "refused layout" "^k3lab: rank 0 of 2: error: field parallel: .*= 3 but the job has 2 processes$" "$lines"
# Without -q, Open MPI adds its banner about the non-zero exit; the error is still said once.
lines=$(own_lines "${MPI[@]}" -np 2 "$K3LAB" train "${TINY[@]}" --set parallel.tp=3 --set run.dir="$WORK/bad")
one_line "refused layout, launcher not quiet" "^k3lab: rank 0 of 2: error: field parallel: " "$lines"
lines=$(own_lines "${MPI[@]}" -q -np 3 "$K3LAB" train "${TINY[@]}" --set train.steps=abc --set run.dir="$WORK/bad")
one_line "bad --set value" "^k3lab: rank 0 of 3: error: field train.steps: .*expected an integer" "$lines"
lines=$(own_lines "${MPI[@]}" -q -np 2 "$K3LAB" train --no-such-option)
[ "$(grep -c 'no-such-option' <<< "$lines")" -eq 1 ] || fail "unknown option: expected it named once, got: $lines"
echo "ok: unknown option named once"
[ ! -e "$WORK/bad/checkpoints" ] || fail "a refused run wrote checkpoints"

# A three-rank run loses a rank (SIGKILL) after its second checkpoint: the job ends within 20 s,
# and the survivors' one line names the checkpoint that the resume then starts from.
run="$WORK/killed"
args=("${TINY[@]}" --set train.threads=1 --set parallel.dp=3 --set train.batch_size=6
      --set train.steps=200 --set checkpoint.every=4 --set run.dir="$run")
"${MPI[@]}" -q -np 3 "$K3LAB" train "${args[@]}" 2> "$WORK/killed.err" &
pid=$!
wait_for_steps "$pid" "$run" 10
LAUNCH=("${MPI[@]}")
victim=$(kill_target "$pid") || fail "no rank to kill"
rank=$(tr '\0' '\n' < "/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
killed_at=$SECONDS
kill -9 "$victim"
rc=0
wait "$pid" || rc=$?
[ $((SECONDS - killed_at)) -le 20 ] || fail "the job took $((SECONDS - killed_at)) s to end after the kill"
[ "$rc" -ne 0 ] || fail "the job exited 0 after losing a rank"
newest=$(find "$run/checkpoints" -name manifest.json | sort | tail -n 1 | xargs dirname | xargs basename)
one_line "killed rank $rank" "^k3lab: rank $rank ended, so the run stops; k3lab train --resume $run continues from checkpoints/$newest$" "$(without_open_mpi < "$WORK/killed.err")"
"${MPI[@]}" -q -np 3 "$K3LAB" train --quiet --resume "$run" > /dev/null
grep '"event":"resume"' "$run/history.jsonl" | grep -q "\"checkpoint\":\"[^\"]*/$newest\"" || fail "the resume did not start from $newest"
echo "ok: the resume started from $newest"
