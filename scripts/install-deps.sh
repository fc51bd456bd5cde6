#!/usr/bin/env bash
# The single list of k3lab's dependencies, all Debian packages.
# Idempotent: installs only what is missing and runs `apt-get update` at most once.
# With arguments, the same for the packages named instead (scripts/build-guest-kernel.sh's).
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build make pkg-config clang-format
  # GEMM
  libdnnl-dev
  # collectives (the parallel layers)
  libopenmpi-dev openmpi-bin
  # the multi-host tests' simulated hosts (tests/hosts/): network namespaces, processes by namespace
  iproute2 procps
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # configs, safetensors headers, command line, run configs
  nlohmann-json3-dev libcli11-dev libtomlplusplus-dev
  # the tokenizer's pre-tokenizer regex (Unicode classes, JIT)
  libpcre2-dev
  # OpenMP runtime headers for g++ come with g++ (libgomp)
  # reference tests only
  python3-torch python3-numpy
  # the scaling-law fit's reference (bench/fit_vs_scipy)
  python3-scipy
  # an optimized BLAS for PyTorch (with the reference libblas3 alone it is ~100x slower)
  libopenblas0-pthread
  # agent sandboxes (docs/sandbox.md): namespaces, the system-call filter, the HTTP service
  bubblewrap libseccomp-dev libcpp-httplib-dev
  # the microVM backend: QEMU's microvm machine and a Debian guest kernel (and its disk images)
  qemu-system-x86 linux-image-cloud-amd64 e2fsprogs cpio
  # the sandbox benchmark's comparison; a static busybox for the sandbox tests' small image
  crun busybox-static
  # `k3lab report`'s page, rendered headless by its test
  chromium
  # scripts/real-corpus.sh (and its test): man pages rendered as text, the King James Bible's reader
  man-db groff-base bible-kjv
)

if [ $# -gt 0 ]; then PACKAGES=("$@"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
