// A destination row of a gather, as the CPU's gather kernels form it (SpMM's sum and mean forward and
// backward, its max forward, the fused SAGE layer's mean). The sum: each column 0 plus the terms in edge
// order (the float reference's order, and its +0 where every term is -0), times 1 / degree for the mean.
// The max: each column the first term, replaced by each later one that is greater or is the first NaN (as
// max_takes decides: the first of equal terms, NaN wherever a NaN comes), with the edge that gave it.
// Up to 64 columns at a time, all but a row's last F % 4, are held in registers over a pass of the row's
// edges and stored once: forming the row in memory instead costs a load and a store per edge, each split
// over two cache lines where the row is not 64-byte aligned (a NumPy array, a width not a multiple of
// 16), which doubled SpMM's call at F = 16 (docs/benchmarks.md, fifty-sixth session).
// Everything here is always inlined, so that each GNN_CPU_CLONES caller gets its own ISA's code.
#pragma once
#include <cstdint>
#include <type_traits>

#include "base/common.h"

namespace gnn {
namespace gather_detail {

GNN_INLINE inline void prefetch_row(const float* p, int64_t F) {
  for (int64_t f = 0; f < F; f += 16) __builtin_prefetch(p + f);
}

// W floats (W = 4, 8, 16) as one value and their int32 lanes (GCC's vector extension), loaded and stored
// at any alignment. The sums hold 16 (a zmm in the AVX-512 clone, two ymm in the AVX2 one, four xmm in
// the baseline): GCC splits a vector wider than the ISA's into native ones for adds and products. A
// compare and select on such a vector it turns into a branch per lane instead, so the max runs at the
// width the CPU has (max_lanes). (The helpers are always inlined, so the note that passing a vector by
// value differs between the clones' ABIs does not apply.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <int W>
struct lanes {
  typedef float f __attribute__((vector_size(4 * W)));
  typedef int32_t i __attribute__((vector_size(4 * W)));
  GNN_INLINE static f load(const float* p) {
    f v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
  }
  GNN_INLINE static void store(float* p, const f& v) { __builtin_memcpy(p, &v, sizeof v); }
  GNN_INLINE static void store(int32_t* p, const i& v) { __builtin_memcpy(p, &v, sizeof v); }
};
using v16 = lanes<16>::f;

// Columns c0 .. c0 + 16K + 4T + rem of the sum over the terms i = b .. e-1 of coef(i) times the row row(i)
// (a float pointer to its column 0), times 1 / (e - b) with mean: K vectors of 16 columns and T of 4
// held in registers and stored into yr once, the `rem` (< 4) after them formed in yr term by term, in the
// same order and rounding. With row_floats > 0, the next term's row (that many floats) is prefetched.
template <int K, int T, class Row, class Coef>
GNN_INLINE inline void sum_cols(float* __restrict yr, const Row& row, const Coef& coef, int32_t b, int32_t e,
                                int64_t c0, int64_t rem, int64_t row_floats, bool mean) {
  static_assert(K == 0 || T == 0, "a pass holds 16-column blocks or the row's last columns (column_passes)");
  using L4 = lanes<4>;
  v16 acc[K > 0 ? K : 1];
  L4::f acc4[T > 0 ? T : 1];
  float* __restrict yt = yr + 16 * K + 4 * T;
  if constexpr (K > 0) rem = 0;
  {
    const float* __restrict xr = row(b) + c0;
    const float c = coef(b);
    if (row_floats > 0 && b + 1 < e) prefetch_row(row(b + 1), row_floats);
    for (int k = 0; k < K; ++k) acc[k] = v16{} + c * lanes<16>::load(xr + 16 * k);
    for (int t = 0; t < T; ++t) acc4[t] = L4::f{} + c * L4::load(xr + 16 * K + 4 * t);
    for (int64_t f = 0; f < rem; ++f) yt[f] = 0.0f + c * xr[16 * K + 4 * T + f];
  }
  for (int32_t i = b + 1; i < e; ++i) {
    const float* __restrict xr = row(i) + c0;
    const float c = coef(i);
    if (row_floats > 0 && i + 1 < e) prefetch_row(row(i + 1), row_floats);
    for (int k = 0; k < K; ++k) acc[k] += c * lanes<16>::load(xr + 16 * k);
    for (int t = 0; t < T; ++t) acc4[t] += c * L4::load(xr + 16 * K + 4 * t);
    for (int64_t f = 0; f < rem; ++f) yt[f] += c * xr[16 * K + 4 * T + f];
  }
  if (mean) {
    const float inv = 1.0f / float(e - b);
    for (int k = 0; k < K; ++k) acc[k] *= inv;
    for (int t = 0; t < T; ++t) acc4[t] *= inv;
    for (int64_t f = 0; f < rem; ++f) yt[f] *= inv;
  }
  for (int k = 0; k < K; ++k) lanes<16>::store(yr + 16 * k, acc[k]);
  for (int t = 0; t < T; ++t) L4::store(yr + 16 * K + 4 * t, acc4[t]);
}

// (GCC 12, splitting an 8-lane int vector for SSE2, warns arg unset at the first term, which sets it all)
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Columns c0 .. c0 + 16K + 4T + rem of the max over the terms i = b .. e-1 of coef(i) times the row
// row(i), into yr, and into ar the term i that gave each column: the first term, replaced where a later
// one is greater or the first NaN (max_takes). Held (the 16K columns in vectors of W lanes, the 4T in vectors of 4) and
// stored as sum_cols's.
template <int K, int T, int W, class Row, class Coef>
GNN_INLINE inline void max_cols(float* __restrict yr, int32_t* __restrict ar, const Row& row, const Coef& coef,
                                int32_t b, int32_t e, int64_t c0, int64_t rem) {
  static_assert(K == 0 || T == 0, "a pass holds 16-column blocks or the row's last columns (column_passes)");
  using L = lanes<W>;
  using L4 = lanes<4>;
  constexpr int V = K * 16 / W;  // vectors of W lanes held
  typename L::f acc[V > 0 ? V : 1];
  typename L::i arg[V > 0 ? V : 1];
  L4::f acc4[T > 0 ? T : 1];
  L4::i arg4[T > 0 ? T : 1];
  const int64_t ct = 16 * K + 4 * T;  // the first column formed in memory
  float* __restrict yt = yr + ct;
  int32_t* __restrict at = ar + ct;
  if constexpr (K > 0) rem = 0;
  // (a vector's compare gives each lane -1 where it holds and 0 where not: the lanes the select takes.) The
  // vectors take a greater term only, and note each lane that met a NaN; those columns are walked again after
  // for their first NaN (max_takes' result). max_takes' own two-part test in the select made GCC's code for
  // it 7x slower (SpMM max, F = 64).
  typename L::i nan[V > 0 ? V : 1];
  L4::i nan4[T > 0 ? T : 1];
  auto take_greater = [](auto& cur, auto& cur_arg, auto& seen, const auto& val, const auto& idx) GNN_INLINE {
    const auto take = val > cur;
    cur = take ? val : cur;
    cur_arg = take ? idx : cur_arg;
    seen |= val != val;
  };
  // columns [f0, f1)'s max made the first NaN's where a term is NaN
  auto first_nans = [&](int64_t f0, int64_t f1) {
    for (int64_t f = f0; f < f1; ++f)
      for (int32_t i = b; i < e; ++i) {
        const float val = coef(i) * row(i)[c0 + f];
        if (val != val) {
          yr[f] = val, ar[f] = i;
          break;
        }
      }
  };
  bool rem_nan = false;
  {
    const float* __restrict xr = row(b) + c0;
    const float c = coef(b);
    for (int k = 0; k < V; ++k)
      acc[k] = c * L::load(xr + W * k), arg[k] = typename L::i{} + b, nan[k] = acc[k] != acc[k];
    for (int t = 0; t < T; ++t)
      acc4[t] = c * L4::load(xr + 16 * K + 4 * t), arg4[t] = L4::i{} + b, nan4[t] = acc4[t] != acc4[t];
    for (int64_t f = 0; f < rem; ++f) yt[f] = c * xr[ct + f], at[f] = b;
  }
  for (int32_t i = b + 1; i < e; ++i) {
    const float* __restrict xr = row(i) + c0;
    const float c = coef(i);
    for (int k = 0; k < V; ++k) take_greater(acc[k], arg[k], nan[k], c * L::load(xr + W * k), typename L::i{} + i);
    for (int t = 0; t < T; ++t) take_greater(acc4[t], arg4[t], nan4[t], c * L4::load(xr + 16 * K + 4 * t), L4::i{} + i);
    for (int64_t f = 0; f < rem; ++f) {  // branch-free: the mask picks val and i
      const float val = c * xr[ct + f], cur = yt[f];
      const int32_t take = -int32_t(val > cur);
      yt[f] = val > cur ? val : cur;
      at[f] = (at[f] & ~take) | (i & take);
      rem_nan |= val != val;
    }
  }
  if (rem_nan) [[unlikely]]
    first_nans(ct, ct + rem);
  for (int k = 0; k < V; ++k) L::store(yr + W * k, acc[k]), L::store(ar + W * k, arg[k]);
  for (int t = 0; t < T; ++t) L4::store(yr + 16 * K + 4 * t, acc4[t]), L4::store(ar + 16 * K + 4 * t, arg4[t]);
  if constexpr (V + T > 0) {
    L4::i any4 = L4::i{};  // (one test for the whole block: the rare NaN pays for the walk)
    for (int t = 0; t < T; ++t) any4 |= nan4[t];
    typename L::i any = typename L::i{};
    for (int k = 0; k < V; ++k) any |= nan[k];
    uint64_t words[W / 2 + 2];
    __builtin_memcpy(words, &any, sizeof any);
    __builtin_memcpy(words + W / 2, &any4, sizeof any4);
    uint64_t hit = 0;
    for (int w = 0; w < W / 2 + 2; ++w) hit |= words[w];
    if (!hit) [[likely]]
      return;
    int32_t seen[V * W + 4 * T];
    for (int k = 0; k < V; ++k) L::store(seen + W * k, nan[k]);
    for (int t = 0; t < T; ++t) L4::store(seen + V * W + 4 * t, nan4[t]);
    for (int64_t f = 0; f < V * W + 4 * T; ++f)
      if (seen[f]) first_nans(f, f + 1);
  }
}
#pragma GCC diagnostic pop
#pragma GCC diagnostic pop

// Calls pass(std::integral_constant<int, K>, std::integral_constant<int, T>, c0, rem, first) over F's
// columns (first: the pass at column 0): passes of K whole 16-column blocks, 64 columns at a time, then
// for the last F % 16 columns one pass (K = 0) of T 4-column blocks and rem = F % 4 more in memory. (A
// pass of both would need K x T x rem instances, and a runtime rem beside the 16-column blocks slowed
// the max's F = 16 by 8%; the second walk over a row's edges costs less. Chosen by comparisons, not a
// switch: its jump table, once a row, made SpMM's sum 13% slower at F = 16.)
template <class Pass>
GNN_INLINE inline void column_passes(int64_t F, const Pass& pass) {
  using std::integral_constant;
  using Z = integral_constant<int, 0>;
  int64_t f0 = 0;
  for (; f0 + 64 <= F; f0 += 64) pass(integral_constant<int, 4>{}, Z{}, f0, 0, f0 == 0);
  const int64_t n = F - f0;
  if (n >= 16) {
    if (n < 32) pass(integral_constant<int, 1>{}, Z{}, f0, 0, f0 == 0);
    else if (n < 48) pass(integral_constant<int, 2>{}, Z{}, f0, 0, f0 == 0);
    else pass(integral_constant<int, 3>{}, Z{}, f0, 0, f0 == 0);
  }
  const int64_t t = n % 16;  // the last columns
  if (t == 0) return;
  const int64_t f1 = F - t, rem = t % 4;
  if (t < 4) pass(Z{}, Z{}, f1, rem, f1 == 0);
  else if (t < 8) pass(Z{}, integral_constant<int, 1>{}, f1, rem, f1 == 0);
  else if (t < 12) pass(Z{}, integral_constant<int, 2>{}, f1, rem, f1 == 0);
  else pass(Z{}, integral_constant<int, 3>{}, f1, rem, f1 == 0);
}

}  // namespace gather_detail

// yr[0 .. F) = 0 + the terms coef(i) times the row row(i) (a float pointer) for i = b .. e-1 (b < e), in
// order, times 1 / (e - b) with mean. With prefetch_floats > 0, that many floats of the next term's row
// are prefetched while one is added (F for the row itself; a head's caller gives the whole row).
template <class Row, class Coef>
GNN_INLINE inline void sum_rows(float* __restrict yr, const Row& row, const Coef& coef, int32_t b, int32_t e,
                                int64_t F, bool mean, int64_t prefetch_floats) {
  gather_detail::column_passes(F, [&](auto K, auto T, int64_t c0, int64_t rem, bool first) GNN_INLINE {
    gather_detail::sum_cols<K(), T()>(yr + c0, row, coef, b, e, c0, rem, first ? prefetch_floats : 0, mean);
  });
}

// The lanes of the widest vector whose compare and select the running CPU has (16 with AVX-512, 8 with
// AVX2, else 4): what max_rows is given. Asked by the levels GNN_CPU_CLONES picks its clone by
// (x86-64-v4, x86-64-v3), so the width is the running clone's own.
inline int max_lanes() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)  // (where GNN_CPU_CLONES clones)
  static const int lanes = __builtin_cpu_supports("x86-64-v4") ? 16 : __builtin_cpu_supports("x86-64-v3") ? 8 : 4;
  return lanes;
#elif defined(__AVX512F__)  // (one build for one ISA: its own width; clang knows no x86-64-v4 here)
  return 16;
#elif defined(__AVX2__)
  return 8;
#else
  return 4;
#endif
}

// yr[0 .. F) = the max over the terms coef(i) times the row row(i) for i = b .. e-1 (b < e), each column
// the first term replaced where a later one is greater or the first NaN, and ar[0 .. F) the term i that gave it; the
// 16-column blocks in vectors of `lanes` floats (max_lanes()), the last F % 16 columns in 4-lane vectors
// and the last F % 4 in the row (column_passes). (No prefetch of the next term's row, which the sums have: it
// cost the max 5-15% at F = 8-16 with x in cache and gained nothing at 2M rows.)
template <class Row, class Coef>
GNN_INLINE inline void max_rows(float* __restrict yr, int32_t* __restrict ar, const Row& row, const Coef& coef,
                                int32_t b, int32_t e, int64_t F, int lanes) {
  gather_detail::column_passes(F, [&](auto K, auto T, int64_t c0, int64_t rem, bool) GNN_INLINE {
    using gather_detail::max_cols;
    if (lanes == 16) max_cols<K(), T(), 16>(yr + c0, ar + c0, row, coef, b, e, c0, rem);
    else if (lanes == 8) max_cols<K(), T(), 8>(yr + c0, ar + c0, row, coef, b, e, c0, rem);
    else max_cols<K(), T(), 4>(yr + c0, ar + c0, row, coef, b, e, c0, rem);
  });
}

// A destination row of a gather: yr[0 .. F) = 0 + the terms w[p] (1 without w) times source row
// indices[p] of x (row stride ldx) over the edges p = b .. e-1 (b < e), times 1 / (e - b) with mean
// (SpMM's sum and mean, SAGE's mean). With and without w written apart, so that the unweighted
// loop adds the rows without a product (GCC stopped unswitching it once the column passes were
// reshaped: perf annotate, fifty-eighth session).
GNN_INLINE inline void gather_sum_row(float* __restrict yr, const float* __restrict x, const float* __restrict w,
                                      const int32_t* __restrict indices, int32_t b, int32_t e, int64_t ldx, int64_t F,
                                      bool mean, bool prefetch) {
  auto row = [&](int32_t p) GNN_INLINE { return x + int64_t(indices[p]) * ldx; };
  const int64_t ahead = prefetch ? F : 0;
  if (w) sum_rows(yr, row, [&](int32_t p) GNN_INLINE { return w[p]; }, b, e, F, mean, ahead);
  else sum_rows(yr, row, [](int32_t) GNN_INLINE { return 1.0f; }, b, e, F, mean, ahead);
}

// The same row's max (SpMM's max): yr[0 .. F) the max over the edges p = b .. e-1 (b < e) of w[p] (1
// without w) times source row indices[p] of x, ar[0 .. F) the edge p that gave each column; lanes from
// max_lanes().
GNN_INLINE inline void gather_max_row(float* __restrict yr, int32_t* __restrict ar, const float* __restrict x,
                                      const float* __restrict w, const int32_t* __restrict indices, int32_t b,
                                      int32_t e, int64_t ldx, int64_t F, int lanes) {
  auto row = [&](int32_t p) GNN_INLINE { return x + int64_t(indices[p]) * ldx; };
  if (w) max_rows(yr, ar, row, [&](int32_t p) GNN_INLINE { return w[p]; }, b, e, F, lanes);
  else max_rows(yr, ar, row, [](int32_t) GNN_INLINE { return 1.0f; }, b, e, F, lanes);
}

}  // namespace gnn
