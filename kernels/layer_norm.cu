// Layer norm on the GPU (kernels/layer_norm.h): one warp per row, lane l taking columns l, l + 32, ...;
// the row's sums combine the 32 lane partials in a fixed butterfly. dgamma and dbeta are column sums
// (kernels/elementwise.h, a fixed order) of dy * xhat, staged in the workspace, and of dy.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/elementwise.h"
#include "kernels/layer_norm.h"

namespace gnn {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void layer_norm_fwd_kernel(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                      const float* beta, int64_t R, int64_t F, float eps) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (r >= R) return;
  const float* xr = x + r * F;
  double s = 0.0;  // (the mean in double: kernels/layer_norm.h)
  for (int64_t f = lane; f < F; f += 32) s += double(xr[f]);
  const float m = float(warp_sum(s) / double(F));
  double v = 0.0;
  for (int64_t f = lane; f < F; f += 32) v += double((xr[f] - m) * (xr[f] - m));
  double var = warp_sum(v);
  if (var == INFINITY) {  // a square past the float range (norm_rstd); var is the whole warp's
    v = 0.0;
    for (int64_t f = lane; f < F; f += 32) v += norm_square(xr[f] - m);
    var = warp_sum(v);
  }
  const float rs = norm_rstd(var / double(F), eps);
  if (lane == 0) mean[r] = m, rstd[r] = rs;
  for (int64_t f = lane; f < F; f += 32)
    y[r * F + f] = (xr[f] - m) * rs * (gamma ? gamma[f] : 1.0f) + (beta ? beta[f] : 0.0f);
}

// dx per row; with dgamma wanted, also prod[r, f] = dy * xhat (summed over rows afterwards in a fixed order).
__global__ void layer_norm_bwd_kernel(float* dx, float* prod, const float* dy, const float* x, const float* mean,
                                      const float* rstd, const float* gamma, int64_t R, int64_t F) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (r >= R) return;
  const float *xr = x + r * F, *gr = dy + r * F;
  const float m = mean[r], rs = rstd[r];
  double ad = 0.0, bd = 0.0;  // (in double, as the reference's)
  for (int64_t f = lane; f < F; f += 32) {
    const float xh = (xr[f] - m) * rs, g = gr[f] * (gamma ? gamma[f] : 1.0f);
    ad += double(g), bd += double(g * xh);
    if (prod) prod[r * F + f] = gr[f] * xh;
  }
  const float a = float(warp_sum(ad) / double(F)), b = float(warp_sum(bd) / double(F));
  for (int64_t f = lane; f < F; f += 32) {
    const float xh = (xr[f] - m) * rs, g = gr[f] * (gamma ? gamma[f] : 1.0f);
    dx[r * F + f] = (g - a - xh * b) * rs;
  }
}

}  // namespace

void layer_norm_forward_cuda(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                             int64_t R, int64_t F, float eps, Stream stream) {
  if (R == 0 || F == 0) return;
  layer_norm_fwd_kernel<<<blocks_for(R, kWarpsPerBlock, "layer_norm_forward_cuda"), kWarpsPerBlock * 32, 0, stream>>>(
      y, mean, rstd, x, gamma, beta, R, F, eps);
  GNN_CUDA_LAUNCH_CHECK("layer_norm_forward_cuda");
}

void layer_norm_backward_cuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* mean, const float* rstd, const float* gamma, int64_t R, int64_t F,
                              float* workspace, Stream stream) {
  if (F == 0) return;
  if (R > 0) {
    layer_norm_bwd_kernel<<<blocks_for(R, kWarpsPerBlock, "layer_norm_backward_cuda"), kWarpsPerBlock * 32, 0,
                            stream>>>(dx, dgamma ? workspace : nullptr, dy, x, mean, rstd, gamma, R, F);
    GNN_CUDA_LAUNCH_CHECK("layer_norm_backward_cuda");
  }
  float* partials = workspace + R * F;
  if (dgamma) column_sum_cuda(dgamma, workspace, R, F, false, partials, stream);
  if (dbeta) column_sum_cuda(dbeta, dy, R, F, false, partials, stream);  // after dgamma's on the stream
}

int64_t layer_norm_backward_workspace_cuda(int64_t R, int64_t F) { return R * F + column_sum_workspace_cuda(R, F); }

}  // namespace gnn
