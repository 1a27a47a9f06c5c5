#!/usr/bin/env bash
# Installs what gnn.cpp needs to build and test on Debian 12 (as root), skipping what is present.
# The CUDA toolkit is not a Debian package: when nvcc is on PATH the build uses it, otherwise it
# builds the CPU engine only.
set -euo pipefail
packages=(
  cmake g++ make          # the build
  zlib1g-dev              # deflate for the npz reader and writer
  doctest-dev             # the test suite
  libbenchmark-dev        # build/bin/gnn_bench
  clang libclang-rt-14-dev  # the libFuzzer target the test suite runs for a bounded time
  python3-numpy           # tests that check numpy reads what gnn writes
  libopenmpi-dev openmpi-bin  # data-parallel training (mpirun -np R gnn train) and its tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: these packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all build and test dependencies present"
