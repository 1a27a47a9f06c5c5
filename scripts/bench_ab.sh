#!/usr/bin/env bash
# A/B of two builds' CPU kernels: `gnn bench kernel` of each build, in turn, round after round (the
# order flips every round), so a drift of the machine's speed hits both alike; prints each case's median
# over the rounds (each round's figure is already the median of --repeat runs) and the ratio new / old.
#
#   scripts/bench_ab.sh OLD_GNN NEW_GNN [ROUNDS]      e.g. /tmp/before/build/bin/gnn build/bin/gnn 3
#
# CASES (one per line: a kernel name, then its flags) may be set to time others; the default is the
# nine kernels the registry had before the renovation (98b8ccb), forward and forward + backward, on the
# default 10k-node graph (F = 128), and the node-major batched ones at 16 configs. A case one build
# cannot run prints n/a and, under it, that build's error; the script exits 1 when a case runs on neither.
# THREADS (default 2) is --threads for both.
set -euo pipefail
old=${1:?usage: bench_ab.sh OLD_GNN NEW_GNN [ROUNDS]}
new=${2:?usage: bench_ab.sh OLD_GNN NEW_GNN [ROUNDS]}
rounds=${3:-3}
threads=${THREADS:-2}
executable() { # a name on PATH, or a path, as a runnable file's path
  local b
  b=$(command -v "$1" || true)
  [ -n "$b" ] && [ -f "$b" ] && [ -x "$b" ] || { echo "bench_ab: $1 is not an executable" >&2; exit 2; }
  echo "$b"
}
old=$(executable "$old") || exit 2  # (one assignment each: a line of two takes the last one's status)
new=$(executable "$new") || exit 2
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_ab: ROUNDS must be a whole number >= 1, got '$rounds'" >&2; exit 2; }
[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "bench_ab: THREADS must be a whole number >= 1, got '$threads'" >&2; exit 2; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
default_cases=$(
  for k in gemm spmm-sum spmm-mean spmm-max segment-softmax gat-layer sage-layer sage-layer-fused graph-attention; do
    echo "$k"
    echo "$k --backward"
  done
  echo "gemm --configs 16 --features 32"
  echo "spmm-mean --configs 16 --features 32"
  echo "spmm-mean --configs 16 --features 32 --backward"
  echo "sage-layer --configs 16 --features 32 --backward"
)
CASES=${CASES:-$default_cases}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# One run's median ms, or "ERR", its exit status and its last line of error when it gave none.
ms() {
  local out v rc=0
  out=$("$@" --threads "$threads" --json 2>"$err") || rc=$?
  v=$(sed -n 's/.*"median_ms": *\([0-9.eE+-]*\).*/\1/p' <<<"$out")
  if [ -n "$v" ]; then echo "$v"; else echo "ERR exit $rc: $(tail -n 1 "$err")"; fi
}

failed=0
printf '%-58s %10s %10s %9s\n' "case ($threads threads, median of $rounds rounds)" "old ms" "new ms" "new/old"
while IFS= read -r c; do
  [ -z "$c" ] && continue
  a=() b=()
  for ((r = 0; r < rounds; r++)); do
    # shellcheck disable=SC2086  # the case's flags split into words
    if ((r % 2 == 0)); then
      a+=("$(ms "$old" bench kernel $c)") b+=("$(ms "$new" bench kernel $c)")
    else
      b+=("$(ms "$new" bench kernel $c)") a+=("$(ms "$old" bench kernel $c)")
    fi
  done
  fa=$(printf '%s\n' "${a[@]}" | grep -m 1 '^ERR' || true) fb=$(printf '%s\n' "${b[@]}" | grep -m 1 '^ERR' || true)
  if [ -n "$fa" ] || [ -n "$fb" ]; then
    printf '%-58s %10s %10s %9s\n' "$c" n/a n/a n/a
    [ -n "$fa" ] && echo "    old: ${fa#ERR }"
    [ -n "$fb" ] && echo "    new: ${fb#ERR }"
    [ -n "$fa" ] && [ -n "$fb" ] && failed=1
    continue
  fi
  ma=$(printf '%s\n' "${a[@]}" | median)
  mb=$(printf '%s\n' "${b[@]}" | median)
  printf '%-58s %10.3f %10.3f %9.2f\n' "$c" "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN {print b / a}')"
done <<<"$CASES"
exit $failed
