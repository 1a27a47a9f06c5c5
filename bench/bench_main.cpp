// build/bin/gnn_bench: Google Benchmark over the engine's kernels and data paths. Every benchmark
// reports bytes (or flops) with the formula beside it, so its GB/s reads against the floors that
// bench_floors.cpp measures on the same machine in the same run.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
