#!/usr/bin/env bash
# The test suite again under AddressSanitizer + UndefinedBehaviorSanitizer (gcc), in its own build
# directory: CPU code only (no CUDA, no emulator: the GPU cases skip as they do without a GPU), any
# report stops the test that made it and fails the run.
#   scripts/sanitize.sh [BUILD_DIR]      (default build-asan)
# Left out here, each still run by the plain build's ctest: the fuzz targets (sanitized builds of their
# own), the install check (it rebuilds the library), the 4.3 GB zip case (GNN_TEST_LARGE), and the
# slowest end-to-end training cases, listed in $skip below, which take minutes under the sanitizers on
# 2 cores and run code the remaining cases already reach.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-asan}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNN_SANITIZE=address,undefined \
  -DGNN_WITH_CUDA=OFF -DGNN_BUILD_CUDA_EMU=OFF -DGNN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target gnn_tests gnn_cli
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
skip='fuzz_|install_and_find_package'
skip+='|train: the CLI trains, resumes bit for bit|cli: synth writes a dataset that inspect validates, demo runs'
ctest --test-dir "$build" --output-on-failure -E "$skip"
