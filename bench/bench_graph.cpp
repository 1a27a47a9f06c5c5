// CSR + CSC build by counting sort on TpuGraphs-like graphs (mean in-degree 2; layout graphs reach
// 10k-100k nodes). Bytes: read 2E int64 ids, write (2N + 4E) int32: the two indptrs, CSR indices and
// edge ids, CSC indices and the permutation. Passes over the ids: 3 (validate, count, place).
#include <benchmark/benchmark.h>

#include <random>

#include "runtime/graph.h"

using namespace gnn;

static void BM_graph_build(benchmark::State& state) {
  const int64_t N = state.range(0), E = 2 * N;
  std::mt19937_64 rng(1);
  std::vector<int64_t> src(E), dst(E);
  for (int64_t e = 0; e < E; ++e) {
    dst[e] = int64_t(rng() % uint64_t(N));
    src[e] = rng() % 16 == 0 ? int64_t(rng() % 64) : int64_t(rng() % uint64_t(N));  // a few hubs
  }
  for (auto _ : state) benchmark::DoNotOptimize(Graph::from_edges(src.data(), dst.data(), E, N));
  state.SetBytesProcessed(state.iterations() * (2 * E * 8 + (2 * (N + 1) + 4 * E) * 4));
  state.counters["edges/s"] = benchmark::Counter(double(E), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_graph_build)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();
