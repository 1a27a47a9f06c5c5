#!/usr/bin/env bash
# Mean and spread of `gnn planetoid` test accuracy over seeds, for the closing-note comparison with the
# published numbers. Usage: scripts/planetoid_seeds.sh GNN DATA.npz MODEL [SEEDS=10] [more gnn planetoid flags]
set -euo pipefail
gnn=$1 data=$2 model=$3 seeds=${4:-10}
shift $(($# < 4 ? $# : 4))
for ((s = 0; s < seeds; ++s)); do
  "$gnn" planetoid --data "$data" --model "$model" --seed "$s" --json "$@" | tail -n 1
done | sed -E 's/.*"test_accuracy": ([0-9.]+).*"seconds": ([0-9.]+).*/\1 \2/' |
  awk -v m="$model" -v d="$(basename "$data")" '{ a[NR] = $1; s += $1; t += $2 }
    END { mean = s / NR; for (i = 1; i <= NR; ++i) v += (a[i] - mean) ^ 2;
          min = a[1]; max = a[1]; for (i = 1; i <= NR; ++i) { if (a[i] < min) min = a[i]; if (a[i] > max) max = a[i] }
          printf "%s %s: test accuracy over %d seeds: mean %.2f%%, std %.2f, min %.1f, max %.1f; %.1f s per run\n",
                 d, m, NR, 100 * mean, 100 * sqrt(v / (NR - 1)), 100 * min, 100 * max, t / NR }'
