#!/usr/bin/env bash
# `k3lab sandbox serve` with the Python client (clients/k3lab_sandbox.py): sandboxes made, used and
# destroyed over HTTP; the token required; bad requests answered with one error line; a sandbox
# whose commands kill all they can see keeps its agent; one whose agent dies does not take the
# service down; loopback only.
source "$(dirname "$0")/common.sh"
[ "$(id -u)" -eq 0 ] && command -v bwrap >/dev/null || { echo "skipped: needs root and bwrap"; exit 77; }
export K3LAB_SANDBOX_STORE=$(mktemp -d /tmp/k3sbx-cli.XXXXXX)
chmod 755 "$K3LAB_SANDBOX_STORE"
"$K3LAB" sandbox serve --warm 2 --timeout 5 --token-file "$WORK/token" > "$WORK/serve.log" 2>&1 &
server=$!
trap 'stop_service $server "$K3LAB_SANDBOX_STORE"' EXIT
for _ in $(seq 100); do grep -q "service on" "$WORK/serve.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$WORK/serve.log") || fail "the service did not start: $(cat "$WORK/serve.log")"

PYTHONPATH="$ROOT/clients" /usr/bin/python3 - "$url" "$(cat "$WORK/token")" <<'PY'
import os, signal, sys
from k3lab_sandbox import Client, SandboxError

url, token = sys.argv[1], sys.argv[2]
c = Client(url, token)
assert c.health()["ok"]

r = c.run(["sh", "-c", "read x; echo got $x; exit 4"], stdin="42\n")
assert (r["exit_code"], r["stdout"]) == (4, "got 42\n"), r

with c.sandbox("host") as s:
    s.put("/work/prog.py", "print(sum(range(10)))\n")
    assert s.exec(["python3", "/work/prog.py"])["stdout"] == "45\n"
    assert s.get("/work/prog.py") == b"print(sum(range(10)))\n"
    digest = s.snapshot("with-prog")
    assert len(digest) == 64
with c.sandbox("with-prog") as s:
    assert s.exec(["python3", "/work/prog.py"])["stdout"] == "45\n"

r = c.run(["sleep", "30"], timeout_s=0.5)
assert r["timed_out"], r

def error_of(f):
    try:
        f()
    except SandboxError as e:
        return e.status, e.message
    raise AssertionError("no error")

assert error_of(lambda: Client(url, "wrong-token-wrong-token").health())[0] == 401
status, message = error_of(lambda: c.run(["true"], image="nope"))
assert status == 400 and message.startswith("unknown image 'nope'"), message
assert error_of(lambda: c.run([]))[1] == "'argv' must name a command"
assert error_of(lambda: c.run(["true"], timeout_s=999))[1].startswith("'timeout_s' must be in [")
assert error_of(lambda: c.sandbox(limits={"memory_mb": 1e9}))[1].startswith("'memory_mb' must be in [")
assert error_of(lambda: c.sandbox(limits={"bogus": 1}))[1] == "unknown field 'bogus'"
assert error_of(lambda: c.request("POST", "/v1/sandboxes", raw=b"{not json"))[1] == "the request body is not valid JSON"
assert error_of(lambda: c.request("POST", "/v1/sandboxes/ns-none/exec", {"argv": ["true"]}))[0] == 404

# A sandbox that kills everything it can see: its command ends, its agent (the PID namespace's
# init, which signals from inside cannot reach) does not.
s = c.sandbox("host")
r = s.exec(["sh", "-c", "kill -9 -1; sleep 5"])
assert r["signal"] == 9, r
assert s.exec(["echo", "still here"])["stdout"] == "still here\n"

# An agent that dies all the same (killed from the host here): that sandbox is destroyed and
# forgotten, the service goes on.
def agent_of(sandbox_id):
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        procs[int(pid)] = (cmd, ppid)
    bwraps = {p for p, (cmd, _) in procs.items() if any(sandbox_id.encode() in a for a in cmd)}
    return next(p for p, (cmd, ppid) in procs.items() if cmd[0] == b"/.k3lab-agent" and ppid in bwraps)
os.kill(agent_of(s.id), signal.SIGKILL)
status, message = error_of(lambda: s.exec(["true"]))
assert "stopped answering" in message, message
assert error_of(lambda: s.exec(["true"]))[0] == 404
assert c.run(["echo", "still serving"])["stdout"] == "still serving\n"
assert c.health()["sandboxes"] == 0, c.health()
print("client: ok")
PY

# SIGTERM: the service destroys its sandboxes (the pool's warm ones too) and leaves nothing.
kill -TERM $server
wait $server || fail "the service did not stop cleanly on SIGTERM"
[ -z "$(ls -A "$K3LAB_SANDBOX_STORE/run")" ] || fail "left in run/: $(ls "$K3LAB_SANDBOX_STORE/run")"
expect_error "not a loopback address" "$K3LAB" sandbox serve --host 0.0.0.0
echo "sandbox serve: ok"
