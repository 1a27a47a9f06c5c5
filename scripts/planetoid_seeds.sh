#!/usr/bin/env bash
# Mean and spread of `gnn planetoid` test accuracy over seeds, for the closing-note comparison with the
# published numbers.
# Usage: scripts/planetoid_seeds.sh GNN DATA.npz MODEL [SEEDS=10] [more gnn planetoid flags]
# A run that fails stops the script with its error (no summary of fewer seeds than asked for).
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '4p' "$0" | sed 's/^# //' >&2
  exit 2
fi
gnn=$1 data=$2 model=$3 seeds=${4:-10}
shift $(($# < 4 ? $# : 4))
if ! [[ $seeds =~ ^[1-9][0-9]*$ ]]; then
  echo "planetoid_seeds: SEEDS must be a whole number >= 1, got '$seeds'" >&2
  exit 2
fi
for a in "$@"; do
  [[ $a == --seed || $a == --seed=* ]] && { echo "planetoid_seeds: the script sets --seed (0 .. SEEDS-1)" >&2; exit 2; }
done
results=""
for ((s = 0; s < seeds; ++s)); do
  line=$("$gnn" planetoid --data "$data" --model "$model" --seed "$s" --json "$@" | tail -n 1) ||
    { echo "planetoid_seeds: seed $s failed" >&2; exit 1; }
  [[ $line =~ \"test_accuracy\":\ ([0-9.]+).*\"seconds\":\ ([0-9.]+) ]] ||
    { echo "planetoid_seeds: seed $s: no test_accuracy and seconds in its last line: $line" >&2; exit 1; }
  results+="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"$'\n'
done
awk -v m="$model" -v d="$(basename "$data")" 'NF == 2 { a[++n] = $1; s += $1; t += $2 }
  END { mean = s / n; for (i = 1; i <= n; ++i) v += (a[i] - mean) ^ 2;
        min = a[1]; max = a[1]; for (i = 1; i <= n; ++i) { if (a[i] < min) min = a[i]; if (a[i] > max) max = a[i] }
        sd = n > 1 ? sprintf("%.2f", 100 * sqrt(v / (n - 1))) : "n/a (one seed)"
        printf "%s %s: test accuracy over %d seeds: mean %.2f%%, std %s, min %.1f, max %.1f; %.1f s per run\n",
               d, m, n, 100 * mean, sd, 100 * min, 100 * max, t / n }' <<<"$results"
