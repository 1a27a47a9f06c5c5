// The row maps of graph self-attention on the GPU (kernels/attention.h).
#include <cuda_runtime.h>

#include "kernels/attention.h"
#include "kernels/cuda_launch.cuh"

namespace gnn {
namespace {

__global__ void phi_kernel(float* a, const float* q, int64_t n, int64_t D, int64_t ld) {
  GNN_GRID_STRIDE(t, n * D) a[t] = attn_phi(__ldg(q + (t / D) * ld + t % D));
}

__global__ void div_kernel(float* y, int64_t ld, const float* num, const float* den, int64_t n, int64_t D) {
  GNN_GRID_STRIDE(t, n * D) y[(t / D) * ld + t % D] = __ldg(num + t) / __ldg(den + t / D);
}

__global__ void dphi_kernel(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D) {
  GNN_GRID_STRIDE(t, n * D) {
    const int64_t o = (t / D) * ld + t % D;
    dq[o] = __ldg(da + t) * attn_dphi(__ldg(q + o));
  }
}

// A warp per row: lanes stride over D, the dot combined in a fixed butterfly.
__global__ void coef_kernel(float* u, float* c, const float* dy, int64_t ld, const float* y, const float* den, int64_t n,
                            int64_t D) {
  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = int(threadIdx.x % 32);
  if (i >= n) return;  // whole warps leave together
  const float inv = 1.0f / __ldg(den + i);
  float dot = 0.0f;
  for (int64_t d = lane; d < D; d += 32) {
    const float g = __ldg(dy + i * ld + d);
    u[i * D + d] = g * inv;
    dot += g * __ldg(y + i * D + d);
  }
  dot = warp_sum(dot);
  if (lane == 0) c[i] = -dot * inv;
}

}  // namespace

void phi_rows_cuda(float* a, const float* q, int64_t n, int64_t D, int64_t ld, Stream stream) {
  GNN_LAUNCH_N("phi_rows_cuda", n * D, phi_kernel, a, q, n, D, ld);
}

void div_rows_cuda(float* y, int64_t ld, const float* num, const float* den, int64_t n, int64_t D, Stream stream) {
  GNN_LAUNCH_N("div_rows_cuda", n * D, div_kernel, y, ld, num, den, n, D);
}

void coef_rows_cuda(float* u, float* c, const float* dy, int64_t ld, const float* y, const float* den, int64_t n,
                    int64_t D, Stream stream) {
  if (n == 0) return;
  coef_kernel<<<blocks_for(n * 32, kThreads, "coef_rows_cuda"), kThreads, 0, stream>>>(u, c, dy, ld, y, den, n, D);
  GNN_CUDA_LAUNCH_CHECK("coef_rows_cuda");
}

void dphi_rows_cuda(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D, Stream stream) {
  GNN_LAUNCH_N("dphi_rows_cuda", n * D, dphi_kernel, dq, ld, da, q, n, D);
}

}  // namespace gnn
