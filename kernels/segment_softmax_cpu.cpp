// Segment softmax and GAT scores on the CPU: rows (segments) in dynamic blocks, heads in the inner
// loop; the backward of the source scores walks the CSC, so every sum has one owner and one order.
#include <vector>

#include "kernels/segment_softmax.h"

namespace gnn {
namespace {
constexpr int64_t kRows = 64;
}

GNN_CPU_CLONES void segment_softmax_forward_cpu(float* __restrict y, const float* __restrict x,
                                                const int32_t* __restrict indptr, int64_t S, int64_t H) {
#pragma omp parallel
  {
    std::vector<float> m(static_cast<size_t>(H)), sum(static_cast<size_t>(H));
#pragma omp for schedule(dynamic, kRows)
    for (int64_t s = 0; s < S; ++s) {
      const int32_t b = indptr[s], e = indptr[s + 1];
      if (b == e) continue;
      for (int64_t h = 0; h < H; ++h) m[size_t(h)] = x[int64_t(b) * H + h], sum[size_t(h)] = 0.0f;
      for (int32_t p = b + 1; p < e; ++p)
        for (int64_t h = 0; h < H; ++h) m[size_t(h)] = std::max(m[size_t(h)], x[int64_t(p) * H + h]);
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < H; ++h) {
          const float v = vm::exp(x[int64_t(p) * H + h] - m[size_t(h)]);
          y[int64_t(p) * H + h] = v;
          sum[size_t(h)] += v;
        }
      for (int64_t h = 0; h < H; ++h) sum[size_t(h)] = 1.0f / sum[size_t(h)];
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < H; ++h) y[int64_t(p) * H + h] *= sum[size_t(h)];
    }
  }
}

GNN_CPU_CLONES void segment_softmax_backward_cpu(float* __restrict dx, const float* __restrict y,
                                                 const float* __restrict dy, const int32_t* __restrict indptr,
                                                 int64_t S, int64_t H) {
#pragma omp parallel
  {
    std::vector<float> dot(static_cast<size_t>(H));
#pragma omp for schedule(dynamic, kRows)
    for (int64_t s = 0; s < S; ++s) {
      const int32_t b = indptr[s], e = indptr[s + 1];
      for (int64_t h = 0; h < H; ++h) dot[size_t(h)] = 0.0f;
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < H; ++h) dot[size_t(h)] += y[int64_t(p) * H + h] * dy[int64_t(p) * H + h];
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t i = int64_t(p) * H + h;
          dx[i] = y[i] * (dy[i] - dot[size_t(h)]);
        }
    }
  }
}

GNN_CPU_CLONES void gat_scores_forward_cpu(float* __restrict s, const float* __restrict a_src,
                                           const float* __restrict a_dst, const CsrView& g, int64_t H, float slope) {
#pragma omp parallel for schedule(dynamic, kRows)
  for (int64_t v = 0; v < g.num_rows; ++v)
    for (int32_t p = g.indptr[v]; p < g.indptr[v + 1]; ++p) {
      const float* as = a_src + int64_t(g.indices[p]) * H;
      const float* ad = a_dst + v * H;
      for (int64_t h = 0; h < H; ++h) {
        const float z = as[h] + ad[h];
        s[int64_t(p) * H + h] = z > 0.0f ? z : slope * z;
      }
    }
}

GNN_CPU_CLONES void gat_scores_backward_cpu(float* __restrict da_src, float* __restrict da_dst,
                                            const float* __restrict ds, const float* __restrict a_src,
                                            const float* __restrict a_dst, const CsrView& g, int64_t H, float slope) {
#pragma omp parallel for schedule(dynamic, kRows)
  for (int64_t v = 0; v < g.num_rows; ++v) {
    float* dd = da_dst + v * H;
    for (int64_t h = 0; h < H; ++h) dd[h] = 0.0f;
    for (int32_t p = g.indptr[v]; p < g.indptr[v + 1]; ++p) {
      const float* as = a_src + int64_t(g.indices[p]) * H;
      for (int64_t h = 0; h < H; ++h) {
        const float z = as[h] + a_dst[v * H + h];
        dd[h] += ds[int64_t(p) * H + h] * (z > 0.0f ? 1.0f : slope);
      }
    }
  }
#pragma omp parallel for schedule(dynamic, kRows)
  for (int64_t u = 0; u < g.num_cols; ++u) {
    float* du = da_src + u * H;
    for (int64_t h = 0; h < H; ++h) du[h] = 0.0f;
    for (int32_t q = g.csc_indptr[u]; q < g.csc_indptr[u + 1]; ++q) {
      const int32_t p = g.csc_to_csr[q], v = g.csc_indices[q];
      for (int64_t h = 0; h < H; ++h) {
        const float z = a_src[u * H + h] + a_dst[int64_t(v) * H + h];
        du[h] += ds[int64_t(p) * H + h] * (z > 0.0f ? 1.0f : slope);
      }
    }
  }
}

}  // namespace gnn
