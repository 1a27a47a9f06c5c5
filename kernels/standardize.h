// Per-column standardisation with trainable statistics, (x - mean) / (std + eps), as the 6th place
// TpuGraphs solution writes it inside its forward with mean and std as parameters:
//   forward   y[r, f]  = (x[r, f] - mean[f]) / (std[f] + eps)
//   backward  dx[r, f] = dy[r, f] / (std[f] + eps)
//             dmean[f] = -(sum_r dy[r, f]) / (std[f] + eps)
//             dstd[f]  = -(sum_r dy[r, f] y[r, f]) / (std[f] + eps)
// x, y, dy, dx [R, F]; mean, std [F]. The elementwise steps in T (std + eps, then one subtraction and
// one division, as torch's f32 ops); the column sums in f64 by fma in row order, rounded once, so the
// host (one template for float and double) and the GPU (a thread per column) give the same bits.
#pragma once
#include <cmath>
#include <vector>

#include "base/common.h"

namespace gnn {

template <class T>
void standardize_ref(T* y, const T* x, const T* mean, const T* std, T eps, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) y[r * F + f] = (x[r * F + f] - mean[f]) / (std[f] + eps);
}

// dx, dmean and dstd may each be null (not wanted). y is the forward's output.
template <class T>
void standardize_backward_ref(T* dx, T* dmean, T* dstd, const T* dy, const T* y, const T* std, T eps, int64_t R,
                              int64_t F) {
  std::vector<double> s1(size_t(F), 0.0), s2(size_t(F), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const T g = dy[r * F + f];
      s1[size_t(f)] += double(g);
      s2[size_t(f)] = std::fma(double(g), double(y[r * F + f]), s2[size_t(f)]);
      if (dx) dx[r * F + f] = g / (std[f] + eps);
    }
  for (int64_t f = 0; f < F; ++f) {
    const double d = double(std[f] + eps);
    if (dmean) dmean[f] = T(-s1[size_t(f)] / d);
    if (dstd) dstd[f] = T(-s2[size_t(f)] / d);
  }
}

void standardize_cuda(float* y, const float* x, const float* mean, const float* std, float eps, int64_t R, int64_t F,
                      Stream stream);
// dx may be null; dmean and dstd both written.
void standardize_backward_cuda(float* dx, float* dmean, float* dstd, const float* dy, const float* y, const float* std,
                               float eps, int64_t R, int64_t F, Stream stream);

}  // namespace gnn
