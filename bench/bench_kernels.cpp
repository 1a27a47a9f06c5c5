// Every kernel and layer of `gnn bench kernel` on TpuGraphs-like shapes: N = 10k with E = 20k and
// N = 100k with E = 200k; F = 64, 128, 256; and 16 configs batched node-major (C*F = 16*128). Bytes and
// flops come from the same formulas as the CLI (bench/registry_*.cpp); read their GB/s and GFLOP/s
// against BM_floor_* from the same run.
#include <benchmark/benchmark.h>

#include "bench/registry.h"

using namespace gnn::cli;

static void BM_kernel(benchmark::State& state, const std::string& name, bool backward) {
  KernelShape s;
  s.nodes = state.range(0), s.edges = 2 * state.range(0), s.features = state.range(1), s.configs = state.range(2);
  s.backward = backward;
  const KernelCase k = make_kernel_case(name, s);
  k.step();  // warm-up
  for (auto _ : state) k.step();
  state.counters["GB/s"] = benchmark::Counter(k.bytes * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(k.flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

static void register_all() {
  for (const std::string& name : bench_kernel_names()) {
    for (bool backward : {false, true}) {
      auto* b = benchmark::RegisterBenchmark((name + (backward ? "/backward" : "/forward")).c_str(),
                                             [name, backward](benchmark::State& st) { BM_kernel(st, name, backward); });
      b->ArgNames({"N", "F", "C"})->Unit(benchmark::kMillisecond)->UseRealTime();
      for (int64_t n : {10'000, 100'000})
        for (int64_t f : {64, 128, 256}) b->Args({n, f, 1});
      if (bench_kernel_takes_configs(name)) b->Args({10'000, 128, 16});  // some layers: one config per row
    }
  }
}

static const int kRegistered = (register_all(), 0);
