// Row-wise softmax, log-softmax and l2-normalise on the GPU (kernels/rowwise.h): one warp per row.
// Lane l takes columns l, l + 32, ...; the row's max and sums combine the 32 lane partials in a
// fixed butterfly, so a row's result does not depend on timing.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/rowwise.h"

namespace gnn {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void rowwise_fwd_kernel(float* y, const float* x, int64_t R, int64_t F, RowOp op, float eps) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (r >= R) return;  // whole warps leave together
  const float* xr = x + r * F;
  float* yr = y + r * F;
  if (op == RowOp::kL2Normalize) {
    float ss = 0.0f;
    for (int64_t f = lane; f < F; f += 32) ss += xr[f] * xr[f];
    const float n = fmaxf(sqrtf(warp_sum(ss)), eps);
    for (int64_t f = lane; f < F; f += 32) yr[f] = xr[f] / n;
    return;
  }
  float m = -INFINITY;
  for (int64_t f = lane; f < F; f += 32) m = fmaxf(m, xr[f]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int64_t f = lane; f < F; f += 32) sum += expf(xr[f] - m);
  sum = warp_sum(sum);
  const float lse = logf(sum);
  for (int64_t f = lane; f < F; f += 32) yr[f] = op == RowOp::kSoftmax ? expf(xr[f] - m) / sum : xr[f] - m - lse;
}

__global__ void rowwise_bwd_kernel(float* dx, const float* y, const float* dy, const float* x, int64_t R, int64_t F,
                                   RowOp op, float eps) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (r >= R) return;
  const float *yr = y + r * F, *gr = dy + r * F, *xr = x + r * F;
  float* dr = dx + r * F;
  if (op == RowOp::kSoftmax) {
    float dot = 0.0f;
    for (int64_t f = lane; f < F; f += 32) dot += yr[f] * gr[f];
    dot = warp_sum(dot);
    for (int64_t f = lane; f < F; f += 32) dr[f] = yr[f] * (gr[f] - dot);
  } else if (op == RowOp::kLogSoftmax) {
    float sum = 0.0f;
    for (int64_t f = lane; f < F; f += 32) sum += gr[f];
    sum = warp_sum(sum);
    for (int64_t f = lane; f < F; f += 32) dr[f] = gr[f] - expf(yr[f]) * sum;
  } else {
    float ss = 0.0f, dot = 0.0f;
    for (int64_t f = lane; f < F; f += 32) ss += xr[f] * xr[f], dot += yr[f] * gr[f];
    const float n = sqrtf(warp_sum(ss));
    dot = warp_sum(dot);
    for (int64_t f = lane; f < F; f += 32) dr[f] = n > eps ? (gr[f] - yr[f] * dot) / n : gr[f] / eps;
  }
}

}  // namespace

void rowwise_forward_cuda(float* y, const float* x, int64_t R, int64_t F, RowOp op, float eps, Stream stream) {
  if (R == 0 || F == 0) return;
  rowwise_fwd_kernel<<<blocks_for(R, kWarpsPerBlock, "rowwise_forward_cuda"), kWarpsPerBlock * 32, 0, stream>>>(
      y, x, R, F, op, eps);
  GNN_CUDA_LAUNCH_CHECK("rowwise_forward_cuda");
}

void rowwise_backward_cuda(float* dx, const float* y, const float* dy, const float* x, int64_t R, int64_t F, RowOp op,
                           float eps, Stream stream) {
  if (R == 0 || F == 0) return;
  rowwise_bwd_kernel<<<blocks_for(R, kWarpsPerBlock, "rowwise_backward_cuda"), kWarpsPerBlock * 32, 0, stream>>>(
      dx, y, dy, x, R, F, op, eps);
  GNN_CUDA_LAUNCH_CHECK("rowwise_backward_cuda");
}

}  // namespace gnn
