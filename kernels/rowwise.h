// Row-wise operations on x [R, F]:
//   softmax:      y = exp(x - max) / sum;             dx = y * (dy - <y, dy>)
//   log_softmax:  y = x - max - log(sum exp(x - max)); dx = dy - softmax(x) * sum(dy)
//   l2_normalize: y = x / max(||x||, eps);            dx = (dy - y <y, dy>) / ||x||  (dy / eps when clamped)
// (layer norm, also per row: kernels/layer_norm.h)
// Softmax's and log-softmax's max and sums over a row run in kernels/lane_sum.h's order (l2_normalize's
// still one chain: three recipes run it, and a new order would move their bits). A NaN gives a row of NaN.
#pragma once
#include <algorithm>
#include <cmath>

#include "base/common.h"
#include "kernels/lane_sum.h"
#include "kernels/math_fn.h"

namespace gnn {

enum class RowOp { kSoftmax, kLogSoftmax, kL2Normalize };

// Forced inline, like every per-element chain of kernels/math_fn.h: rowwise_cpu.cpp's clones must
// compile these loops for their own ISA (left out of line they ran as baseline code, whose every
// multiply-add in vmath's exp and log is a call to glibc's fmaf).
template <class T>
GNN_INLINE inline void rowwise_forward_ref(T* y, const T* x, int64_t R, int64_t F, RowOp op, T eps) {
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
    const T m = lane_reduce<T>(
        F, -INFINITY, [&](int64_t f) GNN_INLINE { return xr[f]; }, [](T a, T b) GNN_INLINE { return std::max(a, b); });
    const T sum = lane_sum<T>(F, [&](int64_t f) GNN_INLINE { return math_exp(xr[f] - m); });
    if (op == RowOp::kSoftmax) {
      for (int64_t f = 0; f < F; ++f) yr[f] = math_exp(xr[f] - m) / sum;
    } else {
      const T ls = math_log(sum);
      for (int64_t f = 0; f < F; ++f) yr[f] = xr[f] - m - ls;
    }
  }
}

template <class T>
GNN_INLINE inline void rowwise_backward_ref(T* dx, const T* y, const T* dy, const T* x, int64_t R, int64_t F, RowOp op,
                                            T eps) {
  for (int64_t r = 0; r < R; ++r) {
    const T *yr = y + r * F, *gr = dy + r * F, *xr = x + r * F;
    T* dr = dx + r * F;
    if (op == RowOp::kSoftmax) {
      const T dot = lane_sum<T>(F, [&](int64_t f) GNN_INLINE { return yr[f] * gr[f]; });
      for (int64_t f = 0; f < F; ++f) dr[f] = yr[f] * (gr[f] - dot);
    } else if (op == RowOp::kLogSoftmax) {
      const T sum = lane_sum<T>(F, [&](int64_t f) GNN_INLINE { return gr[f]; });
      for (int64_t f = 0; f < F; ++f) dr[f] = gr[f] - math_exp(yr[f]) * sum;
    } else {
      T ss = 0, dot = 0;
      for (int64_t f = 0; f < F; ++f) ss += xr[f] * xr[f], dot += yr[f] * gr[f];
      const T n = std::sqrt(ss);
      for (int64_t f = 0; f < F; ++f) dr[f] = n > eps ? (gr[f] - yr[f] * dot) / n : gr[f] / eps;
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

}  // namespace gnn
