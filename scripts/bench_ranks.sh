#!/usr/bin/env bash
# Data-parallel training against threads on one machine: `mpirun -np R gnn train --threads T/R` against
# `gnn train --threads T` (same recipe, data, seed and global batch), RUNS rounds in turn. Prints each
# run's configs/s (training time from the summary line: batch building, forward, backward, the sums
# over ranks, the optimiser; validation not counted), the medians and the per-round ratio, and the
# data-parallel runs' bytes summed per step, seconds in the sums per step and of which the gradient sum.
#
#   usage: scripts/bench_ranks.sh MODEL [RANKS] [THREADS] [RUNS] [-- TRAIN FLAGS...]
#
# The data is generated once in a temporary tree: layout models get 8 programs of 4000 nodes x 100
# configs (--batch-graphs 4 --configs 32 --epochs 12 unless given), tile models 64 kernels x 200 configs
# (--batch-graphs 8 --epochs 4). MPIRUN (default: mpirun, with --allow-run-as-root as root) starts the job.
set -euo pipefail
model=${1:?usage: scripts/bench_ranks.sh MODEL [RANKS] [THREADS] [RUNS] [-- TRAIN FLAGS...]}
shift
ranks=2 threads=2 runs=5
for v in ranks threads runs; do
  if [ $# -gt 0 ] && [ "$1" != "--" ]; then printf -v "$v" '%s' "$1"; shift; fi
done
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")/.." && pwd)
gnn=${GNN:-$here/build/bin/gnn}
py=${PYTHON:-python3}
[ -x "$gnn" ] || { echo "bench_ranks.sh: build gnn first ($gnn)" >&2; exit 1; }
mpirun=${MPIRUN:-mpirun --oversubscribe $([ "$(id -u)" -eq 0 ] && echo --allow-run-as-root)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ $model == layout* ]]; then
  "$gnn" synth --collection layout --out "$tmp/data" --graphs 8 --nodes 4000 --configs 100 --seed 7 --split train >/dev/null
  flags=(--batch-graphs 4 --configs 32 --epochs 12)
else
  "$gnn" synth --collection tile --out "$tmp/data" --graphs 64 --configs 200 --seed 8 --split train >/dev/null
  flags=(--batch-graphs 8 --epochs 4)
fi
flags+=("$@")
summary() { tail -n 1 "$1"; }
for i in $(seq "$runs"); do
  rm -rf "$tmp/one" "$tmp/many"
  "$gnn" train --model "$model" --data "$tmp/data" --out "$tmp/one" --threads "$threads" "${flags[@]}" \
    >"$tmp/one.out" 2>/dev/null
  $mpirun -np "$ranks" "$gnn" train --model "$model" --data "$tmp/data" --out "$tmp/many" \
    --threads $((threads / ranks > 0 ? threads / ranks : 1)) "${flags[@]}" >"$tmp/many.out" 2>/dev/null
  summary "$tmp/one.out" >>"$tmp/one.jsonl"
  summary "$tmp/many.out" >>"$tmp/many.jsonl"
done
"$py" - "$tmp" "$model" "$ranks" "$threads" <<'EOF'
import json, statistics as st, sys
tmp, model, R, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
one = [json.loads(l) for l in open(tmp + "/one.jsonl")]
many = [json.loads(l) for l in open(tmp + "/many.jsonl")]
a = [m["configs_per_s"] for m in many]
b = [o["configs_per_s"] for o in one]
r = [x / y for x, y in zip(a, b)]
print(f"{model}: {R} ranks x {max(1, T // R)} thread(s) against 1 rank x {T} threads, {len(r)} rounds in turn")
print(f"  configs/s {R}x{max(1, T // R)}: " + " ".join(f"{x:.0f}" for x in a) + f"  median {st.median(a):.0f}")
print(f"  configs/s 1x{T}: " + " ".join(f"{x:.0f}" for x in b) + f"  median {st.median(b):.0f}")
print("  ratio per round: " + " ".join(f"{x:.2f}" for x in r) + f"  median {st.median(r):.2f}")
print(f"  summed per step: {many[0]['allreduce_bytes_per_step']} bytes; "
      f"seconds in the sums per step (median) {st.median(m['sync_seconds_per_step'] for m in many):.6f}, "
      f"of which the gradients {st.median(m['grad_sum_seconds_per_step'] for m in many):.6f}; "
      f"step {st.median(m['train_seconds'] / m['steps'] for m in many):.6f} s")
EOF
