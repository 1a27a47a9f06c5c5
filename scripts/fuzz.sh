#!/usr/bin/env bash
# Builds one libFuzzer target with clang (libFuzzer + AddressSanitizer + UBSan) and runs it.
#   scripts/fuzz.sh WORKDIR SECONDS [TARGET [GNN]]
# TARGET: npz (fuzz/fuzz_npz.cpp, the zip and npy parsers; seeds the numpy fixtures in tests/data/npz),
# tpugraphs (fuzz/fuzz_tpugraphs.cpp, NpzReader and the TpuGraphs validation; seeds the small valid
# files in tests/data/tpugraphs_seeds), json (fuzz/fuzz_json.cpp, the JSON parser and the eval_indices
# reader; seeds tests/data/json_seeds) or checkpoint (fuzz/fuzz_checkpoint.cpp, the checkpoint reader;
# seeds: small runs that GNN, the build's CLI, trains into WORKDIR/seeds-checkpoint). Default npz.
# WORKDIR/sources.txt lists the io sources to link, WORKDIR/sources-engine.txt the whole host engine and
# the apps for the checkpoint target (both written by CMake into build/fuzz). A crash input lands in
# WORKDIR/crashes-TARGET/ and fails the run.
# Exit 77 (reported as skipped by ctest) when clang or the libFuzzer runtime is missing.
set -euo pipefail
work=${1:?usage: scripts/fuzz.sh WORKDIR SECONDS}
seconds=${2:?usage: scripts/fuzz.sh WORKDIR SECONDS}
target=${3:-npz}
list=sources.txt
root=$(cd "$(dirname "$0")/.." && pwd)
case "$target" in
  npz) seeds=$root/tests/data/npz ;;
  tpugraphs) seeds=$root/tests/data/tpugraphs_seeds ;;
  json) seeds=$root/tests/data/json_seeds ;;
  checkpoint) seeds=$work/seeds-checkpoint list=sources-engine.txt ;;
  *) echo "fuzz.sh: unknown target '$target' (npz, tpugraphs, json or checkpoint)" >&2; exit 2 ;;
esac
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "SKIP: clang++ not installed (apt-get install clang libclang-rt-14-dev)"; exit 77; fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     "$cxx" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "SKIP: clang cannot link libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
fi
[ -f "$work/$list" ] || { echo "fuzz.sh: $work/$list missing (configure with CMake first)" >&2; exit 2; }
corpus=$work/corpus-$target crashes=$work/crashes-$target
mkdir -p "$work/obj" "$corpus" "$crashes"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -I"$root" -I"$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include"
       -Wno-unknown-pragmas -fmacro-prefix-map="$root/"= -DGNN_VERSION='"fuzz"')
bin="$work/fuzz_$target"
sources=("$root/fuzz/fuzz_$target.cpp")
while read -r s; do sources+=("$s"); done < "$work/$list"
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
       [ -z "$(find "$root"/{base,io,runtime,kernels,autograd,nn,dist,apps} -name '*.h' -newer "$o" -print -quit)" ]; then
      continue
    fi
    extra=()
    case "$s" in
      */gemm_avx2.cpp) extra=(-mavx2 -mfma) ;;
      */gemm_avx512.cpp | */squeeze_excite_avx512.cpp) extra=(-mavx512f -mfma) ;;
      */gemm_bf16.cpp) extra=(-mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mamx-tile -mamx-bf16 -mfma) ;;
      */squeeze_excite_amx.cpp) extra=(-mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mamx-tile -mamx-bf16) ;;
    esac
    "$cxx" "${flags[@]}" "${extra[@]}" -c "$s" -o "$o" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || failed=1; done
  done
  for pid in $(jobs -rp); do wait "$pid" || failed=1; done
  wait || failed=1
  for o in "${objs[@]}"; do [ -f "$o" ] || failed=1; done
  [ "$failed" = 0 ] || { echo "fuzz.sh: compiling the fuzz target failed" >&2; exit 1; }
  "$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lz -o "$bin"
fi
if [ "$target" = checkpoint ]; then
  # Seeds in today's format: three tiny runs of the build's own gnn (weights, Adam, state, preprocessing;
  # SWA snapshots; a recipe's own state, layout-gst's table of segment scores).
  gnn=${4:?fuzz.sh: the checkpoint target needs the gnn CLI as its fourth argument}
  rm -rf "$seeds" "$work/seed-runs" && mkdir -p "$seeds" "$work/seed-runs"
  "$gnn" synth --collection tile --out "$work/seed-runs/data" --graphs 2 --nodes 8 --configs 4 --seed 1 >/dev/null
  "$gnn" synth --collection layout --out "$work/seed-runs/data" --graphs 2 --nodes 12 --configs 4 --seed 2 >/dev/null
  small="--data $work/seed-runs/data --epochs 2 --progress lines --threads 1"
  "$gnn" train --model tile-mlp --out "$work/seed-runs/tile" --op-embed 2 --hidden 2 --swa 2 $small >/dev/null
  "$gnn" train --model layout-mlp --out "$work/seed-runs/layout" --op-embed 2 --hidden 2 $small >/dev/null
  "$gnn" train --model layout-gst --out "$work/seed-runs/gst" --op-embed 2 --hidden 2 $small >/dev/null
  # The inputs' two forms (fuzz/fuzz_checkpoint.cpp): 0x80 and a file's bytes; or a base and edits.
  bases=
  for r in tile layout gst; do
    { printf '\x80'; cat "$work/seed-runs/$r/model.npz"; } > "$seeds/raw-$r"
    bases=${bases:+$bases:}$work/seed-runs/$r/model.npz
  done
  printf '\x00' > "$seeds/base-0"; printf '\x01' > "$seeds/base-1"; printf '\x02' > "$seeds/base-2"
  export GNN_FUZZ_CHECKPOINTS=$bases
fi
echo "fuzz.sh: running $target for ${seconds}s (corpus $corpus, seeds $seeds)"
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$crashes/" "$corpus" "$seeds" 2>&1 | tail -n 15
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$crashes")" ]; then
  echo "fuzz.sh: the fuzzer found a failing input: $(ls "$crashes")" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"
