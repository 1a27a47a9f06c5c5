// Graph instance norm: per graph g (node rows graph_ptr[g] .. graph_ptr[g+1]-1) and channel f,
//   y = (x - mean_g) / sqrt(var_g + eps) * gamma[f] + beta[f]   (gamma, beta [F] or null)
//   dxhat = dy * gamma;  dx = (dxhat - mean_g(dxhat) - xhat * mean_g(dxhat * xhat)) * rstd_g
//   dgamma = sum over nodes of dy * xhat, dbeta = sum of dy (per graph, then graphs in order)
// x, y, dx [N, F]; mean, rstd [G, F] (kept by the forward for the backward). A graph with no rows
// gives mean 0 and rstd 1/sqrt(eps).
#pragma once
#include <cmath>

#include "base/common.h"

namespace gnn {

template <class T>
void instance_norm_forward_ref(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta,
                               const int64_t* graph_ptr, int64_t G, int64_t F, T eps) {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    for (int64_t f = 0; f < F; ++f) {
      T m = 0, v = 0;
      for (int64_t i = b; i < e; ++i) m += x[i * F + f];
      m = n ? m / T(n) : T(0);
      for (int64_t i = b; i < e; ++i) v += (x[i * F + f] - m) * (x[i * F + f] - m);
      const T rs = T(1) / std::sqrt((n ? v / T(n) : T(0)) + eps);
      mean[g * F + f] = m, rstd[g * F + f] = rs;
      for (int64_t i = b; i < e; ++i)
        y[i * F + f] = (x[i * F + f] - m) * rs * (gamma ? gamma[f] : T(1)) + (beta ? beta[f] : T(0));
    }
  }
}

template <class T>
void instance_norm_backward_ref(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                                const T* gamma, const int64_t* graph_ptr, int64_t G, int64_t F) {
  for (int64_t f = 0; f < F; ++f) {
    if (dgamma) dgamma[f] = 0;
    if (dbeta) dbeta[f] = 0;
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    for (int64_t f = 0; f < F; ++f) {
      const T m = mean[g * F + f], rs = rstd[g * F + f], gm = gamma ? gamma[f] : T(1);
      T s1 = 0, s2 = 0;
      for (int64_t i = b; i < e; ++i) {
        const T xh = (x[i * F + f] - m) * rs, d = dy[i * F + f];
        s1 += d * gm, s2 += d * gm * xh;
        if (dgamma) dgamma[f] += d * xh;
        if (dbeta) dbeta[f] += d;
      }
      if (n) s1 /= T(n), s2 /= T(n);
      for (int64_t i = b; i < e; ++i) {
        const T xh = (x[i * F + f] - m) * rs;
        dx[i * F + f] = (dy[i * F + f] * gm - s1 - xh * s2) * rs;
      }
    }
  }
}

void instance_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                               const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, float eps);
void instance_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                const float* mean, const float* rstd, const float* gamma, const int64_t* graph_ptr,
                                int64_t G, int64_t F);
// CUDA: a block of 8 warps per (graph, 32 channels) strides over the graph's rows; the warps' partial
// sums are combined in warp order (the same bits every run). dgamma and dbeta are summed per graph
// into workspace [2, G, F] and then over graphs in order, as the CPU does.
void instance_norm_forward_cuda(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, float eps,
                                Stream stream);
void instance_norm_backward_cuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                 const float* mean, const float* rstd, const float* gamma, const int64_t* graph_ptr,
                                 int64_t G, int64_t F, float* workspace, Stream stream);

}  // namespace gnn
