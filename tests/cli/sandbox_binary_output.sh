#!/usr/bin/env bash
# `k3lab sandbox serve`: a command's binary output comes back exactly, as base64 beside the text
# form (where its invalid bytes read as U+FFFD); valid UTF-8 output comes as text alone.
source "$(dirname "$0")/common.sh"
[ "$(id -u)" -eq 0 ] && command -v bwrap >/dev/null || { echo "skipped: needs root and bwrap"; exit 77; }
export K3LAB_SANDBOX_STORE=$(mktemp -d /tmp/k3sbx-cli.XXXXXX)
chmod 755 "$K3LAB_SANDBOX_STORE"
"$K3LAB" sandbox serve --warm 1 --token-file "$WORK/token" > "$WORK/serve.log" 2>&1 &
server=$!
trap 'stop_service $server "$K3LAB_SANDBOX_STORE"' EXIT
for _ in $(seq 100); do grep -q "service on" "$WORK/serve.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$WORK/serve.log") || fail "the service did not start: $(cat "$WORK/serve.log")"

PYTHONPATH="$ROOT/clients" /usr/bin/python3 - "$url" "$(cat "$WORK/token")" <<'PY'
import base64, random, sys
from k3lab_sandbox import Client

c = Client(sys.argv[1], sys.argv[2])
make = "import random; data = bytes(range(256)) + random.Random(41).randbytes(64); "
data = bytes(range(256)) + random.Random(41).randbytes(64)
r = c.run(["python3", "-c", make + "import sys; sys.stdout.buffer.write(data); "
           "sys.stderr.buffer.write(data[::-1])"])
assert base64.b64decode(r["stdout_base64"]) == data, r
assert base64.b64decode(r["stderr_base64"]) == data[::-1], r
assert "\ufffd" in r["stdout"], r  # the text form, as before
r = c.run(["printf", "h\u00e9llo \u2713"])
assert r["stdout"] == "h\u00e9llo \u2713" and "stdout_base64" not in r, r
assert "stderr_base64" not in r, r
PY
