#!/usr/bin/env bash
# The layout-resmodel training step end to end, gnn against the PyTorch and PyG peers of
# bench/peers/layout_step.py, on one layout program: configs/s of whole steps (config sampling, batch
# assembly, forward, ListMLE, backward, Adam) and each process's peak resident memory.
#
#   usage: scripts/bench_layout_step.sh FILE.npz CONFIGS [STEPS] [RUNS] [THREADS]
#
# FILE is linked as the only (train) graph of a temporary tree. Runs go round-robin
# (gnn shared, gnn plain, torch, pyg, gnn shared, ...) RUNS times (default 3) and the table shows
# the median of each. configs/s is C over the median step after the first of STEPS (default 20):
# gnn's from RUN/metrics.jsonl (one graph, so an epoch is one step; training time only, validation
# not counted), the peers' from their own clock around the same work. Memory: each
# process's peak RSS (MB), and what the steps themselves held ("step MB": gnn's peak of live tensors,
# peak_tensor_mb; a peer's peak RSS less its RSS before the first step). gnn runs
# --batch-graphs 1 --segment 0 (the whole graph), --share on and off. PYTHON (default python3)
# runs the peers; a peer whose import fails is shown as "-".
set -euo pipefail
file=${1:?usage: scripts/bench_layout_step.sh FILE.npz CONFIGS [STEPS] [RUNS] [THREADS]}
configs=${2:?configs per step}
steps=${3:-20}
runs=${4:-3}
threads=${5:-2}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
gnn=${GNN:-$here/build/bin/gnn}
[ -f "$file" ] || { echo "bench_layout_step.sh: no such file: $file" >&2; exit 1; }
[ -x "$gnn" ] || { echo "bench_layout_step.sh: build gnn first ($gnn)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for split in train; do  # no valid split: gnn validates nothing between the steps
  mkdir -p "$tmp/data/npz/layout/xla/default/$split"
  ln -s "$(readlink -f "$file")" "$tmp/data/npz/layout/xla/default/$split/program.npz"
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0 || a[1] == "-") print "-"; else print a[int((NR + 1) / 2)]}'; }
run() {  # name command...: appends "configs_per_s peak_rss_mb step_mb" to $tmp/$name
  local name=$1
  shift
  if /usr/bin/time -f "%M" -o "$tmp/rss" "$@" >"$tmp/out" 2>"$tmp/err"; then
    local cps
    if [ -f "$tmp/run/metrics.jsonl" ]; then  # gnn: one epoch is one step; the median after the first
      cps=$(tail -n +2 "$tmp/run/metrics.jsonl" | grep -o '"configs_per_s": [0-9.e+-]*' | awk '{print $2}' | median)
    else
      cps=$(grep -o '"configs_per_s": [0-9.e+-]*' "$tmp/out" | tail -1 | awk '{print $2}')
    fi
    local step
    step=$(grep -o '"\(peak_tensor_mb\|step_mb\)": [0-9.e+-]*' "$tmp/out" | tail -1 | awk '{printf "%.0f", $2}')
    echo "$cps $(($(tail -1 "$tmp/rss") / 1024)) ${step:--}" >>"$tmp/$name"
  else
    echo "- - -" >>"$tmp/$name"
    echo "($name failed: $(tail -1 "$tmp/err"))" >&2
  fi
}

for ((r = 0; r < runs; ++r)); do
  for share in on off; do
    rm -rf "$tmp/run"
    run "gnn-share-$share" "$gnn" train --model layout-resmodel --data "$tmp/data" --out "$tmp/run" --epochs "$steps" \
      --batch-graphs 1 --configs "$configs" --segment 0 --share "$share" --threads "$threads" --progress lines
  done
  rm -rf "$tmp/run"
  for impl in torch pyg; do
    run "$impl" "$py" "$here/bench/peers/layout_step.py" --data "$tmp/data" --configs "$configs" --steps "$steps" \
      --threads "$threads" --impl "$impl"
  done
done

nodes=$("$gnn" inspect "$file" --json 2>/dev/null | grep -o '"nodes": [0-9]*' | head -1 | awk '{print $2}')
echo "layout-resmodel step, $(basename "$file") (${nodes:-?} nodes), $configs configs/step, $steps steps, $threads threads, median of $runs"
printf "%-16s %12s %12s %10s %10s\n" impl configs/s "vs torch" "peak RSS" "step MB"
torch_cps=$(cut -d' ' -f1 "$tmp/torch" | median)
for name in gnn-share-on gnn-share-off torch pyg; do
  cps=$(cut -d' ' -f1 "$tmp/$name" | median)
  mb=$(cut -d' ' -f2 "$tmp/$name" | median)
  step=$(cut -d' ' -f3 "$tmp/$name" | median)
  ratio=$(awk -v a="$cps" -v b="$torch_cps" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2fx", a / b }')
  [ "$cps" = "-" ] || cps=$(printf "%.0f" "$cps")
  printf "%-16s %12s %12s %10s %10s\n" "$name" "$cps" "$ratio" "$mb" "$step"
done
