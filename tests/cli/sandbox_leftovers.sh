#!/usr/bin/env bash
# A sandbox service killed with SIGKILL leaves nothing: its guardian removes the sandboxes' run
# directories and cgroups at once. Killed with its guardian (the whole group), the next start of a
# backend on the same store removes them; a live service's are never touched meanwhile.
source "$(dirname "$0")/common.sh"
[ "$(id -u)" -eq 0 ] && command -v bwrap >/dev/null || { echo "skipped: needs root and bwrap"; exit 77; }
store=$(mktemp -d /tmp/k3sbx-left.XXXXXX)
chmod 755 "$store"
export K3LAB_SANDBOX_STORE=$store
pids=()
trap 'for p in "${pids[@]}"; do stop_service $p "$store"; done' EXIT

serve() {  # starts a service with 2 warm sandboxes and one user's; prints its pid
  local log=$WORK/serve.$1.log
  "$K3LAB" sandbox serve --warm 2 --timeout 5 --token-file "$WORK/token.$1" > "$log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q "service on" "$log" && break; sleep 0.1; done
  local url
  url=$(grep -o 'http://[0-9.:]*' "$log") || fail "the service did not start: $(cat "$log")"
  curl -sf -X POST -H "Authorization: Bearer $(cat "$WORK/token.$1")" -d '{"image": "host"}' \
    "$url/v1/sandboxes" > /dev/null || fail "no sandbox from the service"
  for _ in $(seq 100); do [ "$(sandboxes_of "$pid" | wc -w)" -ge 3 ] && break; sleep 0.1; done
  echo "$pid"
}
sandboxes_of() {  # the ids of the run directories that a service's bubblewraps use
  for p in $(pgrep -P "$1" -x bwrap); do
    tr '\0' '\n' < "/proc/$p/cmdline" | sed -n "s#^$store/run/\([^/]*\)/root\$#\1#p"
  done
}
cgroups_of() { for id in "$@"; do find /sys/fs/cgroup -maxdepth 6 -type d -name "k3lab-$id"; done; }
gone_within() {  # SECONDS IDS...: their directories, logs and cgroups all gone in time
  local seconds=$1; shift
  for _ in $(seq $((seconds * 10))); do
    [ -z "$(ls -A "$store/run")" ] && [ -z "$(cgroups_of "$@")" ] && return 0
    sleep 0.1
  done
  return 1
}

# Killed alone: the guardian cleans up, while another service on the store keeps its sandboxes.
victim=$(serve a); pids+=("$victim")
other=$(serve b); pids+=("$other")
ids=$(sandboxes_of "$victim"); kept=$(sandboxes_of "$other")
[ "$(wc -w <<< "$ids")" -ge 3 ] || fail "the service runs no sandboxes: '$ids'"
[ -n "$(cgroups_of $ids)" ] || echo "note: no cgroup hierarchy usable here"
kill -9 "$victim"
for _ in $(seq 100); do [ -z "$(ls -d $(printf "$store/run/%s " $ids) 2>/dev/null)" ] && break; sleep 0.1; done
[ -z "$(ls -d $(printf "$store/run/%s " $ids) 2>/dev/null)" ] || fail "run directories left: $(ls "$store/run")"
[ -z "$(cgroups_of $ids)" ] || fail "cgroups left: $(cgroups_of $ids)"
for id in $kept; do [ -d "$store/run/$id" ] || fail "a live service's sandbox $id was removed"; done
kill -TERM "$other"
for _ in $(seq 100); do kill -0 "$other" 2>/dev/null || break; sleep 0.1; done
kill -0 "$other" 2>/dev/null && fail "the other service did not stop on SIGTERM"
gone_within 10 $kept || fail "left after a clean stop: $(ls -A "$store/run")"
echo "ok: SIGKILL of the service alone leaves nothing; the other service's sandboxes untouched"

# Killed with its guardian: what is left goes at the next start of a backend on the store.
victim=$(serve c); pids+=("$victim")
ids=$(sandboxes_of "$victim")
guardian=$(pgrep -P "$victim" -x k3lab-guardian) || fail "no guardian"
kill -9 "$guardian" "$victim"
sleep 1
[ -n "$(ls -A "$store/run")" ] || fail "nothing was left to clean: the test proves nothing"
"$K3LAB" sandbox run host -- sleep 3 & runner=$!  # checked while it runs: not its guardian's work
for _ in $(seq 20); do [ -n "$(ls -d "$store"/run/ns-* | grep -v -F "$ids")" ] && break; sleep 0.1; done
left=$(for id in $ids; do ls -d "$store/run/$id" "$store/run/$id.log" 2>/dev/null || true; done)
[ -z "$left$(cgroups_of $ids)" ] || fail "left after the next start: $left $(cgroups_of $ids)"
wait $runner || fail "sandbox run failed"
gone_within 2 || fail "left after sandbox run: $(ls -A "$store/run")"
echo "ok: what a killed service and guardian left goes at the next start"
