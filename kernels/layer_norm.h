// Layer norm over each row of x [R, F]:
//   y = (x - mean) / sqrt(var + eps) * gamma + beta  (gamma, beta [F] or null)
//   dxhat = dy * gamma;  dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sqrt(var + eps)
//   dgamma = sum_r dy * xhat, dbeta = sum_r dy   (per fixed row chunk, then in order)
// mean, rstd [R] are kept by the forward for the backward. The mean and the variance are summed in double,
// then rounded, as are the backward's two row sums: in float a large common offset was lost (4096 values of
// 1e6 + N(0, 1): mean off by 30, rstd 0.033 for 1, the output off by up to 4.7, torch's 0.027; dy = 1e4
// everywhere over 65536 columns: dx up to 9.5 for 0), and a million squares came 0.4% over their sum.
// A row's sums run in kernels/lane_sum.h's order, which vectorises.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/common.h"
#include "kernels/lane_sum.h"

namespace gnn {

// A norm's variance sums float squares in double. A square past the float range (values past about 1.8e19)
// made it inf and rstd 0: y the bias, no gradient. Such a variance is summed again of squares formed in double
// (norm_square), and rstd formed in double where the variance is past the float range; other bits stay.
template <class T>
GNN_HD inline double norm_square(T d) {
  return double(d) * double(d);
}
template <class T>
GNN_HD inline T norm_rstd(double var, T eps) {
  return var <= double(std::numeric_limits<T>::max()) ? T(1) / std::sqrt(T(var) + eps)
                                                      : T(1.0 / std::sqrt(var + double(eps)));
}

// (Inlined where they are called, so that the CPU kernel's clones run them at their own vector width.)
template <class T>
GNN_INLINE inline void layer_norm_forward_ref(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta,
                                              int64_t R, int64_t F, T eps) {
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * F;
    const T m = T(lane_sum<double>(F, [&](int64_t f) GNN_INLINE { return double(xr[f]); }) / double(F));
    double v = lane_sum<double>(F, [&](int64_t f) GNN_INLINE { return double((xr[f] - m) * (xr[f] - m)); });
    if (std::isinf(v)) v = lane_sum<double>(F, [&](int64_t f) GNN_INLINE { return norm_square(xr[f] - m); });
    const T rs = norm_rstd(v / double(F), eps);
    mean[r] = m, rstd[r] = rs;
    for (int64_t f = 0; f < F; ++f)
      y[r * F + f] = (x[r * F + f] - m) * rs * (gamma ? gamma[f] : T(1)) + (beta ? beta[f] : T(0));
  }
}

template <class T>
GNN_INLINE inline void layer_norm_backward_ref(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean,
                                               const T* rstd, const T* gamma, int64_t R, int64_t F) {
  if (dgamma)
    for (int64_t f = 0; f < F; ++f) dgamma[f] = 0;
  if (dbeta)
    for (int64_t f = 0; f < F; ++f) dbeta[f] = 0;
  for (int64_t r = 0; r < R; ++r) {
    const T *xr = x + r * F, *dyr = dy + r * F;
    auto xh = [&](int64_t f) GNN_INLINE { return (xr[f] - mean[r]) * rstd[r]; };
    auto g = [&](int64_t f) GNN_INLINE { return dyr[f] * (gamma ? gamma[f] : T(1)); };
    // (in double, as the forward's sums: a common offset in dy would go)
    const T a = T(lane_sum<double>(F, [&](int64_t f) GNN_INLINE { return double(g(f)); }) / double(F)),
            b = T(lane_sum<double>(F, [&](int64_t f) GNN_INLINE { return double(g(f) * xh(f)); }) / double(F));
    if (dgamma)
      for (int64_t f = 0; f < F; ++f) dgamma[f] += dyr[f] * xh(f);
    if (dbeta)
      for (int64_t f = 0; f < F; ++f) dbeta[f] += dyr[f];
    for (int64_t f = 0; f < F; ++f) dx[r * F + f] = (g(f) - a - xh(f) * b) * rstd[r];
  }
}

void layer_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t R, int64_t F, float eps);
void layer_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                             const float* rstd, const float* gamma, int64_t R, int64_t F);
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
