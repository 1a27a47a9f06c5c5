#!/usr/bin/env bash
# Trains recipes on the same generated data with several seeds and scores each on the test split (the
# generator keeps test runtimes), so recipes are compared on data none of them trained on. Layout
# recipes are scored by Kendall tau, tile recipes by 1 - slowdown@5 (eval's "score").
#
#   scripts/compare_recipes.sh DATA "RECIPE [FLAGS...]" ["RECIPE [FLAGS...]" ...]
#
# DATA is a dataset folder with the recipes' collection, e.g. the one `gnn demo --out D` keeps in D/data.
# Environment: SEEDS (default "1 2 3"), EPOCHS (default 30), COMMON (flags given to every run; default
# the demo's layout settings: log1p node features, lr 0.003, 2 graphs per step), OUT (default a temporary
# folder), GNN (default build/bin/gnn), METRIC (the field of eval's summary to report, default score;
# mre for regressions), CHECKPOINT (eval's --checkpoint, default auto: the best valid tau; last for the
# final weights). Prints one line per recipe: mean +- sample sd of the test metric over the seeds, each
# seed's value, and the training seconds. An epoch is each recipe's own: layout-sage-2nd lists every graph
# 100 times an epoch by default (its original's oversampling), so give its spec --graph-repeats 1 (or
# fewer epochs) to compare it epoch for epoch with the others.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gnn=${GNN:-$root/build/bin/gnn}
[ $# -ge 2 ] || { echo "usage: $0 DATA \"RECIPE [FLAGS...]\" ..." >&2; exit 2; }
data=$1
shift
seeds=${SEEDS:-1 2 3}
epochs=${EPOCHS:-30}
common=${COMMON:---node-transform log1p --lr 0.003 --batch-graphs 2}
out=${OUT:-$(mktemp -d)}
metric=${METRIC:-score}
checkpoint=${CHECKPOINT:-auto}
printf '%-60s %-18s %-26s %s\n' "recipe and flags" "test $metric" "per seed" "train s"
for spec in "$@"; do
  read -r -a words <<<"$spec"
  model=${words[0]}
  name=$(echo "$spec" | tr -c 'A-Za-z0-9.-' '_')
  taus=() secs=0
  for s in $seeds; do
    run=$out/$name-seed$s
    rm -rf "$run"
    # shellcheck disable=SC2086  # COMMON and the spec's flags are word lists
    line=$("$gnn" train --model "$model" --data "$data" --out "$run" --epochs "$epochs" --seed "$s" --progress lines \
      $common "${words[@]:1}" | tail -n 1)
    secs=$(python3 -c "import json,sys; print($secs + json.loads(sys.argv[1])['train_seconds'])" "$line")
    tau=$("$gnn" eval --run "$run" --checkpoint "$checkpoint" --data "$data" --split test 2>/dev/null | tail -n 1 |
      python3 -c "import json,sys; print('%.3f' % json.loads(sys.stdin.read())[sys.argv[1]])" "$metric")
    taus+=("$tau")
  done
  python3 - "$spec" "$secs" "${taus[@]}" <<'EOF'
import statistics, sys
spec, secs, taus = sys.argv[1], float(sys.argv[2]), [float(t) for t in sys.argv[3:]]
sd = statistics.stdev(taus) if len(taus) > 1 else 0.0
print('%-60s %.3f +- %.3f      %-26s %.0f' % (spec, statistics.mean(taus), sd, ' '.join('%.3f' % t for t in taus), secs))
EOF
done
