#!/usr/bin/env bash
# docs/run-config.md is what `k3lab config reference` prints from the run configuration's field
# table: a key added, renamed or redescribed there without regenerating the page fails here.
source "$(dirname "$0")/common.sh"
"$K3LAB" config reference > "$WORK/run-config.md"
diff -u docs/run-config.md "$WORK/run-config.md" >&2 ||
  fail "docs/run-config.md is out of date; regenerate it: build/release/k3lab config reference > docs/run-config.md"
echo "ok: docs/run-config.md matches the field table"
