#!/usr/bin/env bash
# Fuzzes a fresh `k3lab sandbox serve` for SECONDS (bench/sandbox_http_fuzz.py), then stops it with
# SIGTERM: the service must still be running, answer every request as the fuzzer checks, and stop
# cleanly.
#   bench/sandbox_http_fuzz.sh [SECONDS (60)] [SEED (1)] [K3LAB (build/release/k3lab)]
set -euo pipefail
seconds=${1:-60} seed=${2:-1} k3lab=${3:-build/release/k3lab}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/k3sbx-fuzz.XXXXXX)
chmod 755 "$work"
export K3LAB_SANDBOX_STORE=$work/store
"$k3lab" sandbox serve --warm 0 --timeout 2 --token-file "$work/token" > "$work/serve.log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null || true; for _ in $(seq 50); do rm -rf "$work" 2>/dev/null && break; sleep 0.1; done' EXIT
for _ in $(seq 100); do grep -q "service on" "$work/serve.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$work/serve.log") || { cat "$work/serve.log"; exit 1; }
/usr/bin/python3 "$here/sandbox_http_fuzz.py" "$url" "$(cat "$work/token")" --seconds "$seconds" --seed "$seed"
kill -0 $server || { echo "the service died"; exit 1; }
kill -TERM $server
wait $server || { echo "the service did not stop cleanly: $(cat "$work/serve.log")"; exit 1; }
