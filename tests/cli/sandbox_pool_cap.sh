#!/usr/bin/env bash
# `k3lab sandbox serve --max-sandboxes N` bounds every live sandbox, the pools' warm ones included:
# each image (snapshots are images of their own) gets a pool, and a new pool past the cap makes
# room by dropping the least recently used one. The service's agents counted in /proc, sampled
# throughout, never exceed the cap; /v1/health's "alive" says what they are; users past it get 429.
source "$(dirname "$0")/common.sh"
[ "$(id -u)" -eq 0 ] && command -v bwrap >/dev/null || { echo "skipped: needs root and bwrap"; exit 77; }
export K3LAB_SANDBOX_STORE=$(mktemp -d /tmp/k3sbx-cap.XXXXXX)
chmod 755 "$K3LAB_SANDBOX_STORE"
"$K3LAB" sandbox serve --warm 2 --max-sandboxes 5 --timeout 5 --token-file "$WORK/token" \
  > "$WORK/serve.log" 2>&1 &
server=$!
trap 'stop_service $server "$K3LAB_SANDBOX_STORE"' EXIT
for _ in $(seq 100); do grep -q "service on" "$WORK/serve.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$WORK/serve.log") || fail "the service did not start: $(cat "$WORK/serve.log")"

PYTHONPATH="$ROOT/clients" /usr/bin/python3 - "$url" "$(cat "$WORK/token")" "$server" <<'PY' || fail "the cap was not kept"
import os, sys, threading, time
from k3lab_sandbox import Client, SandboxError

url, token, server = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Client(url, token)
CAP = 5

def descends_from_server(pid):  # other tests' services may run agents beside ours
    while pid > 1:
        if pid == server:
            return True
        pid = parent(pid)
    return False

def is_agent(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0] == b"/.k3lab-agent"

def parent(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("PPid:")).split()[1])

def agents():  # a command's process is an agent's fork until it execs: not an agent of its own
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if is_agent(pid) and not is_agent(parent(pid)):
                n += descends_from_server(int(pid))
        except (OSError, StopIteration, ValueError):
            pass
    return n

most, stop = [0], threading.Event()
def sample():
    while not stop.is_set():
        most[0] = max(most[0], agents())
        time.sleep(0.02)
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()

with c.sandbox("host") as s:
    s.put("/work/mark", "x\n")
    images = ["host"] + [(s.snapshot(f"snap{i}"), f"snap{i}")[1] for i in range(4)]
for _ in range(2):
    for image in images:
        r = c.run(["cat", "/work/mark"] if image != "host" else ["true"], image=image)
        assert r["exit_code"] == 0, r
        h = c.health()
        assert h["alive"] <= CAP and h["pools"] <= CAP, h
time.sleep(1)  # the last pool's refill
h = c.health()
assert h["alive"] <= CAP and h["alive"] == agents(), (h, agents())

held = []
try:
    for _ in range(CAP):
        held.append(c.sandbox(images[len(held) % len(images)]))
    try:
        c.sandbox("host")
        raise AssertionError("a sandbox past the cap was made")
    except SandboxError as e:
        assert e.status == 429, (e.status, e.message)
    h = c.health()
    assert h["sandboxes"] == CAP and h["alive"] <= CAP, h
finally:
    for s in held:
        s.destroy()
assert c.run(["echo", "again"])["stdout"] == "again\n"
stop.set()
sampler.join()
assert most[0] <= CAP, f"{most[0]} agents alive at once, cap {CAP}"
print(f"ok: at most {most[0]} agents alive at once under --max-sandboxes {CAP}, {len(images)} images")
PY
echo "ok: the sandbox cap holds with a pool per image"
