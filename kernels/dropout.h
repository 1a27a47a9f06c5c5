// Dropout, inverted: y = x * (0 or scale), element i dropped with probability p, scale = 1 / (1 - p) (to
// within the threshold's 2^-24: dropout_mask).
// The mask is a counter-based hash: element i is zeroed when the top 24 bits of h(i) fall below
// `threshold` (p * 2^24, rounded down) and scaled by `scale` otherwise, y = x * (0 or scale) as a mask
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
#include <algorithm>

#include "base/common.h"

namespace gnn {

inline constexpr int64_t kDropoutGrain = 1 << 16;  // OpenMP above this many values

GNN_HD inline uint32_t dropout_key(uint64_t seed) { return uint32_t(seed) ^ (uint32_t(seed >> 32) * 0x85ebca6bu); }
// The mixer's input for element i; for the i of one 2^32 block it is dropout_start(key, i0) + (i - i0)
// in 32-bit arithmetic, which the host loops use (dropout_run) so that their lanes stay 32 bits wide.
GNN_HD GNN_INLINE inline uint32_t dropout_start(uint32_t key, int64_t i) {
  return uint32_t(i) + key + uint32_t(uint64_t(i) >> 32) * 0x9e3779b9u;
}
GNN_HD GNN_INLINE inline bool dropout_mixed_drops(uint32_t h, uint32_t threshold) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return (h >> 8) < threshold;
}
GNN_HD GNN_INLINE inline bool dropout_drops(uint32_t key, int64_t i, uint32_t threshold) {
  return dropout_mixed_drops(dropout_start(key, i), threshold);
}
// dst[t] = src[t] * (0 or scale) for the elements i0 + t, t < n (dst may be src), as dropout_drops
// decides them. Within one 2^32 block of i the hash input is a 32-bit counter, so the lanes of a
// vectorised loop hold 32-bit values (with 64-bit indices the AVX-512 loop ran at half the width, with
// 64-bit multiplies). Forced inline: compiled in each caller's CPU clone.
template <class T>
GNN_INLINE inline void dropout_run(T* dst, const T* src, int64_t n, int64_t i0, uint32_t key, uint32_t threshold,
                                   T scale) {
  if (n <= 0) return;
  if ((uint64_t(i0) >> 32) == (uint64_t(i0 + n - 1) >> 32)) {
    const uint32_t h0 = dropout_start(key, i0);
    for (int64_t t = 0; t < n; ++t) dst[t] = src[t] * (dropout_mixed_drops(h0 + uint32_t(t), threshold) ? T(0) : scale);
  } else {
    for (int64_t t = 0; t < n; ++t) dst[t] = src[t] * (dropout_drops(key, i0 + t, threshold) ? T(0) : scale);
  }
}

// A dropout mask for a fused kernel to apply to what it writes (through RowsDropout below): value v at
// index i becomes v * (0 or scale), the map dropout_apply_ref applies at i. `on` false: v unchanged.
template <class T>
struct DropoutMask {
  bool on = false;
  uint32_t key = 0, threshold = 0;
  T scale = T(1);
  GNN_HD GNN_INLINE T apply(T v, int64_t i) const { return v * (dropout_drops(key, i, threshold) ? T(0) : scale); }
  // dst[t] = apply(src[t], i0 + t) for t < n (dst may be src), by dropout_run. The fields go by value: a
  // store through dst may alias a T member as far as the compiler knows, which kept the loop scalar.
  GNN_INLINE void apply(T* dst, const T* src, int64_t n, int64_t i0) const {
    dropout_run(dst, src, n, i0, key, threshold, scale);
  }
};

// The mask a fused kernel applies to the rows it writes, y [N, F] with F = C*D (C configs of D channels side
// by side, node-major): element (n, col) at index n*F + col as dropout_apply_ref decides it, or with
// `configs` C > 0 at index n*D + col % D as dropout_configs_apply_ref decides it, one mask for a node's C
// configs. mask.on false: nothing. Serves instance_norm's and config_attention's fused dropouts.
template <class T>
struct RowsDropout {
  DropoutMask<T> mask;
  int64_t configs = 0;
  GNN_HD int64_t index(int64_t n, int64_t col, int64_t F) const {
    if (configs <= 0) return n * F + col;
    const int64_t D = F / configs;
    return n * D + col % D;
  }
  // index(n, c*W, C*W), the first of config c's W columns in row n of C configs (configs 0 or that C),
  // without a division
  GNN_HD GNN_INLINE int64_t first(int64_t n, int64_t c, int64_t C, int64_t W) const {
    return (configs > 0 ? n : n * C + c) * W;
  }
  GNN_HD T apply(T v, int64_t n, int64_t col, int64_t F) const { return mask.on ? mask.apply(v, index(n, col, F)) : v; }
  // row n's columns [c0, c0 + w) of src into dst (which may be src), in runs whose indices are consecutive
  // (each config's part with a shared mask): DropoutMask's vector loop, the same bits as apply.
  GNN_INLINE void apply_row(T* dst, const T* src, int64_t n, int64_t c0, int64_t w, int64_t F) const {
    if (!mask.on) return;
    const int64_t D = configs > 0 ? F / configs : F;
    for (int64_t a = c0; a < c0 + w;) {
      const int64_t b = configs > 0 ? std::min(c0 + w, (a / D + 1) * D) : c0 + w;
      mask.apply(dst + (a - c0), src + (a - c0), b - a, index(n, a, F));
      a = b;
    }
  }
};

// The mask dropout(x, p) draws with `seed` (one draw of the caller's generator); p in [0, 1). p = 0: off.
// The scale is 1 over the keep probability the threshold gives, 1 - threshold / 2^24, so that E[y] = x: that
// is 1 - p to within 2^-24, which 1 / (1 - p) made a bias of up to 2^-24 / (1 - p) (p = 0.999999: 1.3%;
// p = 1 - 1e-9, where nothing but 2^-24 of the elements is kept: a mean of 60 where 1 is due).
template <class T>
DropoutMask<T> dropout_mask(double p, uint64_t seed) {
  if (p == 0) return {};
  const uint32_t threshold = uint32_t(p * double(1u << 24));  // (< 2^24 for p < 1)
  return {true, dropout_key(seed), threshold, T(double(1u << 24) / double((1u << 24) - threshold))};
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
