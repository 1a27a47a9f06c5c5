#!/usr/bin/env bash
# Everything the CUDA backend needs from a machine with a GPU, in one run (issue 8's verification and
# benchmarks): build, the whole test suite (the GPU tests run instead of skipping), compute-sanitizer
# memcheck and racecheck on the CUDA kernel and op tests, SpMM against the copy floor and cuSPARSE, the
# SAGE and GAT layers against PyG, GCN/GAT/SAGE on Cora, and layout training configs/s on the GPU
# against the host. Usage: scripts/gpu_check.sh [BUILD_DIR=build] [SHARED_DATA=../shared/data]
# Python, PyTorch and PyG are used by the peer scripts only, for comparison.
set -uo pipefail
build=${1:-build} data=${2:-../shared/data}
gnn=$build/bin/gnn
step() { printf '\n=== %s\n' "$*"; }
fail=0
run() { "$@" || { echo "FAILED ($?): $*"; fail=1; }; }

step "build"
cmake -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j"$(nproc)" 2>&1 | tail -n 3 || exit 1
run "$gnn" info

step "tests"
run ctest --test-dir "$build" -j4 --output-on-failure

step "compute-sanitizer"
for tool in memcheck racecheck; do
  run compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/bin/gnn_tests" -tc='cuda*'
done

step "SpMM against the copy floor and cuSPARSE"
run python3 bench/peers/cuda_spmm.py --gnn "$gnn"

step "CUDA graphs: launch-bound steps replayed as one graph, against the same steps launched one by one"
for k in "spmm-mean --backward" "gemm --backward"; do
  for n in 1000 10000; do
    for g in "" "--cuda-graph"; do
      run "$gnn" bench kernel $k --device cuda --nodes $n --edges $((2 * n)) --features 128 --repeat 200 $g --json
    done
  done
done

step "SAGE (composed and fused) and GAT layers against PyG"
run python3 bench/peers/cuda_layers.py --gnn "$gnn"

if [ -f "$data/planetoid/cora_planetoid.npz" ]; then
  step "Cora on the GPU"
  for m in gcn gat sage; do run "$gnn" planetoid --data "$data/planetoid/cora_planetoid.npz" --model "$m" --device cuda --json | tail -n 1; done
fi

step "layout training: configs/s on the GPU and on the host"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gnn" synth --collection layout --out "$tmp/data" --graphs 8 --nodes 5000 --configs 200 --seed 1 >/dev/null
for dev in cuda cpu; do
  run "$gnn" train --model layout-resmodel --data "$tmp/data" --out "$tmp/run-$dev" --epochs 20 --steps 20 --device "$dev" \
    --progress lines | tail -n 1
done
exit $fail
