// Per-column standardisation on the GPU (kernels/standardize.h). Forward and dx: a thread per element.
// The column sums of the backward: a thread per column over the rows in order, in f64 by fma, the
// host's arithmetic, so both give the same bits (F is small: the 140 node features).
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/standardize.h"

namespace gnn {
namespace {

__global__ void standardize_kernel(float* y, const float* x, const float* mean, const float* std, float eps, int64_t R,
                                   int64_t F) {
  GNN_GRID_STRIDE(i, R * F) {
    const int64_t f = i % F;
    y[i] = (__ldg(x + i) - __ldg(mean + f)) / (__ldg(std + f) + eps);
  }
}

__global__ void standardize_dx_kernel(float* dx, const float* dy, const float* std, float eps, int64_t R, int64_t F) {
  GNN_GRID_STRIDE(i, R * F) dx[i] = __ldg(dy + i) / (__ldg(std + i % F) + eps);
}

__global__ void standardize_columns_kernel(float* dmean, float* dstd, const float* dy, const float* y,
                                           const float* std, float eps, int64_t R, int64_t F) {
  GNN_GRID_STRIDE(f, F) {
    double s1 = 0, s2 = 0;
    for (int64_t r = 0; r < R; ++r) {
      const float g = __ldg(dy + r * F + f);
      s1 += double(g);
      s2 = fma(double(g), double(__ldg(y + r * F + f)), s2);
    }
    const double d = double(__ldg(std + f) + eps);
    dmean[f] = float(-s1 / d);
    dstd[f] = float(-s2 / d);
  }
}

}  // namespace

void standardize_cuda(float* y, const float* x, const float* mean, const float* std, float eps, int64_t R, int64_t F,
                      Stream stream) {
  GNN_LAUNCH_N("standardize_cuda", R * F, standardize_kernel, y, x, mean, std, eps, R, F);
}

void standardize_backward_cuda(float* dx, float* dmean, float* dstd, const float* dy, const float* y, const float* std,
                               float eps, int64_t R, int64_t F, Stream stream) {
  if (dx && R * F > 0) {
    standardize_dx_kernel<<<grid_for(R * F, "standardize_backward_cuda"), kThreads, 0, stream>>>(dx, dy, std, eps, R,
                                                                                                   F);
    GNN_CUDA_LAUNCH_CHECK("standardize_backward_cuda");
  }
  GNN_LAUNCH_N("standardize_backward_cuda", F, standardize_columns_kernel, dmean, dstd, dy, y, std, eps, R, F);
}

}  // namespace gnn
