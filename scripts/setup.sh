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
  python3-dev python3-venv python3-pytest  # the Python module (python/) and its tests
  python3-torch           # gnn.torch's layers, checked against torch autograd (CPU build)
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
# nanobind, which builds the Python module, is not packaged in Debian 12: a venv over the system's numpy,
# torch and pytest holds it. CMake builds the module when .venv/bin/python has it.
nanobind_version=3.1.0
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
if ! "$venv/bin/python" -c "import nanobind, sys; sys.exit(nanobind.__version__ != '$nanobind_version')" 2>/dev/null; then
  echo "setup: installing nanobind $nanobind_version into $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "nanobind==$nanobind_version"; then
    echo "setup: could not install nanobind (no package index?): the build leaves the Python module out" >&2
    echo "setup: the build's dependencies present; the Python module's (nanobind) missing"
    exit 0
  fi
fi
echo "setup: all build and test dependencies present"
