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
# DEVICE=cuda runs everything on GPU 0: gnn with --device cuda, once more with --cuda-graphs 1 (the
# step replayed from CUDA graphs: "gnn-graphs"), the peers with --device cuda (each step synchronised);
# "step MB" is then device memory in MB of 1e6 bytes (gnn: peak_device_mb; gnn-graphs: that plus
# cuda_graphs_mb, its graphs' own pools, an upper bound as the eager warm-up steps' peak and the graphs
# did not hold memory at once; the peers: torch.cuda.max_memory_allocated).
set -euo pipefail
file=${1:?usage: scripts/bench_layout_step.sh FILE.npz CONFIGS [STEPS] [RUNS] [THREADS]}
configs=${2:?configs per step}
steps=${3:-20}
runs=${4:-3}
threads=${5:-2}
py=${PYTHON:-python3}
device=${DEVICE:-cpu}
case $device in cpu | cuda) ;; *) echo "bench_layout_step.sh: DEVICE must be cpu or cuda, got '$device'" >&2; exit 2 ;; esac
# (STEPS >= 2: the median is over the steps after the first)
for arg in "CONFIGS $configs 2" "STEPS $steps 2" "RUNS $runs 1" "THREADS $threads 1"; do
  read -r name value least <<<"$arg"
  [[ $value =~ ^[0-9]+$ ]] && [ "$value" -ge "$least" ] ||
    { echo "bench_layout_step.sh: $name must be a whole number >= $least, got '$value'" >&2; exit 2; }
done
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
      cps=$(tail -n +2 "$tmp/run/metrics.jsonl" | { grep -o '"configs_per_s": [0-9.e+-]*' || true; } |
        awk '{print $2}' | median)
    else
      cps=$({ grep -o '"configs_per_s": [0-9.e+-]*' "$tmp/out" || true; } | tail -1 | awk '{print $2}')
    fi
    cps=${cps:--}
    local step
    local mem='peak_tensor_mb\|step_mb'
    [ "$device" = cuda ] && mem='peak_device_mb\|cuda_graphs_mb\|step_mb'  # (gnn-graphs: both pools, summed)
    step=$(tail -1 "$tmp/out" | { grep -o "\"\($mem\)\": [0-9.e+-]*" || true; } |
      awk '{s += $2} END {if (NR) printf "%.0f", s}')
    echo "$cps $(($(tail -1 "$tmp/rss") / 1024)) ${step:--}" >>"$tmp/$name"
  else
    echo "- - -" >>"$tmp/$name"
    echo "($name failed: $(tail -1 "$tmp/err"))" >&2
    [[ $name == gnn* ]] && gnn_failed=1  # (a peer may be absent; gnn failing is the script failing)
  fi
  return 0
}
gnn_failed=0

gnn_runs=(gnn-share-on gnn-share-off)
[ "$device" = cuda ] && gnn_runs+=(gnn-graphs)
for ((r = 0; r < runs; ++r)); do
  for name in "${gnn_runs[@]}"; do
    rm -rf "$tmp/run"
    extra=(--share "${name#gnn-share-}")
    [ "$name" = gnn-graphs ] && extra=(--share on --cuda-graphs 1)
    run "$name" "$gnn" train --model layout-resmodel --data "$tmp/data" --out "$tmp/run" --epochs "$steps" \
      --batch-graphs 1 --configs "$configs" --segment 0 "${extra[@]}" --device "$device" --threads "$threads" \
      --progress lines
  done
  rm -rf "$tmp/run"
  for impl in torch pyg; do
    run "$impl" "$py" "$here/bench/peers/layout_step.py" --data "$tmp/data" --configs "$configs" --steps "$steps" \
      --threads "$threads" --impl "$impl" --device "$device"
  done
done

nodes=$("$gnn" inspect "$file" --json 2>/dev/null | grep -o '"nodes": [0-9]*' | head -1 | awk '{print $2}' || true)
echo "layout-resmodel step, $(basename "$file") (${nodes:-?} nodes), $configs configs/step, $steps steps, $threads threads, $device, median of $runs"
printf "%-16s %12s %12s %10s %10s\n" impl configs/s "vs torch" "peak RSS" "step MB"
torch_cps=$(cut -d' ' -f1 "$tmp/torch" | median)
for name in "${gnn_runs[@]}" torch pyg; do
  cps=$(cut -d' ' -f1 "$tmp/$name" | median)
  mb=$(cut -d' ' -f2 "$tmp/$name" | median)
  step=$(cut -d' ' -f3 "$tmp/$name" | median)
  ratio=$(awk -v a="$cps" -v b="$torch_cps" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2fx", a / b }')
  [ "$cps" = "-" ] || cps=$(printf "%.0f" "$cps")
  printf "%-16s %12s %12s %10s %10s\n" "$name" "$cps" "$ratio" "$mb" "$step"
done
[ "$gnn_failed" = 0 ] || { echo "bench_layout_step.sh: a gnn run failed (above)" >&2; exit 1; }
