// Gather SpMM on the CPU: one thread per block of destination rows (dynamic, so a hub row does not hold
// a whole static chunk back). Sum and mean form each output row column by column as 0 plus the edges'
// terms in edge order (the reference's order), max as the first term replaced by each greater one; both
// hold a row's 16-column blocks, up to 64 columns at a time, in registers over a pass of its edges and
// store them once, then its last F % 16 in a second pass (4-lane vectors, the last F % 4 formed in the
// row: kernels/gather_rows.h). The compiler vectorises the column loops (AVX2 or AVX-512 where the CPU
// has them: GNN_CPU_CLONES). Sum and mean prefetch the next edge's source row; that measured as neither
// a gain nor a loss here (spmm-mean, N = 10k and 100k, F = 128), and helps where memory latency is
// higher. Max does not: the prefetch cost it 5-15% at F = 8 and 16 with x in cache and gained nothing
// at N = 2M (docs/benchmarks.md, fifty-seventh session).
#include <algorithm>
#include <bit>
#include <vector>

#include "base/error.h"
#include "kernels/gather_rows.h"
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

// The max's backward term: t where the edge won its column, else +0. The term's bits masked, not
// multiplied by the mask: an infinite dy of an edge that did not win must give no NaN (a select measured
// 7% slower than the product; the mask as fast).
GNN_INLINE inline float won_term(float t, bool won) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(t) & -uint32_t(won));
}

// sum_f a[f] b[f] over F columns, the edge weights' gradient: 16 running sums, lane j the products of
// columns j, j + 16, ... in order, folded 16 -> 8 -> 4 -> 2 -> 1 (lane j plus lane j + half), then the
// last F % 16 products added in order. A v16 is 16 lanes in every clone, so every CPU gives the same
// bits; below 16 columns it is the reference's sum in column order. (The plain sum in order is one chain
// of dependent additions, which no compiler may reorder: it made the weights' gradient 5x the forward.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // (a v16 by value between inlined helpers: gather_rows.h)
GNN_INLINE inline float dot_row(const float* __restrict a, const float* __restrict b, int64_t F) {
  using gather_detail::lanes;
  const int64_t F16 = F - F % 16;
  float acc = 0.0f;
  if (F16 > 0) {
    gather_detail::v16 s = gather_detail::v16{} + lanes<16>::load(a) * lanes<16>::load(b);  // (0 + : -0 sums to +0)
    for (int64_t f = 16; f < F16; f += 16) s += lanes<16>::load(a + f) * lanes<16>::load(b + f);
    const lanes<8>::f s8 = __builtin_shufflevector(s, s, 0, 1, 2, 3, 4, 5, 6, 7) +
                           __builtin_shufflevector(s, s, 8, 9, 10, 11, 12, 13, 14, 15);
    const lanes<4>::f s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    acc = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  }
  for (int64_t f = F16; f < F; ++f) acc += a[f] * b[f];
  return acc;
}
#pragma GCC diagnostic pop

// x's gradient, row u over the CSC (sum and mean), in registers (gather_rows.h): out[0 .. F) = the sum of
// dy's rows of u's edges (from col on, stride ld) times w[p * H + h] for the edge's CSR position p (1
// without w), each over its target's degree for mean. u has edges (sum_rows needs b < e). Each case
// written apart, so a term's coefficient is no branch, and none at all for the unweighted sum (2-9% off
// sum's forward + backward at F = 16 to 100, docs/benchmarks.md, fifty-ninth session).
GNN_INLINE inline void csc_row_sum(float* __restrict out, const float* __restrict dy, int64_t ld, int64_t col,
                                   const float* __restrict w, int64_t H, int64_t h, const CsrView& g, int64_t u,
                                   int64_t F, bool mean) {
  const int32_t q0 = g.csc_indptr[u], q1 = g.csc_indptr[u + 1];
  auto row = [&](int32_t q) GNN_INLINE { return dy + int64_t(g.csc_indices[q]) * ld + col; };
  auto weight = [&](int32_t q) GNN_INLINE { return w[int64_t(g.csc_to_csr[q]) * H + h]; };
  auto degree = [&](int32_t q) GNN_INLINE {
    const int32_t v = g.csc_indices[q];
    return float(g.indptr[v + 1] - g.indptr[v]);
  };
  if (mean && w) {
    sum_rows(out, row, [&](int32_t q) GNN_INLINE { return weight(q) / degree(q); }, q0, q1, F, false, 0);
  } else if (mean) {
    sum_rows(out, row, [&](int32_t q) GNN_INLINE { return 1.0f / degree(q); }, q0, q1, F, false, 0);
  } else if (w) {
    sum_rows(out, row, weight, q0, q1, F, false, 0);
  } else {
    sum_rows(out, row, [](int32_t) GNN_INLINE { return 1.0f; }, q0, q1, F, false, 0);
  }
}

// dr = br + s over n columns, or dr += s where br is null (in place, through dr alone: dr is restrict)
GNN_INLINE inline void add_base(float* __restrict dr, const float* __restrict br, const float* __restrict s,
                                int64_t n) {
  if (!br) {
    for (int64_t f = 0; f < n; ++f) dr[f] += s[f];
  } else {
    for (int64_t f = 0; f < n; ++f) dr[f] = br[f] + s[f];
  }
}
}  // namespace

GNN_CPU_CLONES void spmm_forward_cpu(float* __restrict y, int32_t* __restrict argmax, const float* __restrict x,
                                     const float* __restrict w, const CsrView& g, int64_t F, int64_t ldx, int64_t ldy,
                                     Reduce op, const float* base) {
  GNN_CHECK(!base || base != y, "spmm_forward_cpu: base must not be y (each row is formed in y first)");
  const int64_t S = g.num_rows;
  const int lanes = max_lanes();
  // row v's aggregate into yr
  auto aggregate = [&](int64_t v, float* __restrict yr) GNN_INLINE {
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    int32_t* __restrict ar = op == Reduce::kMax ? argmax + v * F : nullptr;
    if (b == e) {  // no edges: 0, and for max no edge (-1)
      for (int64_t f = 0; f < F; ++f) yr[f] = 0.0f;
      if (ar) std::fill(ar, ar + F, -1);
    } else if (ar) {
      gather_max_row(yr, ar, x, w, g.indices, b, e, ldx, F, lanes);
    } else {
      gather_sum_row(yr, x, w, g.indices, b, e, ldx, F, op == Reduce::kMean, true);
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

// Without base each dx row's sum, 0 + its terms in CSC order, is held in registers and stored (sum and
// mean: csc_row_sum), or for max formed in the zeroed row; with base the row's sum is formed a block of
// kSumCols columns at a time in a local buffer and then added: base + (the sum), the order of the
// reference, of CUDA's kernel and of autograd's accumulate (so an op may add its gradient to the one x
// holds, in place or into a new buffer, with accumulate's bits). Each block walks the row's CSC entries
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
          for (int64_t f = 0; f < n; ++f) out[f] += won_term(c * gr[f], ar[f] == p);
        } else {
          for (int64_t f = 0; f < n; ++f) out[f] += c * gr[f];
        }
      }
    };
    float* __restrict dr = dx + u * ldx;
    const int32_t q0 = g.csc_indptr[u], q1 = g.csc_indptr[u + 1];
    if (!base && op != Reduce::kMax && q0 < q1) {  // the sum held in registers
      csc_row_sum(dr, dy, ldy, 0, w, 1, 0, g, u, F, op == Reduce::kMean);
      continue;
    }
    if (!base) {
      for (int64_t f = 0; f < F; ++f) dr[f] = 0.0f;
      add_terms(dr, 0, F);
      continue;
    }
    for (int64_t f0 = 0; f0 < F; f0 += kSumCols) {
      const int64_t n = std::min(kSumCols, F - f0);
      alignas(64) float acc[kSumCols];
      for (int64_t f = 0; f < n; ++f) acc[f] = 0.0f;
      add_terms(acc, f0, n);
      add_base(dr + f0, base == dx ? nullptr : base + u * ldx + f0, acc, n);
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
      if (op == Reduce::kMax) {  // (in column order: the max's weights are rare)
        const int32_t* __restrict ar = argmax + v * F;
        for (int64_t f = 0; f < F; ++f) acc += won_term(gr[f] * xr[f], ar[f] == p);
      } else {
        acc = dot_row(gr, xr, F);
      }
      dw[p] = op == Reduce::kMean ? acc / float(e - b) : acc;
    }
  }
}

// Every head in one walk of each row (GAT's aggregation): row v's heads one after another, each a
// sum_rows over its Fh columns with its weight column h of w [E, H], so a row's edges and its sources'
// rows are read while in cache rather than once per head over the whole graph; each head's sum has the
// bits of spmm_forward_cpu on its columns (sum_rows in both).
GNN_CPU_CLONES void spmm_heads_forward_cpu(float* __restrict y, const float* __restrict x, const float* __restrict w,
                                           const CsrView& g, int64_t H, int64_t Fh, Reduce op) {
  GNN_CHECK(op != Reduce::kMax, "spmm_heads_forward_cpu: sum or mean, not max");
  const int64_t W = H * Fh;
#pragma omp parallel for schedule(dynamic, kRowsPerTask)
  for (int64_t v = 0; v < g.num_rows; ++v) {
    float* __restrict yr = y + v * W;
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    if (b == e) {
      for (int64_t f = 0; f < W; ++f) yr[f] = 0.0f;
      continue;
    }
    for (int64_t h = 0; h < H; ++h)  // (head 0 prefetches the next source's whole row)
      sum_rows(
          yr + h * Fh, [&](int32_t p) GNN_INLINE { return x + int64_t(g.indices[p]) * W + h * Fh; },
          [&](int32_t p) GNN_INLINE { return w[int64_t(p) * H + h]; }, b, e, Fh, op == Reduce::kMean,
          h == 0 ? W : 0);
  }
}

// With base (dx itself, or another [N, H*Fh]): dx = base + each head's sum, the sum formed first in a
// buffer, as spmm_backward_x_cpu's base.
GNN_CPU_CLONES void spmm_heads_backward_x_cpu(float* __restrict dx, const float* __restrict dy,
                                              const float* __restrict w, const CsrView& g, int64_t H, int64_t Fh,
                                              Reduce op, const float* base) {
  GNN_CHECK(op != Reduce::kMax, "spmm_heads_backward_x_cpu: sum or mean, not max");
  const int64_t W = H * Fh;
#pragma omp parallel
  {
    std::vector<float> sum(base ? size_t(Fh) : 0);
#pragma omp for schedule(dynamic, kRowsPerTask)
    for (int64_t u = 0; u < g.num_cols; ++u) {
      float* __restrict dr = dx + u * W;
      const int32_t q0 = g.csc_indptr[u], q1 = g.csc_indptr[u + 1];
      if (q0 == q1) {
        if (base == dx) {  // base + 0 (a -0 becomes +0, as the reference's sum)
          for (int64_t f = 0; f < W; ++f) dr[f] += 0.0f;
        } else {
          for (int64_t f = 0; f < W; ++f) dr[f] = base ? base[u * W + f] + 0.0f : 0.0f;
        }
        continue;
      }
      for (int64_t h = 0; h < H; ++h) {
        float* __restrict out = base ? sum.data() : dr + h * Fh;
        csc_row_sum(out, dy, W, h * Fh, w, H, h, g, u, Fh, op == Reduce::kMean);
        if (base) add_base(dr + h * Fh, base == dx ? nullptr : base + u * W + h * Fh, out, Fh);
      }
    }
  }
}

GNN_CPU_CLONES void spmm_heads_backward_w_cpu(float* __restrict dw, const float* __restrict dy,
                                              const float* __restrict x, const CsrView& g, int64_t H, int64_t Fh,
                                              Reduce op) {
  GNN_CHECK(op != Reduce::kMax, "spmm_heads_backward_w_cpu: sum or mean, not max");
  const int64_t W = H * Fh;
#pragma omp parallel for schedule(dynamic, kRowsPerTask)
  for (int64_t v = 0; v < g.num_rows; ++v) {
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    const float* __restrict gr = dy + v * W;
    for (int32_t p = b; p < e; ++p) {
      const float* __restrict xr = x + int64_t(g.indices[p]) * W;
      // (the next source's row prefetched: the weights' gradient 8-25% faster at H = 4 and 8, 16 columns
      // a head; the same in spmm_backward_w_cpu, 64-100 columns, measured 2-3% slower)
      if (p + 1 < e) gather_detail::prefetch_row(x + int64_t(g.indices[p + 1]) * W, W);
      for (int64_t h = 0; h < H; ++h) {
        const float acc = dot_row(gr + h * Fh, xr + h * Fh, Fh);
        dw[int64_t(p) * H + h] = op == Reduce::kMean ? acc / float(e - b) : acc;
      }
    }
  }
}

}  // namespace gnn
