// Elementwise arithmetic, column sums and the column plumbing of the autograd ops on the GPU
// (kernels/elementwise.h): a thread per element in a grid-stride loop, except the column sums (8 warps
// per 32 columns and row slice, kernels/column_sum.cuh), head_dot (a few lanes per row and head) and sum
// (one block, a fixed tree).
#include <cuda_runtime.h>

#include "kernels/column_sum.cuh"
#include "kernels/cuda_launch.cuh"
#include "kernels/elementwise.h"

namespace gnn {
namespace {

__global__ void add_kernel(float* y, const float* a, const float* b, int64_t n, float sb) {
  GNN_GRID_STRIDE(i, n)
  y[i] = a[i] + sb * b[i];
}

__global__ void mul_kernel(float* y, const float* a, const float* b, int64_t n) {
  GNN_GRID_STRIDE(i, n)
  y[i] = a[i] * b[i];
}

__global__ void add_row_kernel(float* y, const float* x, const float* row, int64_t R, int64_t F) {
  GNN_GRID_STRIDE(i, R * F)
  y[i] = x[i] + __ldg(row + i % F);
}

__global__ void transpose_kernel(float* y, const float* x, int64_t R, int64_t C) {
  GNN_GRID_STRIDE(i, R * C)
  y[(i % C) * R + i / C] = x[i];  // reads coalesced; [E, H] weights have few columns
}

__global__ void scale_kernel(float* y, const float* x, float s, const float* by, int64_t n) {
  if (by) s *= __ldg(by);
  GNN_GRID_STRIDE(i, n)
  y[i] = s * x[i];
}

__global__ void block_sum_kernel(float* y, const float* x, int64_t R, int64_t w, int64_t K, int64_t ld, int64_t stride,
                                 float s) {
  GNN_GRID_STRIDE(t, R * w) {
    const int64_t r = t / w, j = t % w;
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) acc += __ldg(x + r * ld + k * stride + j);
    y[t] = s * acc;
  }
}

__global__ void join_configs_kernel(float* y, const float* x, const float* c, int64_t N, int64_t A, int64_t B,
                                    int64_t C) {
  const int64_t W = A + B;
  GNN_GRID_STRIDE(t, N * C * W) {
    const int64_t j = t % W, nk = t / W;  // y viewed as [N*C, A+B]: row nk is node nk / C, config nk % C
    y[t] = j < A ? __ldg(x + (nk / C) * A + j) : __ldg(c + nk * B + (j - A));
  }
}

__global__ void head_broadcast_kernel(float* y, const float* x, int64_t R, int64_t H, int64_t F, float s) {
  GNN_GRID_STRIDE(t, R * H * F)
  y[t] = s * __ldg(x + (t / (H * F)) * F + t % F);
}

// y[r, h] = x[r, h, :] . a[h, :]: G lanes per (row, head) (G a power of two, at most 8), so a warp
// reads 32 / G rows' head blocks in runs of G consecutive floats; the lanes combine in a butterfly.
__global__ void __launch_bounds__(kThreads)
    head_dot_kernel(float* y, const float* x, const float* a, int64_t R, int64_t H, int64_t D, int G) {
  const int64_t t = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / G;  // the (row, head) item
  const int lane = int(threadIdx.x) % G;
  float acc = 0.0f;
  if (t < R * H) {
    const float *xr = x + t * D, *ah = a + (t % H) * D;  // row r's head h block starts at (r*H + h)*D = t*D
    for (int64_t d = lane; d < D; d += G) acc += __ldg(xr + d) * __ldg(ah + d);
  }
  for (int o = G / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o, G);  // every lane takes part
  if (t < R * H && lane == 0) y[t] = acc;
}

__global__ void head_dot_bwd_kernel(float* dx, float* prod, const float* dy, const float* x, const float* a, int64_t R,
                                    int64_t H, int64_t D) {
  GNN_GRID_STRIDE(t, R * H * D) {
    const int64_t rh = t / D, h = rh % H, d = t % D;
    const float g = __ldg(dy + rh);
    if (dx) dx[t] = g * __ldg(a + h * D + d);
    if (prod) prod[t] = g * __ldg(x + t);
  }
}

__global__ void mask_rows_kernel(float* dx, const float* dy, const uint8_t* keep, int64_t R, int64_t W) {
  GNN_GRID_STRIDE(t, R * W)
  dx[t] = __ldg(keep + t / W) ? __ldg(dy + t) : 0.0f;
}

// One block: thread t sums x[t], x[t + 1024], ..., then a fixed tree over the 1024 partials.
constexpr int kSumThreads = 1024;
__global__ void __launch_bounds__(kSumThreads) sum_kernel(float* out, const float* x, int64_t n) {
  __shared__ float part[kSumThreads];
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) acc += __ldg(x + i);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

}  // namespace

void add_cuda(float* y, const float* a, const float* b, int64_t n, float sb, Stream stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n, "add_cuda"), kThreads, 0, stream>>>(y, a, b, n, sb);
  GNN_CUDA_LAUNCH_CHECK("add_cuda");
}

void mul_cuda(float* y, const float* a, const float* b, int64_t n, Stream stream) {
  if (n == 0) return;
  mul_kernel<<<grid_for(n, "mul_cuda"), kThreads, 0, stream>>>(y, a, b, n);
  GNN_CUDA_LAUNCH_CHECK("mul_cuda");
}

void add_row_cuda(float* y, const float* x, const float* row, int64_t R, int64_t F, Stream stream) {
  if (R * F == 0) return;
  add_row_kernel<<<grid_for(R * F, "add_row_cuda"), kThreads, 0, stream>>>(y, x, row, R, F);
  GNN_CUDA_LAUNCH_CHECK("add_row_cuda");
}

void transpose_cuda(float* y, const float* x, int64_t R, int64_t C, Stream stream) {
  if (R * C == 0) return;
  transpose_kernel<<<grid_for(R * C, "transpose_cuda"), kThreads, 0, stream>>>(y, x, R, C);
  GNN_CUDA_LAUNCH_CHECK("transpose_cuda");
}

int64_t column_sum_workspace_cuda(int64_t R, int64_t F) {
  const int64_t slices = ceil_div<int64_t>(R, column_slice_rows(R));
  return slices > 1 ? slices * F : 0;
}

void column_sum_cuda(float* out, const float* x, int64_t R, int64_t F, bool accumulate, float* workspace,
                     Stream stream) {
  column_sum_launch("column_sum_cuda", out, LoadRows{x, F}, R, F, accumulate, workspace, stream);
}

void scale_cuda(float* y, const float* x, float s, int64_t n, Stream stream, const float* by) {
  GNN_LAUNCH_N("scale_cuda", n, scale_kernel, y, x, s, by, n);
}

void copy_block_cuda(float* dst, int64_t wd, int64_t od, const float* src, int64_t ws, int64_t os, int64_t R, int64_t w,
                     Stream stream) {
  if (R * w == 0) return;
  GNN_CUDA_CHECK(cudaMemcpy2DAsync(dst + od, size_t(wd) * sizeof(float), src + os, size_t(ws) * sizeof(float),
                                   size_t(w) * sizeof(float), size_t(R), cudaMemcpyDeviceToDevice, stream));
}

void block_sum_cuda(float* y, const float* x, int64_t R, int64_t w, int64_t K, int64_t ld, int64_t stride, float s,
                    Stream stream) {
  GNN_LAUNCH_N("block_sum_cuda", R * w, block_sum_kernel, y, x, R, w, K, ld, stride, s);
}

void head_broadcast_cuda(float* y, const float* x, int64_t R, int64_t H, int64_t F, float s, Stream stream) {
  GNN_LAUNCH_N("head_broadcast_cuda", R * H * F, head_broadcast_kernel, y, x, R, H, F, s);
}

void head_dot_cuda(float* y, const float* x, const float* a, int64_t R, int64_t H, int64_t D, Stream stream) {
  if (R * H == 0) return;
  int G = 1;
  while (G < 8 && G < D) G *= 2;
  head_dot_kernel<<<blocks_for(R * H * G, kThreads, "head_dot_cuda"), kThreads, 0, stream>>>(y, x, a, R, H, D, G);
  GNN_CUDA_LAUNCH_CHECK("head_dot_cuda");
}

void head_dot_backward_cuda(float* dx, float* prod, const float* dy, const float* x, const float* a, int64_t R,
                            int64_t H, int64_t D, Stream stream) {
  GNN_LAUNCH_N("head_dot_backward_cuda", R * H * D, head_dot_bwd_kernel, dx, prod, dy, x, a, R, H, D);
}

void join_configs_cuda(float* y, const float* x, const float* c, int64_t N, int64_t A, int64_t B, int64_t C,
                       Stream stream) {
  GNN_LAUNCH_N("join_configs_cuda", N * C * (A + B), join_configs_kernel, y, x, c, N, A, B, C);
}

void mask_rows_cuda(float* dx, const float* dy, const uint8_t* keep, int64_t R, int64_t W, Stream stream) {
  GNN_LAUNCH_N("mask_rows_cuda", R * W, mask_rows_kernel, dx, dy, keep, R, W);
}

void sum_cuda(float* out, const float* x, int64_t n, Stream stream) {
  sum_kernel<<<1, kSumThreads, 0, stream>>>(out, x, n);
  GNN_CUDA_LAUNCH_CHECK("sum_cuda");
}

}  // namespace gnn
