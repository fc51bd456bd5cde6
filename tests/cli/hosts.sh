#!/usr/bin/env bash
# k3lab across hosts (tests/hosts/hosts.sh simulates them: network namespaces on a bridge, each
# with its own hostname and disk, TCP between them, mpirun's daemons started through ip netns
# exec). Each layout placed across 2 hosts (and dp2 × tp2 across 4) trains as on one machine;
# checkpoints live on the lead's disk, a resume on the same hosts is bit-identical, one with the
# lead's disk gone ends at once naming it, and one from a shared directory goes on under another
# host count and layout; a rank killed on another host, and a host whose link is cut, end the job
# within seconds with one line naming what was lost and the checkpoint to resume from (once, with
# two ranks a host), and the resume ends bit-identical to an uninterrupted run.
source "$(dirname "$0")/common.sh"
source "$ROOT/tests/hosts/hosts.sh"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -q)
NANO=("${TINY[@]}" --set train.threads=1 --set model.config=configs/k3-nano.json --set data.seq_len=16)
hosts_up 4

# Each layout on 2 hosts, rank by rank alternating (every group crosses the hosts), against the
# same layout on one machine: the same losses (measured: identical to the last digit).
across() {  # NAME NP HOSTS SETTINGS...
  local name=$1 np=$2 hosts=$3
  shift 3
  hosts_mpirun --host "$hosts" --map-by node -np "$np" -- "$K3LAB" train "${NANO[@]}" "$@" \
    --set train.steps=4 --set run.dir="$HOST_DISK/$name" > /dev/null
  "${MPI[@]}" -np "$np" "$K3LAB" train "${NANO[@]}" "$@" --set train.steps=4 \
    --set run.dir="$WORK/one_$name" > /dev/null
  losses_match "$WORK/one_$name" "$WORK/hosts/disk1/$name" 1 2 3 4
  compgen -G "$WORK/hosts/disk2/*" > /dev/null && fail "$name: a rank wrote on host 2's disk"
  echo "ok: $name across $hosts as on one machine"
}
across dp2 2 h1,h2 --set parallel.dp=2
across tp2 2 h1,h2 --set parallel.tp=2
across pp2 2 h1,h2 --set parallel.pp=2 --set train.grad_accum=2
across ep2 2 h1,h2 --set parallel.ep=2
across cp2 2 h1,h2 --set parallel.cp=2
across dp2_tp2_4hosts 4 h1,h2,h3,h4 --set parallel.dp=2 --set parallel.tp=2

# Checkpoints: the lead gathers them onto its own disk; a resume on the same hosts receives the
# lead's files on the others and ends bit-identical to the run that was never stopped.
CKPT=(--set parallel.dp=2 --set train.steps=6 --set checkpoint.every=3)
hosts_mpirun --host h1,h2 --map-by node -np 2 -- "$K3LAB" train "${NANO[@]}" "${CKPT[@]}" \
  --set run.dir="$HOST_DISK/ck" > /dev/null
cp -r "$WORK/hosts/disk1/ck" "$WORK/ck_straight"
rm -r "$WORK/hosts/disk1/ck/checkpoints/step_00000006"
hosts_mpirun --host h1,h2 --map-by node -np 2 -- "$K3LAB" train --quiet --resume "$HOST_DISK/ck" > /dev/null
same_checkpoint "$WORK/ck_straight/checkpoints/step_00000006" "$WORK/hosts/disk1/ck/checkpoints/step_00000006"
compgen -G "${TMPDIR:-/tmp}/k3lab-checkpoint.*" > /dev/null && fail "a copy of the lead's checkpoint was left behind"
echo "ok: resumed across hosts without a shared filesystem, bit-identical"

# The lead's disk gone: one line, naming the run directory and the host, at once.
mv "$WORK/hosts/disk1/ck" "$WORK/hosts/disk1/gone"
SECONDS=0
err=$(hosts_mpirun --host h1,h2 --map-by node -np 2 -- "$K3LAB" train --quiet --resume "$HOST_DISK/ck" 2>&1 >/dev/null) &&
  fail "a resume without the lead's disk succeeded"
[ "$(grep -c . <<< "$err")" -eq 1 ] || fail "expected one line, got: $err"
grep -q "rank 0 of 2: error: .*$HOST_DISK/ck: not a run directory .* on rank 0's host, h1$" <<< "$err" ||
  fail "the lead's disk gone: $err"
[ "$SECONDS" -le 20 ] || fail "the refusal took $SECONDS s"
echo "ok: $err"

# A shared directory: saved by pp2 on 2 hosts, resumed by dp2 × pp2 on 4, as one machine resumes it.
SHARED=(--set train.grad_accum=2 --set train.steps=6 --set checkpoint.every=3)
hosts_mpirun --host h1,h2 --map-by node -np 2 -- "$K3LAB" train "${NANO[@]}" "${SHARED[@]}" \
  --set parallel.pp=2 --set run.dir="$HOST_SHARED/moved" > /dev/null
rm -r "$HOST_SHARED/moved/checkpoints/step_00000006"
cp -r "$HOST_SHARED/moved" "$WORK/moved_here"
hosts_mpirun --map-by node -np 4 -- "$K3LAB" train --quiet --resume "$HOST_SHARED/moved" \
  --set parallel.dp=2 --set parallel.pp=2 > /dev/null 2>&1
"${MPI[@]}" -np 4 "$K3LAB" train --quiet --resume "$WORK/moved_here" --set parallel.dp=2 \
  --set parallel.pp=2 > /dev/null 2>&1
losses_match "$WORK/moved_here" "$HOST_SHARED/moved" 4 5 6
echo "ok: a shared directory resumed on 4 hosts under dp2 x pp2, as on one machine"

# Faults, two ranks a host (ranks 0 and 2 on h1, 1 and 3 on h2): rank 1 killed, then h2's link
# cut. Each job ends within 20 s with one line, from rank 0, naming what was lost and the
# checkpoint; resumed after both (the link restored), the run ends bit-identical to the
# uninterrupted one.
FOUR=(--host h1:2,h2:2 --map-by node -np 4)
FAULT=(--set parallel.dp=4 --set train.steps=16 --set checkpoint.every=4 --set checkpoint.keep_last=10)
hosts_mpirun "${FOUR[@]}" -- "$K3LAB" train "${NANO[@]}" "${FAULT[@]}" \
  --set run.dir="$HOST_DISK/straight" > /dev/null
fault() {  # NAME PATTERN STEP ACTION: runs (resuming from the second on) to STEP, does ACTION
  local name=$1 pattern=$2 step=$3 action=$4 pid rc=0 resume=()
  compgen -G "$WORK/hosts/disk1/faults/checkpoints/step_*" > /dev/null && resume=(--resume)
  hosts_mpirun "${FOUR[@]}" -- "$K3LAB" train "${NANO[@]}" "${FAULT[@]}" \
    --set run.dir="$HOST_DISK/faults" "${resume[@]}" > /dev/null 2> "$WORK/$name.err" &
  pid=$!
  wait_for_steps "$pid" "$WORK/hosts/disk1/faults" "$step"
  local at=$SECONDS
  "$action"
  wait "$pid" || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: the job ended with status 0"
  [ $((SECONDS - at)) -le 20 ] || fail "$name: the job took $((SECONDS - at)) s to end"
  # Open MPI's own notes, if any, start with "[host:pid]" or "---": the rest is k3lab's.
  local lines
  lines=$(grep -v -e '^\[' -e '^--' "$WORK/$name.err" || true)
  [ "$(grep -c . <<< "$lines")" -eq 1 ] || fail "$name: expected one line, got: $lines"
  grep -Eq "^k3lab: $pattern, so the run stops; k3lab train --resume $HOST_DISK/faults continues from checkpoints/step_000000[0-9]{2}$" <<< "$lines" ||
    fail "$name: $lines"
  echo "ok: $name: the job ended in $((SECONDS - at)) s: $lines"
  ip netns pids "${HOSTS_TAG}h2" | xargs -r kill -9  # what a lost host left running
}
kill_rank_1() {
  local pid
  for pid in $(ip netns pids "${HOSTS_TAG}h2"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -9 "$pid"
  done
  return 0
}
cut_h2() { ip -n "${HOSTS_TAG}h2" link set eth0 down; }
fault kill "rank 1 \(host h2\) ended" 6 kill_rank_1
fault cut "host h2 \(ranks 1, 3\) cannot be reached" 11 cut_h2
ip -n "${HOSTS_TAG}h2" link set eth0 up
hosts_mpirun "${FOUR[@]}" -- "$K3LAB" train --quiet --resume "$HOST_DISK/faults" > /dev/null
same_checkpoint "$WORK/hosts/disk1/straight/checkpoints/step_00000016" \
  "$WORK/hosts/disk1/faults/checkpoints/step_00000016"
echo "ok: resumed after both faults, bit-identical to the uninterrupted run"

# Nothing left behind: no namespace, no process of the job.
hosts_down
[ -z "$(hosts_left)" ] || fail "namespaces left: $(hosts_left)"
echo "ok: every simulated host is gone"
