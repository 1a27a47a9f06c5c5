// Row-wise operations on x [R, F]:
//   softmax:      y = exp(x - max) / sum;             dx = y * (dy - <y, dy>)
//   log_softmax:  y = x - max - log(sum exp(x - max)); dx = dy - softmax(x) * sum(dy)
//   l2_normalize: y = x / max(||x||, eps);            dx = (dy - y <y, dy>) / ||x||  (dy / eps when clamped)
//   layer_norm:   y = (x - mean) / sqrt(var + eps) * gamma + beta  (gamma, beta [F] or null)
//                 dxhat = dy * gamma;  dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sqrt(var + eps)
//                 dgamma = sum_r dy * xhat, dbeta = sum_r dy   (per fixed row chunk, then in order)
#pragma once
#include <algorithm>
#include <cmath>

#include "base/common.h"

namespace gnn {

enum class RowOp { kSoftmax, kLogSoftmax, kL2Normalize };

template <class T>
void rowwise_forward_ref(T* y, const T* x, int64_t R, int64_t F, RowOp op, T eps) {
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * F;
    T* yr = y + r * F;
    if (op == RowOp::kL2Normalize) {
      T ss = 0;
      for (int64_t f = 0; f < F; ++f) ss += xr[f] * xr[f];
      const T n = std::max(std::sqrt(ss), eps);
      for (int64_t f = 0; f < F; ++f) yr[f] = xr[f] / n;
      continue;
    }
    if (F == 0) continue;
    T m = xr[0];
    for (int64_t f = 1; f < F; ++f) m = std::max(m, xr[f]);
    T sum = 0;
    for (int64_t f = 0; f < F; ++f) sum += std::exp(xr[f] - m);
    for (int64_t f = 0; f < F; ++f) yr[f] = op == RowOp::kSoftmax ? std::exp(xr[f] - m) / sum : xr[f] - m - std::log(sum);
  }
}

template <class T>
void rowwise_backward_ref(T* dx, const T* y, const T* dy, const T* x, int64_t R, int64_t F, RowOp op, T eps) {
  for (int64_t r = 0; r < R; ++r) {
    const T *yr = y + r * F, *gr = dy + r * F, *xr = x + r * F;
    T* dr = dx + r * F;
    if (op == RowOp::kSoftmax) {
      T dot = 0;
      for (int64_t f = 0; f < F; ++f) dot += yr[f] * gr[f];
      for (int64_t f = 0; f < F; ++f) dr[f] = yr[f] * (gr[f] - dot);
    } else if (op == RowOp::kLogSoftmax) {
      T sum = 0;
      for (int64_t f = 0; f < F; ++f) sum += gr[f];
      for (int64_t f = 0; f < F; ++f) dr[f] = gr[f] - std::exp(yr[f]) * sum;
    } else {
      T ss = 0, dot = 0;
      for (int64_t f = 0; f < F; ++f) ss += xr[f] * xr[f], dot += yr[f] * gr[f];
      const T n = std::sqrt(ss);
      for (int64_t f = 0; f < F; ++f) dr[f] = n > eps ? (gr[f] - yr[f] * dot) / n : gr[f] / eps;
    }
  }
}

template <class T>
void layer_norm_forward_ref(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int64_t R, int64_t F,
                            T eps) {
  for (int64_t r = 0; r < R; ++r) {
    T m = 0, v = 0;
    for (int64_t f = 0; f < F; ++f) m += x[r * F + f];
    m /= T(F);
    for (int64_t f = 0; f < F; ++f) v += (x[r * F + f] - m) * (x[r * F + f] - m);
    const T rs = T(1) / std::sqrt(v / T(F) + eps);
    mean[r] = m, rstd[r] = rs;
    for (int64_t f = 0; f < F; ++f)
      y[r * F + f] = (x[r * F + f] - m) * rs * (gamma ? gamma[f] : T(1)) + (beta ? beta[f] : T(0));
  }
}

template <class T>
void layer_norm_backward_ref(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                             const T* gamma, int64_t R, int64_t F) {
  if (dgamma)
    for (int64_t f = 0; f < F; ++f) dgamma[f] = 0;
  if (dbeta)
    for (int64_t f = 0; f < F; ++f) dbeta[f] = 0;
  for (int64_t r = 0; r < R; ++r) {
    T a = 0, b = 0;
    for (int64_t f = 0; f < F; ++f) {
      const T xh = (x[r * F + f] - mean[r]) * rstd[r], g = dy[r * F + f] * (gamma ? gamma[f] : T(1));
      a += g, b += g * xh;
      if (dgamma) dgamma[f] += dy[r * F + f] * xh;
      if (dbeta) dbeta[f] += dy[r * F + f];
    }
    a /= T(F), b /= T(F);
    for (int64_t f = 0; f < F; ++f) {
      const T xh = (x[r * F + f] - mean[r]) * rstd[r], g = dy[r * F + f] * (gamma ? gamma[f] : T(1));
      dx[r * F + f] = (g - a - xh * b) * rstd[r];
    }
  }
}

void rowwise_forward_cpu(float* y, const float* x, int64_t R, int64_t F, RowOp op, float eps);
void rowwise_backward_cpu(float* dx, const float* y, const float* dy, const float* x, int64_t R, int64_t F, RowOp op,
                          float eps);
// CUDA: one warp per row, lanes striding over F; the row's sums combine the lanes in a fixed
// butterfly, so the same input gives the same bits on every run.
void rowwise_forward_cuda(float* y, const float* x, int64_t R, int64_t F, RowOp op, float eps, Stream stream);
void rowwise_backward_cuda(float* dx, const float* y, const float* dy, const float* x, int64_t R, int64_t F, RowOp op,
                           float eps, Stream stream);
void layer_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t R, int64_t F, float eps);
void layer_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* mean, const float* rstd, const float* gamma, int64_t R, int64_t F);
// CUDA layer norm: a warp per row; dgamma and dbeta are column sums (in a fixed order) of dy * xhat,
// staged in workspace [R, F], and of dy. workspace: layer_norm_backward_workspace_cuda(R, F) floats
// (may be null when dgamma and dbeta both are).
int64_t layer_norm_backward_workspace_cuda(int64_t R, int64_t F);
void layer_norm_forward_cuda(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                             int64_t R, int64_t F, float eps, Stream stream);
void layer_norm_backward_cuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* mean, const float* rstd, const float* gamma, int64_t R, int64_t F,
                              float* workspace, Stream stream);

}  // namespace gnn
