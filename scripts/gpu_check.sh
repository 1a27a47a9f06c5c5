#!/usr/bin/env bash
# Everything the CUDA backend needs from a machine with a GPU (issue 8's verification and benchmarks),
# in phases that can run in one call or be split over several:
#   build      configure and build (Release)
#   tests      the whole suite: the GPU tests run instead of skipping
#   sanitize   compute-sanitizer memcheck and racecheck on the CUDA kernel and op tests
#   spmm       SpMM mean against the measured copy floor and cuSPARSE (bench/peers/cuda_spmm.py)
#   graphs     launch-bound steps replayed as one CUDA graph against the same steps launched one by one
#   layers     SAGE (composed and fused) and GAT layers against PyG (bench/peers/cuda_layers.py)
#   profile    one SAGE / GAT step at N = 100k, kernel by kernel, gnn's beside PyG's (bench/peers/cuda_profile.py, ncu)
#   attention  graph self-attention (fused kernels) against torch's SDPA on padded graphs (bench/peers/cuda_attention.py)
#   train      GCN/GAT/SAGE on Cora on the GPU; layout training configs/s on the GPU against the host
#   layout     the layout-resmodel step on the GPU (shared, plain, replayed from CUDA graphs) against its
#              PyTorch and PyG peers on the same GPU (scripts/bench_layout_step.sh with DEVICE=cuda): the
#              real program and a 10k-node generated one, 16 and 64 configs per step
#   winners    the winners' models on the GPU: layout-tgraph, layout-sage-6th, layout-gin-6th and tile-gat-6th
#              against their own code (bench/peers/winners.py, fp32 and the precision each trained with),
#              on the real unet3d program and a 10k-node generated one (scripts/bench_winners.sh, DEVICE=cuda),
#              each gnn step then profiled op by op (PROFILE=0 leaves that out);
#              needs ORIGINALS, the folder holding the two clones (winners.py's docstring), else it skips
#   dist       the data-parallel cases: the NCCL gradient sum on this GPU (one rank), and the mpirun
#              cases when mpirun is installed (they skip, saying so, when it is not)
#   loss       issue 48's open question, whether the loss should run on the device: a GPU step's phases
#              from gnn train --profile (its "loss" phase is the prediction down, the f64 loss and its
#              gradient up) for layout-tgraph, layout-resmodel, layout-sage-6th and a tile recipe, on
#              generated data and the real unet3d program (DEVICE=cpu runs the same on the host)
#   python     issue 50 on the GPU: the Python module's pytest suite with CUDA tensors and CuPy arrays
#              (python/tests/test_cuda.py runs on the device, its torch and CuPy cases included), then
#              gnn.torch's layers against PyG's on CUDA tensors (python -m gnn.bench --device cuda) on Cora
#              and a random graph; needs nanobind in PYTHON (default python3) when the build was configured
# Usage: scripts/gpu_check.sh [PHASE ...]   (no phase: all, in the order above)
# Environment: BUILD (build dir, default build), DATA (the shared data, default ../shared/data),
# LOGS (a folder: each phase's output is also written to LOGS/PHASE.log), CMAKE_ARGS (extra configure
# arguments, e.g. -DZLIB_INCLUDE_DIR=...), PHASE_TIMEOUT (seconds per phase, default 900), SANITIZE_TOOLS
# (default "memcheck racecheck"), ORIGINALS (for the winners phase, default /tmp/originals), TEST_REGEX and
# TEST_JOBS (the tests phase: only the ctest tests whose names match, e.g. "GPU|cuda"; jobs, default 4).
# Python, PyTorch and PyG are used by the peer scripts only, for comparison.
# Phase times on an H100 with 16 cores (sm_90 only): build 45 s, the GPU test cases alone 44 s, memcheck
# 40 s, racecheck 6 to 8 min (the fused SAGE reference case alone about 2 min), spmm 35 s, graphs 10 s,
# layers 60 s, attention 35 s, train 35 s. Ubuntu's newer GCC builds the tree as it is. On 2026-11-27 (H100):
# tests with TEST_REGEX="GPU|cuda" TEST_JOBS=8 106 s, memcheck alone 38 s, winners 106 s (without PROFILE's
# six profiled runs, added after), train 15 s, layout more than 225 s (its generated program was cut off).
# shellcheck disable=SC2317  # the phase functions run through bash -c
set -uo pipefail
build=${BUILD:-build} data=${DATA:-../shared/data} logs=${LOGS:-} limit=${PHASE_TIMEOUT:-900}
gnn=$build/bin/gnn
[ -d "$data" ] && data=$(cd "$data" && pwd)  # absolute: ctest runs each test in its own directory
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(build tests sanitize spmm graphs layers profile attention train layout winners dist loss python)
export build data gnn
fail=0

phase_build() {
  # (no CUDA emulator flavour here: it is for machines without a GPU)
  # shellcheck disable=SC2086
  cmake -B "$build" -DCMAKE_BUILD_TYPE=Release -DGNN_BUILD_CUDA_EMU=OFF ${CMAKE_ARGS:-} >/dev/null || return 1
  # (a failed build must fail the phase: the later phases would run an older binary left in the folder)
  local out
  if ! out=$(cmake --build "$build" -j"$(nproc)" 2>&1); then
    printf '%s\n' "$out" | grep -E -m 40 "error|Error"
    printf '%s\n' "$out" | tail -n 5
    echo "gpu_check: build: cmake --build $build failed" >&2
    return 1
  fi
  printf '%s\n' "$out" | tail -n 3
  "$gnn" info
}

phase_tests() {
  # shellcheck disable=SC2086
  GNN_SHARED_DATA=$data ctest --test-dir "$build" -j"${TEST_JOBS:-4}" --output-on-failure ${TEST_REGEX:+-R "$TEST_REGEX"}
}

phase_sanitize() {
  local tool r=0
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    GNN_SHARED_DATA=$data compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/bin/gnn_tests" -tc='cuda*' || r=1
  done
  return "$r"
}

phase_spmm() { python3 bench/peers/cuda_spmm.py --gnn "$gnn"; }

phase_dist() {
  "$gnn" info | grep -E "mpi_built|nccl_built|distributed"
  "$build/bin/gnn_tests" -tc='distributed*' 2>&1 | grep -E "TEST CASE|SKIP|passed|failed" | tail -n 20
  return "${PIPESTATUS[0]}"
}

phase_graphs() {
  local k n g r=0
  for k in "spmm-mean --backward" "gemm --backward" "sage-layer-fused --backward" "gat-layer --backward"; do
    for n in 1000 10000; do
      for g in "" "--cuda-graph"; do
        # shellcheck disable=SC2086
        "$gnn" bench kernel $k --device cuda --nodes $n --edges $((2 * n)) --features 128 --repeat 200 $g --json || r=1
      done
    done
  done
  return "$r"
}

phase_layers() { python3 bench/peers/cuda_layers.py --gnn "$gnn"; }

phase_profile() {
  local k r=0
  for k in sage-layer-fused sage-layer gat-layer; do
    python3 bench/peers/cuda_profile.py --gnn "$gnn" --kind "$k" || r=1
  done
  return "$r"
}

phase_attention() { python3 bench/peers/cuda_attention.py --gnn "$gnn"; }

phase_train() {
  local m dev r=0 tmp
  if [ -f "$data/planetoid/cora_planetoid.npz" ]; then
    for m in gcn gat sage; do
      "$gnn" planetoid --data "$data/planetoid/cora_planetoid.npz" --model "$m" --device cuda --json | tail -n 1 || r=1
    done
  else
    echo "Cora: skipped, no $data/planetoid/cora_planetoid.npz"
  fi
  tmp=$(mktemp -d)
  "$gnn" synth --collection layout --out "$tmp/data" --graphs 8 --nodes 5000 --configs 200 --seed 1 >/dev/null || r=1
  for dev in cuda cpu; do
    "$gnn" train --model layout-resmodel --data "$tmp/data" --out "$tmp/run-$dev" --epochs 20 --steps 20 --device "$dev" \
      --progress lines | tail -n 1 || r=1
  done
  rm -rf "$tmp"
  return "$r"
}

phase_layout() {
  local f c r=0 tmp
  tmp=$(mktemp -d)
  "$gnn" synth --collection layout --out "$tmp/gen" --graphs 1 --split train --nodes 10000 --configs 200 \
    --configurable-share 0.025 --seed 21 >/dev/null || r=1
  for f in "$data/tpugraphs/layout/xla/module_tuning_data_layout.npz" "$tmp"/gen/npz/layout/*/*/train/*.npz; do
    [ -f "$f" ] || { echo "layout: skipped, no $f"; continue; }
    for c in 16 64; do
      DEVICE=cuda GNN="$gnn" scripts/bench_layout_step.sh "$f" "$c" 20 3 || r=1
    done
  done
  rm -rf "$tmp"
  return "$r"
}

phase_winners() {
  local orig=${ORIGINALS:-/tmp/originals} f m r=0 tmp
  if [ ! -d "$orig/google_fast_or_slow" ] || [ ! -d "$orig/solution-predict-ai-model-runtime" ]; then
    echo "winners: skipped, no clones of the originals under $orig (bench/peers/winners.py says how)"
    return 0
  fi
  tmp=$(mktemp -d)
  "$gnn" synth --collection layout --out "$tmp/gen" --graphs 1 --split train --nodes 10000 --configs 200 \
    --configurable-share 0.025 --seed 21 >/dev/null || r=1
  for f in "$data/tpugraphs-release/npz/layout/xla/default/train/unet3d.npz" "$tmp"/gen/npz/layout/*/*/train/*.npz; do
    [ -f "$f" ] || { echo "winners: skipped, no $f"; continue; }
    for m in tgraph sage6 gin6; do
      DEVICE=cuda GNN="$gnn" ORIGINALS="$orig" THREADS=${THREADS:-8} PROFILE=${PROFILE:-1} \
        scripts/bench_winners.sh "$f" "$m" 12 || r=1
    done
  done
  # The 6th place's tile model on generated kernels of at least 64 configs (a full 32 x 64 step each side).
  "$gnn" synth --collection tile --out "$tmp/tile" --graphs 400 --split train --nodes 4 --nodes-max 60 \
    --configs 100 --min-configs 64 --seed 21 >/dev/null || r=1
  DEVICE=cuda GNN="$gnn" ORIGINALS="$orig" THREADS=${THREADS:-8} \
    scripts/bench_winners.sh "$tmp/tile/npz/tile/xla/train" tile6 6 || r=1
  rm -rf "$tmp"
  return "$r"
}

phase_loss() {
  local dev=${DEVICE:-cuda} m r=0 tmp unet="$data/tpugraphs-release/npz/layout/xla/default/train/unet3d.npz"
  tmp=$(mktemp -d)
  "$gnn" synth --collection layout --out "$tmp/gen" --graphs 8 --nodes 2000 --configs 200 --seed 1 >/dev/null || r=1
  "$gnn" synth --collection tile --out "$tmp/gen" --graphs 16 --nodes 60 --configs 200 --seed 1 >/dev/null || r=1
  if [ -f "$unet" ]; then
    mkdir -p "$tmp/unet/npz/layout/xla/default/train" && ln -s "$unet" "$tmp/unet/npz/layout/xla/default/train/"
  else
    echo "loss: no $unet, generated data only"
  fi
  for m in "layout-tgraph --configs 64" "layout-resmodel" "layout-sage-6th" "tile-earlyjoin-sage"; do
    for d in "$tmp/gen" "$tmp/unet"; do
      [ -d "$d" ] || continue
      [ "$d" = "$tmp/unet" ] && [ "${m%% *}" = tile-earlyjoin-sage ] && continue
      echo "--- $m on ${d##*/} ($dev)"
      # shellcheck disable=SC2086  # $m holds the model and its flags
      "$gnn" train --model $m --data "$d" --out "$tmp/run" --epochs 6 --device "$dev" --profile --progress lines |
        grep -E "^profile:|^  (batch|prepare|forward|loss|backward|update) " || r=1
      rm -rf "$tmp/run"
    done
  done
  rm -rf "$tmp"
  return "$r"
}

phase_python() {
  local py=${PYTHON:-python3} r=0 cora="$data/planetoid/cora_planetoid.npz"
  if [ ! -f "$build/python/gnn/__init__.py" ]; then
    echo "python: $build/python has no module (configure with -DGNN_BUILD_PYTHON=ON and a Python with nanobind)"
    return 1
  fi
  PYTHONPATH=$build/python "$py" -c "import gnn, torch; print('gnn', gnn.__version__, gnn.cuda.status(), '| torch', torch.__version__, torch.cuda.is_available())"
  PYTHONPATH=$build/python "$py" -m pytest -q -rs -p no:cacheprovider python/tests || r=1
  if [ -f "$cora" ]; then
    PYTHONPATH=$build/python "$py" -m gnn.bench --device cuda --planetoid "$cora" --features 1433 --hidden 64 || r=1
  fi
  PYTHONPATH=$build/python "$py" -m gnn.bench --device cuda --nodes 100000 --edges 1000000 || r=1
  return "$r"
}

[ -n "$logs" ] && mkdir -p "$logs"
for p in "${phases[@]}"; do
  if ! declare -F "phase_$p" >/dev/null; then
    echo "gpu_check.sh: unknown phase '$p' (build tests sanitize spmm graphs layers profile attention train layout winners dist loss python)" >&2
    exit 2
  fi
  printf '\n=== %s (%s)\n' "$p" "$(date -u +%H:%M:%S)"
  start=$SECONDS
  # each phase in a subshell under a time limit, so one that hangs cannot take the others' time
  export -f "phase_$p"
  if [ -n "$logs" ]; then
    timeout "$limit" bash -c "set -o pipefail; phase_$p" 2>&1 | tee "$logs/$p.log"
  else
    timeout "$limit" bash -c "set -o pipefail; phase_$p" 2>&1
  fi
  status=${PIPESTATUS[0]}
  echo "=== $p: exit $status after $((SECONDS - start)) s"
  if [ "$status" -ne 0 ]; then
    fail=1
    [ "$p" = build ] && exit 1  # nothing else can run
  fi
done
exit $fail
