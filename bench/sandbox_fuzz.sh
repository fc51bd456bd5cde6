#!/usr/bin/env bash
# The fuzzer of the sandbox agent's wire protocol (tests/sandbox/wire_fuzz_test.cpp) for longer
# than `make test` runs it: SECONDS on the decoders, then as long on a live agent in a sandbox
# (root: the namespaces backend).
# Usage: bench/sandbox_fuzz.sh [SECONDS] [BUILD_DIR]
set -euo pipefail
seconds=${1:-60}
build=${2:-build/release}
cd "$(dirname "$0")/.."
K3LAB_FUZZ_SECONDS=$seconds K3LAB_SANDBOX_AGENT="$PWD/$build/k3lab-sandbox-agent" \
  "$build/tests/test_sandbox" \
  --gtest_filter='SandboxWire.MutatedMessages*:SandboxTest.AnAgentAnswersMutatedRequests*'
