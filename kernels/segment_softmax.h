// Softmax over each CSR row's edges, separately for each of H heads, and the GAT edge scores it
// normalises.
//   softmax: y[p, h] = exp(x[p, h] - m[v, h]) / sum_{p' in row v} exp(x[p', h] - m[v, h]),  m = max over row v
//            dx[p, h] = y[p, h] * (dy[p, h] - sum_{p' in row v} y[p', h] dy[p', h])
//   GAT:     s[p, h] = leaky_relu(a_src[src(p), h] + a_dst[v, h], slope)   (a_src, a_dst [N, H]: the
//            per-node halves of a^T [W x_u | W x_v], one GEMV each)
//            da_dst[v, h] = sum_{p in row v} g[p, h];  da_src[u, h] = sum_{q in CSC row u} g[csc_to_csr[q], h]
//            with g = ds * leaky_relu'(pre-activation): no atomics, bitwise stable across thread counts
// x, y, s: [E, H] in CSR order. Empty rows have no edges and produce nothing.
#pragma once
#include <cmath>
#include <limits>

#include "kernels/math_fn.h"
#include "kernels/spmm.h"

namespace gnn {

template <class T>
void segment_softmax_forward_ref(T* y, const T* x, const int32_t* indptr, int64_t S, int64_t H) {
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t h = 0; h < H; ++h) {
      T m = -std::numeric_limits<T>::infinity();
      for (int32_t e = indptr[s]; e < indptr[s + 1]; ++e) m = std::max(m, x[e * H + h]);
      T sum = 0;
      for (int32_t e = indptr[s]; e < indptr[s + 1]; ++e) sum += (y[e * H + h] = math_exp(x[e * H + h] - m));
      for (int32_t e = indptr[s]; e < indptr[s + 1]; ++e) y[e * H + h] /= sum;
    }
  }
}

template <class T>
void segment_softmax_backward_ref(T* dx, const T* y, const T* dy, const int32_t* indptr, int64_t S, int64_t H) {
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t h = 0; h < H; ++h) {
      T dot = 0;
      for (int32_t e = indptr[s]; e < indptr[s + 1]; ++e) dot += y[e * H + h] * dy[e * H + h];
      for (int32_t e = indptr[s]; e < indptr[s + 1]; ++e) dx[e * H + h] = y[e * H + h] * (dy[e * H + h] - dot);
    }
  }
}

template <class T>
void gat_scores_forward_ref(T* s, const T* a_src, const T* a_dst, const CsrView& g, int64_t H, T slope) {
  for (int64_t v = 0; v < g.num_rows; ++v)
    for (int32_t p = g.indptr[v]; p < g.indptr[v + 1]; ++p)
      for (int64_t h = 0; h < H; ++h) {
        const T z = a_src[g.indices[p] * H + h] + a_dst[v * H + h];
        s[p * H + h] = z > T(0) ? z : slope * z;
      }
}

template <class T>
void gat_scores_backward_ref(T* da_src, T* da_dst, const T* ds, const T* a_src, const T* a_dst, const CsrView& g,
                             int64_t H, T slope) {
  auto grad = [&](int64_t p, int64_t v, int64_t h) {
    const T z = a_src[g.indices[p] * H + h] + a_dst[v * H + h];
    return ds[p * H + h] * (z > T(0) ? T(1) : slope);
  };
  for (int64_t v = 0; v < g.num_rows; ++v)
    for (int64_t h = 0; h < H; ++h) {
      T acc = 0;
      for (int32_t p = g.indptr[v]; p < g.indptr[v + 1]; ++p) acc += grad(p, v, h);
      da_dst[v * H + h] = acc;
    }
  for (int64_t u = 0; u < g.num_cols; ++u)
    for (int64_t h = 0; h < H; ++h) {
      T acc = 0;
      for (int32_t q = g.csc_indptr[u]; q < g.csc_indptr[u + 1]; ++q) acc += grad(g.csc_to_csr[q], g.csc_indices[q], h);
      da_src[u * H + h] = acc;
    }
}

void segment_softmax_forward_cpu(float* y, const float* x, const int32_t* indptr, int64_t S, int64_t H);
void segment_softmax_backward_cpu(float* dx, const float* y, const float* dy, const int32_t* indptr, int64_t S,
                                  int64_t H);
void gat_scores_forward_cpu(float* s, const float* a_src, const float* a_dst, const CsrView& g, int64_t H, float slope);
void gat_scores_backward_cpu(float* da_src, float* da_dst, const float* ds, const float* a_src, const float* a_dst,
                             const CsrView& g, int64_t H, float slope);

void segment_softmax_forward_cuda(float* y, const float* x, const int32_t* indptr, int64_t S, int64_t H, Stream stream);
void segment_softmax_backward_cuda(float* dx, const float* y, const float* dy, const int32_t* indptr, int64_t S,
                                   int64_t H, Stream stream);
void gat_scores_forward_cuda(float* s, const float* a_src, const float* a_dst, const CsrView& g, int64_t H, float slope,
                             Stream stream);
void gat_scores_backward_cuda(float* da_src, float* da_dst, const float* ds, const float* a_src, const float* a_dst,
                              const CsrView& g, int64_t H, float slope, Stream stream);

}  // namespace gnn
