// The sum or mean of a destination row's source rows, as the CPU's gather kernels form it (SpMM's sum
// and mean, forward and backward, the fused SAGE layer's mean): each column 0 plus the terms in edge
// order (the float reference's order, and its +0 where every term is -0), times 1 / degree for the mean.
// Up to 64 columns at a time are held in registers over a pass of the row's edges and stored once:
// adding into the output row in memory instead costs a load and a store per edge, each split over two
// cache lines where the row is not 64-byte aligned (a NumPy array, a width not a multiple of 16), which
// doubled SpMM's call at F = 16 (docs/benchmarks.md, fifty-sixth session).
// Everything here is always inlined, so that each GNN_CPU_CLONES caller gets its own ISA's code.
#pragma once
#include <cstdint>

#include "base/common.h"

namespace gnn {
namespace gather_detail {

GNN_INLINE inline void prefetch_row(const float* p, int64_t F) {
  for (int64_t f = 0; f < F; f += 16) __builtin_prefetch(p + f);
}

// 16 floats as one value (GCC's vector extension: a zmm in the AVX-512 clone, two ymm in the AVX2 one),
// loaded and stored at any alignment. (Its helpers are always inlined, so the note that passing it by
// value differs between the clones' ABIs does not apply.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
using v16 = float __attribute__((vector_size(64)));
GNN_INLINE inline v16 load16(const float* p) {
  v16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
GNN_INLINE inline void store16(float* p, const v16& v) { __builtin_memcpy(p, &v, sizeof v); }

// Columns c0 .. c0 + 16K + rem of the sum over the terms i = b .. e-1 of coef(i) times the row row(i)
// (a float pointer to its column 0): K * 16 columns held in registers and stored into yr once, `rem`
// more after them added into yr term by term. Each column is 0 plus the terms in order, times inv for
// the mean. The registers give the order and rounding of adding
// into yr without its cost: a load and a store of yr per term, each split over two cache lines where yr
// is not 64-byte aligned. With row_floats > 0, the next term's row (that many floats) is prefetched.
template <int K, bool Tail, class Row, class Coef>
GNN_INLINE inline void sum_cols(float* __restrict yr, const Row& row, const Coef& coef, int32_t b, int32_t e,
                                int64_t c0, int64_t rem, int64_t row_floats, bool mean, float inv) {
  v16 acc[K > 0 ? K : 1];
  float* __restrict yt = yr + 16 * K;
  if constexpr (!Tail) rem = 0;
  {
    const float* __restrict xr = row(b) + c0;
    const float c = coef(b);
    if (row_floats > 0 && b + 1 < e) prefetch_row(row(b + 1), row_floats);
    for (int k = 0; k < K; ++k) acc[k] = v16{} + c * load16(xr + 16 * k);
    for (int64_t f = 0; f < rem; ++f) yt[f] = 0.0f + c * xr[16 * K + f];
  }
  for (int32_t i = b + 1; i < e; ++i) {
    const float* __restrict xr = row(i) + c0;
    const float c = coef(i);
    if (row_floats > 0 && i + 1 < e) prefetch_row(row(i + 1), row_floats);
    for (int k = 0; k < K; ++k) acc[k] += c * load16(xr + 16 * k);
    for (int64_t f = 0; f < rem; ++f) yt[f] += c * xr[16 * K + f];
  }
  if (mean) {
    for (int k = 0; k < K; ++k) acc[k] *= inv;
    for (int64_t f = 0; f < rem; ++f) yt[f] *= inv;
  }
  for (int k = 0; k < K; ++k) store16(yr + 16 * k, acc[k]);
}
#pragma GCC diagnostic pop

}  // namespace gather_detail

// yr[0 .. F) = 0 + the terms coef(i) times the row row(i) (a float pointer) for i = b .. e-1 (b < e), in
// order, times 1 / (e - b) with mean. With prefetch, the next term's row is prefetched while one is added.
template <class Row, class Coef>
GNN_INLINE inline void sum_rows(float* __restrict yr, const Row& row, const Coef& coef, int32_t b, int32_t e,
                                int64_t F, bool mean, bool prefetch) {
  using gather_detail::sum_cols;
  const float inv = mean ? 1.0f / float(e - b) : 1.0f;
  int64_t f0 = 0;
  for (; f0 + 64 <= F; f0 += 64)
    sum_cols<4, false>(yr + f0, row, coef, b, e, f0, 0, prefetch && f0 == 0 ? F : 0, mean, inv);
  const int64_t n = F - f0, rem = n % 16, pf = prefetch && f0 == 0 ? F : 0;
  float* y0 = yr + f0;
  if (n == 0) return;
  if (rem == 0) {  // (the last pass's 16-column blocks in registers, its last F % 16 columns in yr)
    if (n == 16) sum_cols<1, false>(y0, row, coef, b, e, f0, 0, pf, mean, inv);
    else if (n == 32) sum_cols<2, false>(y0, row, coef, b, e, f0, 0, pf, mean, inv);
    else sum_cols<3, false>(y0, row, coef, b, e, f0, 0, pf, mean, inv);
  } else {
    if (n < 16) sum_cols<0, true>(y0, row, coef, b, e, f0, rem, pf, mean, inv);
    else if (n < 32) sum_cols<1, true>(y0, row, coef, b, e, f0, rem, pf, mean, inv);
    else if (n < 48) sum_cols<2, true>(y0, row, coef, b, e, f0, rem, pf, mean, inv);
    else sum_cols<3, true>(y0, row, coef, b, e, f0, rem, pf, mean, inv);
  }
}

// A destination row of a gather: yr[0 .. F) = 0 + the terms w[p] (1 without w) times source row
// indices[p] of x (row stride ldx) over the edges p = b .. e-1 (b < e), times 1 / (e - b) with mean
// (SpMM's sum and mean, SAGE's mean).
GNN_INLINE inline void gather_sum_row(float* __restrict yr, const float* __restrict x, const float* __restrict w,
                                      const int32_t* __restrict indices, int32_t b, int32_t e, int64_t ldx, int64_t F,
                                      bool mean, bool prefetch) {
  sum_rows(
      yr, [&](int32_t p) GNN_INLINE { return x + int64_t(indices[p]) * ldx; },
      [&](int32_t p) GNN_INLINE { return w ? w[p] : 1.0f; }, b, e, F, mean, prefetch);
}

}  // namespace gnn
