// Dropout, inverted: y = x * (0 or scale), element i dropped with probability p, scale = 1 / (1 - p).
// The mask is a counter-based hash: element i is zeroed when the top 24 bits of h(i) fall below
// `threshold` (p * 2^24) and scaled by `scale` (1 / (1 - p)) otherwise, y = x * (0 or scale) as a mask
// product would (a NaN stays NaN). h is a 32-bit mixer (lowbias32, C. Wellons) of i plus a key from
// the seed: a decision depends only on (seed, i), so the host and the GPU draw the same mask in any
// order and with any thread count, and the backward (the same map applied to dy) recomputes the mask
// instead of keeping it. 32-bit arithmetic keeps the host loop vectorised (x86 has no packed 64-bit
// multiply before AVX-512): at n = 16M on the 2-core dev machine, 11.4 ms (gnn_bench BM_dropout_apply;
// one multiply pass y = x * m, BM_floor_multiply: 6.9 ms), where the previous op, xoshiro streams drawn
// into a mask and then multiplied, took 30.5-31.5 ms, and a 64-bit splitmix hash per element 40.5 ms.
// The templates (NAME_ref) are the references and the f64 path; float runs the cloned NAME_cpu
// (kernels/dropout_cpu.cpp), whose AVX2 / AVX-512 lanes took it to 4.1 ms on the AVX-512 machine.
#pragma once
#include "base/common.h"

namespace gnn {

inline constexpr int64_t kDropoutGrain = 1 << 16;  // OpenMP above this many values

GNN_HD inline uint32_t dropout_key(uint64_t seed) { return uint32_t(seed) ^ (uint32_t(seed >> 32) * 0x85ebca6bu); }
GNN_HD inline bool dropout_drops(uint32_t key, int64_t i, uint32_t threshold) {
  uint32_t h = uint32_t(i) + key + uint32_t(uint64_t(i) >> 32) * 0x9e3779b9u;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return (h >> 8) < threshold;
}

template <class T>
void dropout_apply_ref(T* y, const T* x, int64_t n, uint64_t seed, uint32_t threshold, T scale) {
  const uint32_t key = dropout_key(seed);
#pragma omp parallel for simd if (n > kDropoutGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * (dropout_drops(key, i, threshold) ? T(0) : scale);
}

// The same map on the GPU, f32 on `stream`: a thread per element, the same bits as the host.
void dropout_apply_cuda(float* y, const float* x, int64_t n, uint64_t seed, uint32_t threshold, float scale,
                        Stream stream);

// The same two maps on the host for float over the threads, each thread's part in an AVX2 / AVX-512
// clone (kernels/dropout_cpu.cpp): the references' bits.
void dropout_apply_cpu(float* y, const float* x, int64_t n, uint64_t seed, uint32_t threshold, float scale);
void dropout_configs_apply_cpu(float* y, const float* x, int64_t R, int64_t C, int64_t F, uint64_t seed,
                               uint32_t threshold, float scale);

// Dropout with one mask for the C configs of config-batched rows x [R, C*F] (node-major): element
// (r, c*F + f) is decided by index r*F + f, so the C configs of a row see the same mask, the one
// dropout_apply_ref draws over [R, F]. y = x * (0 or scale), the bits of x times that mask repeated C times.
template <class T>
void dropout_configs_apply_ref(T* y, const T* x, int64_t R, int64_t C, int64_t F, uint64_t seed, uint32_t threshold,
                               T scale) {
  const uint32_t key = dropout_key(seed);
#pragma omp parallel for if (R * C * F > kDropoutGrain)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      T* yr = y + (r * C + c) * F;
      const T* xr = x + (r * C + c) * F;
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) yr[f] = xr[f] * (dropout_drops(key, r * F + f, threshold) ? T(0) : scale);
    }
}
void dropout_configs_apply_cuda(float* y, const float* x, int64_t R, int64_t C, int64_t F, uint64_t seed,
                                uint32_t threshold, float scale, Stream stream);

}  // namespace gnn
