#!/usr/bin/env bash
# The test suite again under AddressSanitizer + UndefinedBehaviorSanitizer (gcc), in build-asan/: CPU
# code only (no CUDA, no emulator: the GPU cases skip as they do without a GPU); any report stops the
# test that made it and fails the run. The build and the tests are CMakePresets.json's "asan" presets.
# Left out there, each still run by the plain build's ctest: the fuzz targets (sanitized builds of their
# own), the install check (it rebuilds the library), and the two slowest end-to-end cases ("train: the
# CLI trains, resumes bit for bit ..." and "cli: synth writes ..., demo runs end to end"), which run code
# the remaining cases already reach. Built without MPI (Open MPI's own allocations at exit read as leaks
# to LeakSanitizer): the distributed cases skip here and run in the plain build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan
