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
// mean: gather_rows.h; the unweighted sum, the weighted one and the mean written apart, so that a term's
// coefficient is no branch, and none at all without weights: 5-9% off sum's forward + backward at F = 16,
// 64 and 100, docs/benchmarks.md, fifty-ninth session), or for max formed in the zeroed row; with base the row's sum is formed a
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
          for (int64_t f = 0; f < n; ++f) out[f] += won_term(c * gr[f], ar[f] == p);
        } else {
          for (int64_t f = 0; f < n; ++f) out[f] += c * gr[f];
        }
      }
    };
    float* __restrict dr = dx + u * ldx;
    const int32_t q0 = g.csc_indptr[u], q1 = g.csc_indptr[u + 1];
    if (!base && op != Reduce::kMax && q0 < q1) {  // the sum held in registers (gather_rows.h)
      auto row = [&](int32_t q) GNN_INLINE { return dy + int64_t(g.csc_indices[q]) * ldy; };
      if (op == Reduce::kMean) {
        sum_rows(
            dr, row,
            [&](int32_t q) GNN_INLINE {
              const int32_t v = g.csc_indices[q];
              return (w ? w[g.csc_to_csr[q]] : 1.0f) / float(g.indptr[v + 1] - g.indptr[v]);
            },
            q0, q1, F, false, false);
      } else if (w) {
        sum_rows(dr, row, [&](int32_t q) GNN_INLINE { return w[g.csc_to_csr[q]]; }, q0, q1, F, false, false);
      } else {
        sum_rows(dr, row, [](int32_t) GNN_INLINE { return 1.0f; }, q0, q1, F, false, false);
      }
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
        for (int64_t f = 0; f < F; ++f) acc += won_term(gr[f] * xr[f], ar[f] == p);
      } else {
        for (int64_t f = 0; f < F; ++f) acc += gr[f] * xr[f];
      }
      dw[p] = op == Reduce::kMean ? acc / float(e - b) : acc;
    }
  }
}

}  // namespace gnn
