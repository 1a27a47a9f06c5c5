#!/usr/bin/env bash
# The winners' layout models, gnn's recipe against their own code (bench/peers/winners.py), on one file, in
# the same run: configs/s of whole training steps, one graph per optimiser step, and peak memory.
#
#   usage: scripts/bench_winners.sh FILE.npz tgraph|sage6|gin6 [STEPS]
#          scripts/bench_winners.sh TILE_DIR tile6 [STEPS]
#
# gnn: `gnn train --model layout-tgraph|layout-sage-6th|layout-gin-6th --batch-graphs 1 --accumulate 1
# --configs C --epochs STEPS` on a tree holding FILE alone as its train split (one graph, so an epoch is one
# step); configs/s is the median over the epochs after the first, from RUN/metrics.jsonl. Theirs: winners.py
# with as many steps, the median after the first. C is 64 for tgraph, 80 for the 6th place's models.
# tile6: the 6th place's tile model on a folder of tile files (its train split): gnn's `tile-gat-6th --join
# late --heads 1 --listmle-order slowest` (the published function), 32 kernels x 64 configs per step, for
# STEPS epochs (an epoch is every kernel once), configs/s the median over the epochs after the first; theirs
# STEPS steps of 32 kernels, the median after the first.
# Environment: DEVICE (cpu | cuda, default cpu), THREADS (default 2), ORIGINALS (the folder holding the two
# clones, default /tmp/originals), PYTHON (one with torch and PyG, default python3), GNN (default
# build/bin/gnn), AMP (the originals' precisions, a comma list for winners.py --amp; default none on the
# CPU; on the GPU none plus the one they trained with: bf16 for tgraph, fp16 for the 6th place), PROFILE
# (1: after the timed runs, gnn's step again under `gnn train --profile`, 4 steps, and its table).
# GNN_FLAGS: more flags for gnn's side, e.g. "--matmul-precision bf16" (with AMP=bf16, their forward under
# torch's CPU bf16 autocast: each side in bf16 products).
# ROUNDS (default 1): both sides that many times, alternating (this VM's speed drifts over minutes), then
# each round's ratio and the medians.
# Prints one line per run: who, precision, configs/s, step ms, peak memory.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 5,6p "$0" >&2; exit 2; }
file=$1 model=$2 steps=${3:-12} rounds=${ROUNDS:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
gnn=${GNN:-$here/build/bin/gnn} py=${PYTHON:-python3} dev=${DEVICE:-cpu} threads=${THREADS:-2}
orig=${ORIGINALS:-/tmp/originals}
kind=layout flags=(--batch-graphs 1 --accumulate 1)
case $model in
  tgraph) recipe=layout-tgraph configs=64 theirs=bf16 ;;
  sage6) recipe=layout-sage-6th configs=80 theirs=fp16 ;;
  gin6) recipe=layout-gin-6th configs=80 theirs=fp16 ;;
  tile6) recipe=tile-gat-6th configs=64 theirs=fp16 kind=tile
    flags=(--batch-graphs 32 --accumulate 1 --join late --heads 1 --listmle-order slowest) ;;
  *) echo "bench_winners.sh: model '$model': give tgraph, sage6, gin6 or tile6" >&2; exit 2 ;;
esac
if [ $kind = tile ]; then
  [ -d "$file" ] || { echo "bench_winners.sh: $file: no such folder of tile files" >&2; exit 2; }
else
  [ -f "$file" ] || { echo "bench_winners.sh: $file: no such file" >&2; exit 2; }
fi
[ -x "$gnn" ] || { echo "bench_winners.sh: build gnn first ($gnn)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_winners.sh: ROUNDS '$rounds': give a whole number >= 1" >&2; exit 2; }
amp=${AMP:-none}
[ "$dev" = cuda ] && amp=${AMP:-none,$theirs}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $kind = tile ]; then
  mkdir -p "$tmp/data/npz/tile/xla" && ln -s "$(cd "$file" && pwd)" "$tmp/data/npz/tile/xla/train"
else
  mkdir -p "$tmp/data/npz/layout/xla/default/train"
  ln -s "$(cd "$(dirname "$file")" && pwd)/$(basename "$file")" "$tmp/data/npz/layout/xla/default/train/"
fi
read -r -a extra <<<"${GNN_FLAGS:-}"
precision=fp32
[[ " ${GNN_FLAGS:-} " =~ " --matmul-precision"[=\ ]"bf16 " ]] && precision=bf16
gnn_side() {
  rm -rf "$tmp/run"
  "$gnn" train --model "$recipe" --data "$tmp/data" --out "$tmp/run" "${flags[@]}" "${extra[@]}" \
    --configs "$configs" --epochs "$steps" --threads "$threads" --device "$dev" --progress lines >"$tmp/gnn.log"
  "$py" - "$tmp/run/metrics.jsonl" "$(tail -n 1 "$tmp/gnn.log")" "$recipe" "$(basename "$file")" "$tmp/gnn.rates" \
    "$precision" <<'EOF'
import json, statistics, sys
metrics, last, recipe, name, rates_file, precision = sys.argv[1:7]
rows = [json.loads(l) for l in open(metrics) if l.strip()]
rates = [r["configs_per_s"] for r in rows if "configs_per_s" in r]
rate = statistics.median(rates[1:] or rates)
end = json.loads(last)
mem = (f"peak device tensors {end['peak_device_mb']:.0f} MB" if "peak_device_mb" in end
       else f"peak tensors {end['peak_tensor_mb']:.0f} MB")
print(f"{name:28s} gnn {recipe:16s} {precision:6s} {rate:9.1f} configs/s  {mem}")
open(rates_file, "a").write(f"{rate}\n")
EOF
}
cat >"$tmp/row.py" <<'EOF'
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    where = "GPU" if "peak_gpu_mb" in r else "RSS"
    mem = r.get("peak_gpu_mb", r["peak_rss_mb"])
    print(f"{sys.argv[1]:28s} theirs {r['model']:13s} {r['amp']:6s} {r['configs_per_s']:9.1f} configs/s  "
          f"step {r['step_ms_median']:.1f} ms (batch {r['batch_ms_median']:.1f})  peak {mem:.0f} MB ({where})")
    open(sys.argv[2], "a").write(f"{r['configs_per_s']}\n")
EOF
theirs_side() {
  "$py" "$here/bench/peers/winners.py" --originals "$orig" --data "$file" --model "$model" --steps "$steps" \
    --threads "$threads" --device "$dev" --amp "$amp" 2>"$tmp/theirs.log" >"$tmp/theirs.jsonl" ||
    { tail -n 20 "$tmp/theirs.log" >&2; exit 1; }
  "$py" "$tmp/row.py" "$(basename "$file")" "$tmp/theirs.rates" <"$tmp/theirs.jsonl"
}
for ((round = 1; round <= rounds; ++round)); do
  [ "$rounds" = 1 ] || echo "round $round of $rounds"
  gnn_side
  theirs_side
done
# Several rounds: each round's ratio (gnn against their first precision in that round) and the medians.
if [ "$rounds" -gt 1 ]; then
  "$py" - "$tmp/gnn.rates" "$tmp/theirs.rates" "$amp" <<'EOF'
import statistics, sys
gnn = [float(l) for l in open(sys.argv[1])]
theirs = [float(l) for l in open(sys.argv[2])]
first = theirs[::len(theirs) // len(gnn)]  # one line per precision each round
ratios = [g / t for g, t in zip(gnn, first)]
print(f"gnn {statistics.median(gnn):.1f} : theirs ({sys.argv[3].split(',')[0]}) {statistics.median(first):.1f} "
      f"configs/s, medians of {len(gnn)} rounds; ratio per round "
      + " ".join(f"{r:.2f}x" for r in ratios) + f", median {statistics.median(ratios):.2f}x")
EOF
fi
if [ "${PROFILE:-0}" = 1 ]; then
  "$gnn" train --model "$recipe" --data "$tmp/data" --out "$tmp/prof" "${flags[@]}" "${extra[@]}" \
    --configs "$configs" --epochs 4 --threads "$threads" --device "$dev" --progress lines --profile |
    sed -n '/^profile:/,/GEMM:/p'
fi
