// The physical floors other benchmarks are read against: host copy bandwidth (memcpy, and a
// parallel copy over all OpenMP threads), measured on 256 MiB so caches do not flatter it.
#include <benchmark/benchmark.h>

#include <cstring>

#include "runtime/tensor.h"

using namespace gnn;

static void BM_floor_memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Tensor::full({n}, 1, DType::U8), b = Tensor::zeros({n}, DType::U8);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), size_t(n));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n);  // read n, write n
}
BENCHMARK(BM_floor_memcpy)->Arg(int64_t(256) << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

static void BM_floor_copy_parallel(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor a = Tensor::full({n}, 1, DType::F32), b = Tensor::zeros({n}, DType::F32);
  const float* src = a.f32();
  float* dst = b.f32();
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * 4);  // read + write n floats
}
BENCHMARK(BM_floor_copy_parallel)->Arg(int64_t(256) << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
