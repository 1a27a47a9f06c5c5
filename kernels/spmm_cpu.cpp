// Gather SpMM on the CPU: one thread per block of destination rows (dynamic, so a hub row does not
// hold a whole static chunk back). Each output row is formed column by column as the first edge's term
// and the rest added in edge order; sum and mean hold up to 64 columns of it in registers over a pass
// of the row's edges (sum_cols) and store them once, max builds it in place. The compiler vectorises
// the column loops (AVX2 or AVX-512 where the CPU has them: GNN_CPU_CLONES). The next edge's source row
// is prefetched; that measured as neither a gain nor a loss here (spmm-mean, N = 10k and 100k, F =
// 128), and helps where memory latency is higher.
#include <algorithm>

#include "base/error.h"
#include "kernels/spmm.h"

namespace gnn {

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::kSum:
      return "sum";
    case Reduce::kMean:
      return "mean";
    default:
      return "max";
  }
}

namespace {
constexpr int64_t kRowsPerTask = 32;

inline void prefetch_row(const float* p, int64_t F) {
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
GNN_INLINE inline void store16(float* p, v16 v) { __builtin_memcpy(p, &v, sizeof v); }

// The sum (or mean) over the edges b .. e-1 of K * 16 columns held in registers, stored into yr once,
// and of `rem` more columns after them added into yr edge by edge: each column the first edge's term,
// then the rest added in edge order, times inv for the mean. The registers give the order and rounding
// of adding into yr without its cost: a load and a store of yr per edge, each split over two cache lines
// where yr is not 64-byte aligned. With row_floats > 0, the next edge's row (that many floats) is
// prefetched.
template <int K, bool Tail>
GNN_INLINE inline void sum_cols(float* __restrict yr, const float* __restrict x, const float* __restrict w,
                                const int32_t* __restrict indices, int32_t b, int32_t e, int64_t ldx, int64_t rem,
                                int64_t row_floats, bool mean, float inv) {
  v16 acc[K > 0 ? K : 1];
  float* __restrict yt = yr + 16 * K;
  if constexpr (!Tail) rem = 0;
  {
    const float* __restrict xr = x + int64_t(indices[b]) * ldx;
    const float wp = w ? w[b] : 1.0f;
    if (row_floats > 0 && b + 1 < e) prefetch_row(x + int64_t(indices[b + 1]) * ldx, row_floats);
    for (int k = 0; k < K; ++k) acc[k] = wp * load16(xr + 16 * k);
    for (int64_t f = 0; f < rem; ++f) yt[f] = wp * xr[16 * K + f];
  }
  for (int32_t p = b + 1; p < e; ++p) {
    const float* __restrict xr = x + int64_t(indices[p]) * ldx;
    const float wp = w ? w[p] : 1.0f;
    if (row_floats > 0 && p + 1 < e) prefetch_row(x + int64_t(indices[p + 1]) * ldx, row_floats);
    for (int k = 0; k < K; ++k) acc[k] += wp * load16(xr + 16 * k);
    for (int64_t f = 0; f < rem; ++f) yt[f] += wp * xr[16 * K + f];
  }
  if (mean) {
    for (int k = 0; k < K; ++k) acc[k] *= inv;
    for (int64_t f = 0; f < rem; ++f) yt[f] *= inv;
  }
  for (int k = 0; k < K; ++k) store16(yr + 16 * k, acc[k]);
}
#pragma GCC diagnostic pop
}  // namespace

GNN_CPU_CLONES void spmm_forward_cpu(float* __restrict y, int32_t* __restrict argmax, const float* __restrict x,
                                     const float* __restrict w, const CsrView& g, int64_t F, int64_t ldx, int64_t ldy,
                                     Reduce op, const float* base) {
  GNN_CHECK(!base || base != y, "spmm_forward_cpu: base must not be y (each row is formed in y first)");
  const int64_t S = g.num_rows;
  // row v's aggregate into yr
  auto aggregate = [&](int64_t v, float* __restrict yr) GNN_INLINE {
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    if (op == Reduce::kMax) {
      int32_t* __restrict ar = argmax + v * F;
      if (b == e) {
        for (int64_t f = 0; f < F; ++f) yr[f] = 0.0f, ar[f] = -1;
        return;
      }
      {
        const float* __restrict xr = x + int64_t(g.indices[b]) * ldx;
        const float wp = w ? w[b] : 1.0f;
        for (int64_t f = 0; f < F; ++f) yr[f] = wp * xr[f], ar[f] = b;
      }
      for (int32_t p = b + 1; p < e; ++p) {
        const float* __restrict xr = x + int64_t(g.indices[p]) * ldx;
        const float wp = w ? w[p] : 1.0f;
        for (int64_t f = 0; f < F; ++f) {  // branch-free, so it vectorises: the mask picks val and p
          const float val = wp * xr[f], cur = yr[f];
          const int32_t take = -int32_t(val > cur);
          yr[f] = val > cur ? val : cur;
          ar[f] = (ar[f] & ~take) | (p & take);
        }
      }
      return;
    }
    if (b == e) {
      for (int64_t f = 0; f < F; ++f) yr[f] = 0.0f;
      return;
    }
    // Passes over the row's edges, 64 columns each in registers, the last one (under 64) its 16-column
    // blocks in registers and the rest in yr (sum_cols).
    const bool mean = op == Reduce::kMean;
    const float inv = mean ? 1.0f / float(e - b) : 1.0f;
    const int32_t* ix = g.indices;
    int64_t f0 = 0;
    for (; f0 + 64 <= F; f0 += 64) sum_cols<4, false>(yr + f0, x + f0, w, ix, b, e, ldx, 0, f0 ? 0 : F, mean, inv);
    const int64_t n = F - f0, rem = n % 16, pf = f0 ? 0 : F;
    float* y0 = yr + f0;
    const float* x0 = x + f0;
    if (n == 0) return;
    if (rem == 0) {
      if (n == 16) sum_cols<1, false>(y0, x0, w, ix, b, e, ldx, 0, pf, mean, inv);
      else if (n == 32) sum_cols<2, false>(y0, x0, w, ix, b, e, ldx, 0, pf, mean, inv);
      else sum_cols<3, false>(y0, x0, w, ix, b, e, ldx, 0, pf, mean, inv);
    } else {
      if (n < 16) sum_cols<0, true>(y0, x0, w, ix, b, e, ldx, rem, pf, mean, inv);
      else if (n < 32) sum_cols<1, true>(y0, x0, w, ix, b, e, ldx, rem, pf, mean, inv);
      else if (n < 48) sum_cols<2, true>(y0, x0, w, ix, b, e, ldx, rem, pf, mean, inv);
      else sum_cols<3, true>(y0, x0, w, ix, b, e, ldx, rem, pf, mean, inv);
    }
  };
#pragma omp parallel for schedule(dynamic, kRowsPerTask)
  for (int64_t v = 0; v < S; ++v) {
    float* __restrict yr = y + v * ldy;
    aggregate(v, yr);
    if (base) {  // base + the aggregate, added once the row is formed (it is still in cache)
      const float* __restrict br = base + v * ldy;
      for (int64_t f = 0; f < F; ++f) yr[f] = br[f] + yr[f];
    }
  }
}

// Without base each dx row is zeroed and the terms added into it; with it the row's sum is formed a
// block of kSumCols columns at a time in a local buffer and then added: base + (the sum), the order of
// the reference, of CUDA's kernel and of autograd's accumulate (so an op may add its gradient to the one
// x holds, in place or into a new buffer, with accumulate's bits). Each block walks the row's CSC entries
// again (40 times for SAGE-6th's 20,480 columns), cheap beside the columns' traffic.
constexpr int64_t kSumCols = 512;

GNN_CPU_CLONES void spmm_backward_x_cpu(float* __restrict dx, const float* __restrict dy,
                                        const int32_t* __restrict argmax, const float* __restrict w, const CsrView& g,
                                        int64_t F, int64_t ldx, int64_t ldy, Reduce op, const float* base) {
  const int64_t U = g.num_cols;
#pragma omp parallel for schedule(dynamic, kRowsPerTask)
  for (int64_t u = 0; u < U; ++u) {
    // adds row u's terms over columns f0 .. f0+n-1 into out[0 .. n-1]
    auto add_terms = [&](float* __restrict out, int64_t f0, int64_t n) GNN_INLINE {
      for (int32_t q = g.csc_indptr[u]; q < g.csc_indptr[u + 1]; ++q) {
        const int32_t p = g.csc_to_csr[q], v = g.csc_indices[q];
        const float* __restrict gr = dy + int64_t(v) * ldy + f0;
        float c = w ? w[p] : 1.0f;
        if (op == Reduce::kMean) c /= float(g.indptr[v + 1] - g.indptr[v]);
        if (op == Reduce::kMax) {
          const int32_t* __restrict ar = argmax + int64_t(v) * F + f0;
          for (int64_t f = 0; f < n; ++f) out[f] += float(ar[f] == p) * (c * gr[f]);
        } else {
          for (int64_t f = 0; f < n; ++f) out[f] += c * gr[f];
        }
      }
    };
    float* __restrict dr = dx + u * ldx;
    if (!base) {
      for (int64_t f = 0; f < F; ++f) dr[f] = 0.0f;
      add_terms(dr, 0, F);
      continue;
    }
    for (int64_t f0 = 0; f0 < F; f0 += kSumCols) {
      const int64_t n = std::min(kSumCols, F - f0);
      float acc[kSumCols];
      for (int64_t f = 0; f < n; ++f) acc[f] = 0.0f;
      add_terms(acc, f0, n);
      if (base == dx) {  // in place, through dx alone (dx is restrict)
        for (int64_t f = 0; f < n; ++f) dr[f0 + f] += acc[f];
      } else {
        const float* __restrict br = base + u * ldx + f0;
        for (int64_t f = 0; f < n; ++f) dr[f0 + f] = br[f] + acc[f];
      }
    }
  }
}

GNN_CPU_CLONES void spmm_backward_w_cpu(float* __restrict dw, const float* __restrict dy, const float* __restrict x,
                                        const int32_t* __restrict argmax, const CsrView& g, int64_t F, int64_t ldx,
                                        int64_t ldy, Reduce op) {
  const int64_t S = g.num_rows;
#pragma omp parallel for schedule(dynamic, kRowsPerTask)
  for (int64_t v = 0; v < S; ++v) {
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    const float* __restrict gr = dy + v * ldy;
    for (int32_t p = b; p < e; ++p) {
      const float* __restrict xr = x + int64_t(g.indices[p]) * ldx;
      float acc = 0.0f;
      if (op == Reduce::kMax) {
        const int32_t* __restrict ar = argmax + v * F;
        for (int64_t f = 0; f < F; ++f) acc += float(ar[f] == p) * (gr[f] * xr[f]);
      } else {
        for (int64_t f = 0; f < F; ++f) acc += gr[f] * xr[f];
      }
      dw[p] = op == Reduce::kMean ? acc / float(e - b) : acc;
    }
  }
}

}  // namespace gnn
