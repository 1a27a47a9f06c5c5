// The host dropout map (kernels/dropout.h: a 32-bit hash of seed and index per element, no mask
// kept) beside one multiply pass over the same arrays (mul_to: the memory floor of y = x * mask).
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/dropout.h"
#include "kernels/elementwise.h"

using namespace gnn;

static void BM_dropout_apply(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(static_cast<size_t>(n), 1.0f), y(static_cast<size_t>(n));
  for (auto _ : state) {
    dropout_apply_cpu(y.data(), x.data(), n, 42, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(8.0 * double(n) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_dropout_apply)->Arg(int64_t(1) << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

static void BM_floor_multiply(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(static_cast<size_t>(n), 1.0f), m(static_cast<size_t>(n), 2.0f), y(static_cast<size_t>(n));
  for (auto _ : state) {
    mul_to<float>(y.data(), x.data(), m.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(12.0 * double(n) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_floor_multiply)->Arg(int64_t(1) << 24)->Unit(benchmark::kMillisecond)->UseRealTime();
