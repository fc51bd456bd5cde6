#!/usr/bin/env bash
# The service's HTTP API fuzzed for a few seconds from a fixed seed (bench/sandbox_http_fuzz.sh runs it
# longer): never down, never a 5xx for client garbage, a JSON body with every error.
source "$(dirname "$0")/common.sh"
bash "$ROOT/bench/sandbox_http_fuzz.sh" 4 7 "$K3LAB"
echo "sandbox fuzz: ok"
