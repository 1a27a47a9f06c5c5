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

// The compute floor: peak single-precision FMA throughput, 12 independent AVX2 accumulators per thread
// (enough to cover FMA latency), on every OpenMP thread. Counted as 2 flops per lane per FMA.
#include <immintrin.h>
#include <omp.h>

static void BM_floor_fma_peak(benchmark::State& state) {
  constexpr int64_t kIters = 1 << 22;
  double sink = 0;
  for (auto _ : state) {
#pragma omp parallel reduction(+ : sink)
    {
      __m256 acc[12];
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
      const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
      for (int64_t k = 0; k < kIters; ++k)
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
      float out[8];
      __m256 s = acc[0];
      for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
      _mm256_storeu_ps(out, s);
      sink += out[0];
    }
  }
  benchmark::DoNotOptimize(sink);
  const double flops = double(kIters) * 12 * 8 * 2 * omp_get_max_threads();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_floor_fma_peak)->Unit(benchmark::kMillisecond)->UseRealTime();
