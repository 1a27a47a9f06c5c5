#!/usr/bin/env bash
# Trains the same recipe once per seed, the members of an ensemble, and lists the runs for gnn eval and
# gnn predict (--runs FILE):
#
#   scripts/train_seeds.sh OUT 1,2,3 --model layout-tgraph --data DIR [more gnn train flags]
#   build/bin/gnn eval --runs OUT/runs.txt --data DIR
#   build/bin/gnn predict --runs OUT/runs.txt --data DIR --out submission.csv
#
# Seed S trains into OUT/seed-S, always with --resume: a run that is already there goes on with the same
# flags (a finished one returns at once), a new one starts, so the script run again after a kill goes on
# where it stopped. runs.txt lists the runs by absolute path. GNN names the binary (default: the
# checkout's build/bin/gnn).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/train_seeds.sh OUT SEEDS [gnn train flags]   (SEEDS: comma-separated, e.g. 1,2,3)" >&2
  exit 2
fi
out=$1 seeds=$2
shift 2
gnn=${GNN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin/gnn}
IFS=',' read -r -a list <<< "$seeds"
if [ ${#list[@]} -eq 0 ]; then
  echo "scripts/train_seeds.sh: no seeds in '$seeds'" >&2
  exit 2
fi
seen=","
for s in "${list[@]}"; do
  # (no leading zeros: gnn reads 01 as 1, so 01,1 would train one run twice under two names)
  if ! [[ $s =~ ^(0|[1-9][0-9]*)$ ]]; then
    echo "scripts/train_seeds.sh: seed '$s' is not a non-negative integer without leading zeros" >&2
    exit 2
  fi
  if [[ $seen == *",$s,"* ]]; then
    echo "scripts/train_seeds.sh: seed $s is listed twice (it would count twice in the ensemble)" >&2
    exit 2
  fi
  seen="$seen$s,"
done
# (checked before OUT is made: a missing binary left an empty OUT behind)
command -v "$gnn" >/dev/null || { echo "scripts/train_seeds.sh: GNN '$gnn' is not an executable" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
runs=()
for s in "${list[@]}"; do
  run="$out/seed-$s"
  echo "== seed $s: $run" >&2
  "$gnn" train "$@" --seed "$s" --out "$run" --resume
  runs+=("$run")
done
printf '%s\n' "${runs[@]}" > "$out/runs.txt.tmp"
mv "$out/runs.txt.tmp" "$out/runs.txt"
echo "wrote $out/runs.txt: ${#runs[@]} runs; gnn eval --runs $out/runs.txt --data DIR scores the ensemble" >&2
