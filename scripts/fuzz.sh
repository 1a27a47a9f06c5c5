#!/usr/bin/env bash
# Builds one libFuzzer target with clang (libFuzzer + AddressSanitizer + UBSan) and runs it.
#   scripts/fuzz.sh WORKDIR SECONDS [TARGET]
# TARGET: npz (fuzz/fuzz_npz.cpp, the zip and npy parsers; seeds the numpy fixtures in tests/data/npz)
# or tpugraphs (fuzz/fuzz_tpugraphs.cpp, NpzReader and the TpuGraphs validation; seeds the small valid
# files in tests/data/tpugraphs_seeds). Default npz.
# WORKDIR/sources.txt lists the engine sources to link (written by CMake into build/fuzz). A crash input
# lands in WORKDIR/crashes-TARGET/ and fails the run.
# Exit 77 (reported as skipped by ctest) when clang or the libFuzzer runtime is missing.
set -euo pipefail
work=${1:?usage: scripts/fuzz.sh WORKDIR SECONDS}
seconds=${2:?usage: scripts/fuzz.sh WORKDIR SECONDS}
target=${3:-npz}
case "$target" in
  npz) seeds=tests/data/npz ;;
  tpugraphs) seeds=tests/data/tpugraphs_seeds ;;
  *) echo "fuzz.sh: unknown target '$target' (npz or tpugraphs)" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "SKIP: clang++ not installed (apt-get install clang libclang-rt-14-dev)"; exit 77; fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     "$cxx" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "SKIP: clang cannot link libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
fi
[ -f "$work/sources.txt" ] || { echo "fuzz.sh: $work/sources.txt missing (configure with CMake first)" >&2; exit 2; }
corpus=$work/corpus-$target crashes=$work/crashes-$target
mkdir -p "$work/obj" "$corpus" "$crashes"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -I"$root" -I"$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include"
       -Wno-unknown-pragmas -fmacro-prefix-map="$root/"=)
bin="$work/fuzz_$target"
sources=("$root/fuzz/fuzz_$target.cpp")
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
    # An object the other target built is reused while it is newer than its source and every header.
    if [ -f "$o" ] && [ "$o" -nt "$s" ] &&
       [ -z "$(find "$root/io" "$root/runtime" "$root/kernels" -name '*.h' -newer "$o" -print -quit)" ]; then
      continue
    fi
    "$cxx" "${flags[@]}" -c "$s" -o "$o" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || failed=1; done
  done
  for pid in $(jobs -rp); do wait "$pid" || failed=1; done
  wait || failed=1
  for o in "${objs[@]}"; do [ -f "$o" ] || failed=1; done
  [ "$failed" = 0 ] || { echo "fuzz.sh: compiling the fuzz target failed" >&2; exit 1; }
  "$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lz -o "$bin"
fi
echo "fuzz.sh: running $target for ${seconds}s (corpus $corpus, seeds $seeds)"
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$crashes/" "$corpus" "$root/$seeds" 2>&1 | tail -n 15
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$crashes")" ]; then
  echo "fuzz.sh: the fuzzer found a failing input: $(ls "$crashes")" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"
