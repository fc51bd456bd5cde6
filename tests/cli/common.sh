# Shared by the command-line tests: $K3LAB is the binary, $WORK a fresh directory.
set -euo pipefail
K3LAB=$1
WORK=$2
ROOT=${K3LAB_ROOT:?}
rm -rf "$WORK" && mkdir -p "$WORK"
cd "$ROOT"

fail() { echo "FAIL: $*" >&2; exit 1; }

# A tiny, fast run on the built-in corpus: "$K3LAB" train "${TINY[@]}" [more --set ...].
TINY=(--quiet --set model.config=configs/dense-tiny.json --set data.builtin_tokens=200000
      --set data.seq_len=32 --set train.batch_size=4 --set train.warmup_steps=5 --set eval.every=0
      --set sample.max_tokens=1 --set train.threads=2)

# Runs a command that must fail with exactly one line on stderr matching a pattern.
expect_error() {
  local pattern=$1; shift
  local err rc=0
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -ne 0 ] || fail "expected failure: $*"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "expected one error line, got: $err"
  printf '%s\n' "$err" | grep -Eq "$pattern" || fail "error '$err' does not match '$pattern'"
  echo "ok: $err"
}
