#!/usr/bin/env bash
# Builds k3lab's own microVM guest kernel from Debian's kernel source (linux-source-6.1): `make
# tinyconfig` with scripts/guest-kernel.config merged in, everything built in, booted uncompressed
# through PVH. The microVM backend prefers it to /boot's kernels once it is in the image store:
#   STORE/microvm/vmlinux-k3lab-guest   and its configuration   STORE/microvm/config-k3lab-guest
# STORE is $K3LAB_SANDBOX_STORE, else /var/lib/k3lab/sandbox as root, else ~/.cache/k3lab/sandbox.
# Optional (docs/sandbox.md): installs its build packages itself (some 140 MB of source); the build
# takes some minutes (8.5 on 2 cores). Usage: scripts/build-guest-kernel.sh [BUILD_DIR]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${K3LAB_SANDBOX_STORE:-}" ]; then
  store=$K3LAB_SANDBOX_STORE
elif [ "$(id -u)" -eq 0 ]; then
  store=/var/lib/k3lab/sandbox
else
  store=${HOME:-/tmp}/.cache/k3lab/sandbox
fi
build=${1:-${TMPDIR:-/tmp}/k3lab-guest-kernel}

"$here/install-deps.sh" linux-source-6.1 make gcc bc bison flex libelf-dev

source_tar=$(ls /usr/src/linux-source-6.1.tar.* | head -n 1)
mkdir -p "$build"
if [ ! -f "$build/linux/Makefile" ]; then
  echo "build-guest-kernel: unpacking $source_tar into $build/linux"
  rm -rf "$build/linux" "$build/linux-source-6.1"
  tar -xf "$source_tar" -C "$build"
  mv "$build/linux-source-6.1" "$build/linux"
fi

cd "$build/linux"
make -s ARCH=x86_64 tinyconfig >/dev/null
./scripts/kconfig/merge_config.sh -m .config "$here/guest-kernel.config" >/dev/null 2>&1
make -s ARCH=x86_64 olddefconfig >/dev/null
# Every option asked for must have survived the dependencies' resolution.
while IFS='=' read -r option want; do
  have=$(grep "^$option=" .config | cut -d= -f2- || true)
  [ "$want" = "n" ] && want=""
  if [ "$want" != "$have" ]; then
    echo "build-guest-kernel: $option is '${have:-not set}', not '${want:-not set}' (a dependency is missing)" >&2
    exit 1
  fi
done < <(grep -E '^CONFIG_[A-Z0-9_]+=' "$here/guest-kernel.config")

echo "build-guest-kernel: building in $build/linux (a few minutes)"
make -s -j"$(nproc)" ARCH=x86_64 vmlinux
mkdir -p "$store/microvm"
install -m 0644 vmlinux "$store/microvm/vmlinux-k3lab-guest.tmp"
install -m 0644 .config "$store/microvm/config-k3lab-guest"
mv "$store/microvm/vmlinux-k3lab-guest.tmp" "$store/microvm/vmlinux-k3lab-guest"
echo "build-guest-kernel: $store/microvm/vmlinux-k3lab-guest ($(( $(stat -c %s vmlinux) >> 20 )) MiB)"
