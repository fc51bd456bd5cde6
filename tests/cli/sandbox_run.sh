#!/usr/bin/env bash
# `k3lab sandbox run|import|images`: a command's output and exit status, stdin, the timeout's 124,
# an imported image, and one clear line for each bad input.
source "$(dirname "$0")/common.sh"
[ "$(id -u)" -eq 0 ] && command -v bwrap >/dev/null || { echo "skipped: needs root and bwrap"; exit 77; }
export K3LAB_SANDBOX_STORE=$(mktemp -d /tmp/k3sbx-cli.XXXXXX)
trap 'rm -rf "$K3LAB_SANDBOX_STORE"' EXIT
chmod 755 "$K3LAB_SANDBOX_STORE"

out=$("$K3LAB" sandbox run host -- sh -c 'echo out; echo err >&2; exit 7' 2>"$WORK/err") && rc=0 || rc=$?
[ "$rc" -eq 7 ] || fail "exit status $rc, not 7"
[ "$out" = out ] && [ "$(cat "$WORK/err")" = err ] || fail "output: '$out' / '$(cat "$WORK/err")'"
[ "$(echo piped | "$K3LAB" sandbox run host -- cat)" = piped ] || fail "stdin did not reach the command"
rc=0; "$K3LAB" sandbox run host --timeout 0.5 -- sleep 30 2>/dev/null || rc=$?
[ "$rc" -eq 124 ] || fail "a command past its timeout exited $rc, not 124"

mkdir -p "$WORK/rootfs/etc" && echo "from the image" > "$WORK/rootfs/etc/motd"
cp "$(dirname "$K3LAB")/k3lab-sandbox-agent" "$WORK/rootfs/cat-free"
"$K3LAB" sandbox import tiny "$WORK/rootfs" | grep -q '^tiny [0-9a-f]\{64\}$' || fail "import"
"$K3LAB" sandbox images | grep -q '^tiny ' || fail "images does not list tiny"
# The image has no shell: the command is not found, 127.
rc=0; "$K3LAB" sandbox run tiny -- sh -c true 2>/dev/null || rc=$?
[ "$rc" -eq 127 ] || fail "a command missing from the image exited $rc"

expect_error "unknown image 'nope'" "$K3LAB" sandbox run nope -- true
expect_error "unknown sandbox backend 'vm'" "$K3LAB" sandbox run --backend vm host -- true
expect_error "image name '../x' is not valid" "$K3LAB" sandbox import ../x "$WORK/rootfs"
expect_error "does not exist" "$K3LAB" sandbox import x "$WORK/missing"
expect_error "--timeout 0: must be in \[0.001, 604800\]" "$K3LAB" sandbox run --timeout 0 host -- true
echo "sandbox run: ok"
