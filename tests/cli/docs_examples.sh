#!/usr/bin/env bash
# The documentation's runnable examples run, and succeed.
#
# An example is runnable when the line just before its fence is `<!-- test -->`:
#   - a ```sh (or ```bash) block runs as one script;
#   - a ```console (or bare ```) block runs its `$ ` lines; the lines showing output are not run.
# Each block runs with `set -euo pipefail` in a fresh directory holding a link to configs/, with
# `k3lab` (and `build/release/k3lab`) being the binary under test. Mark only examples that take
# seconds (configs/tiny.toml is a run of a few seconds); leave `make demo` and benchmarks unmarked.
source "$(dirname "$0")/common.sh"
mkdir -p "$WORK/bin" "$WORK/blocks"
ln -s "$(realpath "$K3LAB")" "$WORK/bin/k3lab"
export PATH="$WORK/bin:$PATH" K3_THREADS=2

# Writes each marked block of a Markdown file to $WORK/blocks/N.sh, its first line naming where
# it comes from; a marker not followed by a fence is an error.
extract() {
  awk -v file="$1" -v out="$WORK/blocks" '
    function start(lang) { path = sprintf("%s/%03d.sh", out, ++n); printf "# %s:%d\n", file, FNR > path
                           kind = lang }
    block && /^```/ { block = 0; close(path); next }
    block { line = $0; gsub(/build\/release\/k3lab/, "k3lab", line)
            if (kind == "sh") print line > path
            else if (sub(/^\$ /, "", line)) print line > path
            next }
    marked { marked = 0
             if ($0 ~ /^```(sh|bash)$/) { start("sh"); block = 1; next }
             if ($0 ~ /^```(console)?$/) { start("console"); block = 1; next }
             printf "%s:%d: <!-- test --> must be followed by a ```sh or ```console fence\n", file, FNR; bad = 1 }
    /^<!-- test -->$/ { marked = 1 }
    END { exit bad }' "$1"
}

ran=0
for doc in README.md docs/*.md; do
  rm -f "$WORK"/blocks/*
  extract "$doc" || fail "misplaced example marker in $doc"
  for block in "$WORK"/blocks/*.sh; do
    [ -e "$block" ] || continue
    where=$(head -1 "$block" | cut -c3-)
    dir="$WORK/example_$((++ran))"
    mkdir -p "$dir" && ln -s "$ROOT/configs" "$dir/configs"
    if ! (cd "$dir" && timeout 120 bash -euo pipefail "$block") > "$dir.log" 2>&1; then
      tail -n 20 "$dir.log" >&2
      fail "the example at $where fails (its output: $dir.log)"
    fi
    echo "ok: $where"
  done
done
[ "$ran" -ge 4 ] || fail "found $ran runnable examples; expected the marked ones in README.md and docs/"
echo "ok: $ran examples"
