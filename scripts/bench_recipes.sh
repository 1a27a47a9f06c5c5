#!/usr/bin/env bash
# Throughput and memory of every layout recipe at its own defaults on large generated programs: configs/s
# of whole training steps (config sampling, batch assembly, forward, loss, backward, optimiser) and the
# peak of live tensors and of the process's resident memory.
#
#   usage: scripts/bench_recipes.sh [NODES] [EPOCHS] [THREADS] ["RECIPE [FLAGS...]"...]
#
# The data: `gnn synth` writes GRAPHS (default 2) train programs of NODES nodes (default 10000) with 128
# configs each and the real configurable share (2%); there is no valid split, so nothing but training is
# timed. A recipe may carry flags ("layout-resmodel --segment 5000"), given to its run after its defaults.
# Each recipe trains EPOCHS epochs (default 4) with its own defaults; a step holds at most the graphs an
# epoch lists (GRAPHS times --graph-repeats), so a recipe whose default batch holds more graphs than GRAPHS
# gets GRAPHS, except layout-sage-2nd: its default lists each graph 100 times an epoch (its original's
# oversampling), and it runs with --graph-repeats ceil(10 / GRAPHS) here, so an epoch is about one step of
# its default 10 slates. configs/s is the median over the epochs after the first, from
# RUN/metrics.jsonl. Memory: peak_tensor_mb (gnn's peak of live tensors) and the peak RSS that
# /usr/bin/time reports, or "-" without it. RECIPES defaults to every layout recipe of `gnn models`.
set -euo pipefail
nodes=${1:-10000}
epochs=${2:-4}
threads=${3:-2}
shift $(($# < 3 ? $# : 3))
here=$(cd "$(dirname "$0")/.." && pwd)
gnn=${GNN:-$here/build/bin/gnn}
[ -x "$gnn" ] || { echo "bench_recipes.sh: build gnn first ($gnn)" >&2; exit 1; }
recipes=("$@")
if [ ${#recipes[@]} -eq 0 ]; then
  mapfile -t recipes < <("$gnn" models | awk '$1 ~ /^layout-/ {print $1}')
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gnn" synth --collection layout --out "$tmp/data" --split train --graphs "${GRAPHS:-2}" --nodes "$nodes" --configs 128 \
  --seed 41 >/dev/null
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f %M -o "$tmp/rss")
printf '%-18s %12s %16s %12s %8s\n' "recipe" "configs/s" "peak tensors MB" "peak RSS MB" "train s"
for spec in "${recipes[@]}"; do
  read -r -a words <<<"$spec"
  r=$spec
  extra=()
  [ "${words[0]}" = layout-sage-2nd ] && extra=(--graph-repeats $(((10 + ${GRAPHS:-2} - 1) / ${GRAPHS:-2})))
  run=$tmp/run-$(echo "$spec" | tr -c 'A-Za-z0-9.-' '_')
  rm -f "$tmp/rss"
  line=$("${timer[@]}" "$gnn" train --model "${words[0]}" --data "$tmp/data" --out "$run" --epochs "$epochs" --seed 1 \
    --threads "$threads" --progress lines "${extra[@]}" "${words[@]:1}" | tail -n 1)
  rss=-
  [ -f "$tmp/rss" ] && rss=$(($(tail -n 1 "$tmp/rss") / 1024))
  python3 - "$r" "$run/metrics.jsonl" "$line" "$rss" <<'EOF'
import json, statistics, sys
name, metrics, last, rss = sys.argv[1:5]
rows = [json.loads(l) for l in open(metrics) if l.strip()]
rates = [r["configs_per_s"] for r in rows if "configs_per_s" in r][1:] or [rows[-1]["configs_per_s"]]
end = json.loads(last)
print("%-18s %12.0f %16.0f %12s %8.1f" % (name, statistics.median(rates), end["peak_tensor_mb"], rss,
                                          end["train_seconds"]))
EOF
done
