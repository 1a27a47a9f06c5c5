// Dropout on the GPU (kernels/dropout.h): a thread per element, each deciding from (seed, i) alone with
// the host's hash, so the GPU draws the host's mask bit for bit and nothing is stored between the
// forward and the backward.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/dropout.h"

namespace gnn {
namespace {

__global__ void dropout_kernel(float* y, const float* x, int64_t n, uint32_t key, uint32_t threshold, float scale) {
  GNN_GRID_STRIDE(i, n)
  y[i] = __ldg(x + i) * (dropout_drops(key, i, threshold) ? 0.0f : scale);
}

// Element i of [R, C*F] takes the decision of (r, f) = (i / (C*F), i % F).
__global__ void dropout_configs_kernel(float* y, const float* x, int64_t n, int64_t CF, int64_t F, uint32_t key,
                                       uint32_t threshold, float scale) {
  GNN_GRID_STRIDE(i, n)
  y[i] = __ldg(x + i) * (dropout_drops(key, (i / CF) * F + i % F, threshold) ? 0.0f : scale);
}

}  // namespace

void dropout_configs_apply_cuda(float* y, const float* x, int64_t R, int64_t C, int64_t F, uint64_t seed,
                                uint32_t threshold, float scale, Stream stream) {
  const int64_t n = R * C * F;
  GNN_LAUNCH_N("dropout_configs_apply_cuda", n, dropout_configs_kernel, y, x, n, C * F, F, dropout_key(seed), threshold,
               scale);
}

void dropout_apply_cuda(float* y, const float* x, int64_t n, uint64_t seed, uint32_t threshold, float scale,
                        Stream stream) {
  GNN_LAUNCH_N("dropout_apply_cuda", n, dropout_kernel, y, x, n, dropout_key(seed), threshold, scale);
}

}  // namespace gnn
