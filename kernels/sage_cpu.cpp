// Fused SAGE on the CPU. Forward, per block of kRows destination rows (one thread each):
//   h_blk = [mean of in-neighbours | x]  (kept in h for training, or a per-thread buffer; the mean formed
//           in registers as SpMM's: kernels/gather_rows.h)
//   z_blk = h_blk W (one serial GEMM, K = 2F), then bias and activation while it is in cache.
// Backward: whole-matrix products on the saved h (see kernels/sage.h); dh = dz W^T is two products
// (the root half straight into dx, the aggregate half into scratch for the transposed gather). An
// earlier version recomputed h per block in the backward and accumulated dW per block (K = kRows per
// product): 19.8-20.0 ms for forward+backward at N = 10k, F = 128, slower than running the separate
// kernels (19.1 ms).
// The forward's per-thread block buffer is a small host vector; the backward's scratch comes from
// the caller.
#include <algorithm>
#include <vector>

#include "kernels/gather_rows.h"
#include "kernels/sage.h"

namespace gnn {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kChunks = 16;  // fixed partial sums for db, whatever the thread count

// h [rows, 2F] for destination rows i0 .. i0 + rows: the mean of their sources, then their own x.
GNN_INLINE inline void build_h(float* __restrict h, const float* __restrict x, const CsrView& g, int64_t i0,
                               int64_t rows, int64_t F) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t v = i0 + r;
    float* __restrict agg = h + r * 2 * F;
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    if (b == e) {
      for (int64_t f = 0; f < F; ++f) agg[f] = 0.0f;
    } else {
      gather_sum_row(agg, x, nullptr, g.indices, b, e, F, F, true, false);
    }
    const float* __restrict own = x + v * F;
    for (int64_t f = 0; f < F; ++f) agg[F + f] = own[f];
  }
}

// dz = dy * act'(z) on rows [r0, r1), each row's values also added into dbc (restrict row pointers:
// dbc cannot alias dz). Vectorised only with -fno-trapping-math (CMakeLists.txt): otherwise GCC keeps
// relu's select as a branch per element, which mispredicted on the random sign pattern of z and cost
// 3 ms of a 13.6 ms backward at N = 10k, F = 128.
template <Act A>
GNN_CPU_CLONES void dz_rows(float* dz, float* __restrict dbc, const float* dy, const float* z, int64_t r0, int64_t r1,
                            int64_t O, float slope) {
  for (int64_t i = r0; i < r1; ++i) {
    const float* __restrict dyr = dy + i * O;
    const float* __restrict zr = z + i * O;
    float* __restrict dzr = dz + i * O;
    for (int64_t o = 0; o < O; ++o) {
      const float d = dyr[o] * act_derivative(A, zr[o], slope);
      dzr[o] = d;
      dbc[o] += d;
    }
  }
}

}  // namespace

GNN_CPU_CLONES void sage_forward_cpu(float* y, float* z, float* h, const float* x, const CsrView& g, const float* W,
                                     const float* b, int64_t F, int64_t O, Act act, float slope) {
  const int64_t N = g.num_rows, blocks = (N + kRows - 1) / kRows;
#pragma omp parallel
  {
    std::vector<float> scratch(h ? 0 : size_t(kRows * 2 * F));
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kRows, rows = std::min(kRows, N - i0);
      float* hb = h ? h + i0 * 2 * F : scratch.data();  // kept for the backward, or a per-thread buffer
      build_h(hb, x, g, i0, rows, F);
      float* zb = (z ? z : y) + i0 * O;
      gemm_cpu_serial(false, false, rows, O, 2 * F, 1.0f, hb, 2 * F, W, O, 0.0f, zb, O);
      float* yb = y + i0 * O;
      dispatch_act(act, [&](auto A) GNN_INLINE {  // bias and activation while the block is in cache
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < O; ++o) {
            const float v = zb[r * O + o] + (b ? b[o] : 0.0f);
            if (z) zb[r * O + o] = v;
            yb[r * O + o] = act_value(decltype(A)::value, v, slope);
          }
        }
      });
    }
  }
}

int64_t sage_backward_workspace(int64_t N, int64_t F, int64_t O) { return N * O + N * F + kChunks * O; }

GNN_CPU_CLONES void sage_backward_cpu(float* dx, float* dW, float* db, const float* dy, const float* z, const float* h,
                                      const CsrView& g, const float* W, int64_t F, int64_t O, Act act, float slope,
                                      float* workspace) {
  const int64_t N = g.num_rows;
  const int64_t chunks = std::max<int64_t>(1, std::min(kChunks, N));
  float* dz = workspace;  // [N, O]
  float* dagg = dz + N * O;  // [N, F]
  float* db_part = dagg + N * F;  // [chunks, O]
  std::fill(db_part, db_part + chunks * O, 0.0f);
  // dz = dy * act'(z), with db summed per fixed chunk of rows.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * N / chunks, r1 = (c + 1) * N / chunks;
    dispatch_act(act,
                 [&](auto A) GNN_INLINE { dz_rows<decltype(A)::value>(dz, db_part + c * O, dy, z, r0, r1, O, slope); });
  }
  if (db)
    for (int64_t o = 0; o < O; ++o) {
      float s = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) s += db_part[c * O + o];
      db[o] = s;
    }
  gemm_cpu(true, false, 2 * F, O, N, 1.0f, h, 2 * F, dz, O, 0.0f, dW, O);  // dW = h^T dz
  // dh = dz W^T = [dagg | droot] as two products, so the root half lands in dx without a copy.
  gemm_cpu(false, true, N, F, O, 1.0f, dz, O, W + F * O, O, 0.0f, dx, F);  // dx = dz W_root^T
  gemm_cpu(false, true, N, F, O, 1.0f, dz, O, W, O, 0.0f, dagg, F);  // dagg = dz W_agg^T
  // the aggregate part, gathered back to the sources and added
  spmm_backward_x_cpu(dx, dagg, nullptr, nullptr, g, F, F, F, Reduce::kMean, /*base=*/dx);
}

// The narrowing layer's mean after its product (sage_combine): one output row per task, each config's O
// values formed from the neighbours' first halves in CSR order (the first edge as 0 + x), scaled, then the
// root half and the bias added while the row is in cache. Rows go to the threads a few at a time: a row is
// C*O values a neighbour (32 KB in layout-tgraph's [168, 64 x 128]), so a task of 32 rows, as the SpMM's,
// would leave one thread with most of a small graph.
static int64_t combine_rows_per_task(int64_t W) { return std::clamp<int64_t>(4096 / std::max<int64_t>(W, 1), 1, 64); }

GNN_CPU_CLONES void sage_combine_forward_cpu(float* y, const float* q, const float* b, const CsrView& g, int64_t C,
                                             int64_t O) {
  const int64_t W = C * O, chunk = combine_rows_per_task(W);
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t v = 0; v < g.num_rows; ++v) {
    float* __restrict yr = y + v * W;
    const int32_t e0 = g.indptr[v], e1 = g.indptr[v + 1];
    if (e0 == e1) {
      for (int64_t j = 0; j < W; ++j) yr[j] = 0.0f;
    } else {
      for (int32_t p = e0; p < e1; ++p) {
        const float* __restrict xr = q + int64_t(g.indices[p]) * 2 * W;
        for (int64_t c = 0; c < C; ++c) {
          float* __restrict yc = yr + c * O;
          const float* __restrict xc = xr + c * 2 * O;
          if (p == e0)  // 0 + x, the reference's first sum: a -0 becomes +0 there too
            for (int64_t o = 0; o < O; ++o) yc[o] = 0.0f + xc[o];
          else
            for (int64_t o = 0; o < O; ++o) yc[o] += xc[o];
        }
      }
      const float inv = 1.0f / float(e1 - e0);
      for (int64_t j = 0; j < W; ++j) yr[j] *= inv;
    }
    const float* __restrict rr = q + v * 2 * W + O;
    for (int64_t c = 0; c < C; ++c) {
      float* __restrict yc = yr + c * O;
      const float* __restrict rc = rr + c * 2 * O;
      if (b)
        for (int64_t o = 0; o < O; ++o) yc[o] = yc[o] + rc[o] + b[o];
      else
        for (int64_t o = 0; o < O; ++o) yc[o] = yc[o] + rc[o];
    }
  }
}

GNN_CPU_CLONES void sage_combine_backward_cpu(float* dq, const float* dy, const CsrView& g, int64_t C, int64_t O) {
  const int64_t W = C * O, chunk = combine_rows_per_task(W);
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t u = 0; u < g.num_cols; ++u) {
    float* __restrict dr = dq + u * 2 * W;
    const int32_t k0 = g.csc_indptr[u], k1 = g.csc_indptr[u + 1];
    if (k0 == k1)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t o = 0; o < O; ++o) dr[c * 2 * O + o] = 0.0f;
    for (int32_t k = k0; k < k1; ++k) {  // the first edge as 0 + s dy, the reference's first sum: no zeroing pass
      const int32_t v = g.csc_indices[k];
      const float s = 1.0f / float(g.indptr[v + 1] - g.indptr[v]);
      const float* __restrict gr = dy + int64_t(v) * W;
      for (int64_t c = 0; c < C; ++c) {
        float* __restrict dc = dr + c * 2 * O;
        const float* __restrict gc = gr + c * O;
        if (k == k0)
          for (int64_t o = 0; o < O; ++o) dc[o] = 0.0f + s * gc[o];
        else
          for (int64_t o = 0; o < O; ++o) dc[o] += s * gc[o];
      }
    }
    const float* __restrict own = dy + u * W;
    for (int64_t c = 0; c < C; ++c) {
      float* __restrict dc = dr + c * 2 * O + O;
      const float* __restrict gc = own + c * O;
      for (int64_t o = 0; o < O; ++o) dc[o] = gc[o];
    }
  }
}

}  // namespace gnn
