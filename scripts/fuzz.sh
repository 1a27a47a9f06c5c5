#!/usr/bin/env bash
# Builds fuzz/fuzz_npz.cpp with clang (libFuzzer + AddressSanitizer + UBSan) and runs it.
#   scripts/fuzz.sh WORKDIR SECONDS
# WORKDIR/sources.txt lists the engine sources to link (written by CMake into build/fuzz). Seeds are
# the numpy fixtures in tests/data/npz; a crash input lands in WORKDIR/crashes/ and fails the run.
# Exit 77 (reported as skipped by ctest) when clang or the libFuzzer runtime is missing.
set -euo pipefail
work=${1:?usage: scripts/fuzz.sh WORKDIR SECONDS}
seconds=${2:?usage: scripts/fuzz.sh WORKDIR SECONDS}
root=$(cd "$(dirname "$0")/.." && pwd)
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "SKIP: clang++ not installed (apt-get install clang libclang-rt-14-dev)"; exit 77; fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     "$cxx" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "SKIP: clang cannot link libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
fi
[ -f "$work/sources.txt" ] || { echo "fuzz.sh: $work/sources.txt missing (configure with CMake first)" >&2; exit 2; }
mkdir -p "$work/obj" "$work/corpus" "$work/crashes"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -I"$root" -I"$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include"
       -Wno-unknown-pragmas -fmacro-prefix-map="$root/"=)
bin="$work/fuzz_npz"
sources=("$root/fuzz/fuzz_npz.cpp")
while read -r s; do sources+=("$s"); done < "$work/sources.txt"
stale=0
for s in "${sources[@]}"; do [ "$s" -nt "$bin" ] && stale=1; done
[ -x "$bin" ] || stale=1
if [ "$stale" = 1 ]; then
  echo "fuzz.sh: building $bin with $cxx"
  objs=()
  failed=0
  jobs_max=$(nproc)
  for s in "${sources[@]}"; do
    o="$work/obj/$(echo "$s" | tr / _).o"
    objs+=("$o")
    "$cxx" "${flags[@]}" -c "$s" -o "$o" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || failed=1; done
  done
  for pid in $(jobs -rp); do wait "$pid" || failed=1; done
  wait || failed=1
  for o in "${objs[@]}"; do [ -f "$o" ] || failed=1; done
  [ "$failed" = 0 ] || { echo "fuzz.sh: compiling the fuzz target failed" >&2; exit 1; }
  "$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lz -o "$bin"
fi
echo "fuzz.sh: running for ${seconds}s (corpus $work/corpus, seeds tests/data/npz)"
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/crashes/" "$work/corpus" "$root/tests/data/npz" 2>&1 | tail -n 15
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/crashes")" ]; then
  echo "fuzz.sh: the fuzzer found a failing input: $(ls "$work/crashes")" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"
