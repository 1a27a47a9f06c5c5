// Graph readout on the GPU (kernels/pooling.h). Forward: a block of 8 warps per (graph, 32 features)
// strides over the graph's rows (kernels/column_sum.cuh) and combines the warps' partial results in
// warp order, the same bits every run. Backward: a thread per element of dx, its graph found by binary
// search in graph_ptr. The log-sum-exp readout takes the same shapes.
#include <cuda_runtime.h>

#include "kernels/column_sum.cuh"
#include "kernels/cuda_launch.cuh"
#include "kernels/pooling.h"

namespace gnn {
namespace {

__global__ void __launch_bounds__(kRowWarps * 32)
    pool_fwd_kernel(float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t F, Reduce op) {
  __shared__ float part[kRowWarps][32];
  __shared__ int32_t part_arg[kRowWarps][32];
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
  float acc = op == Reduce::kMax ? -INFINITY : 0.0f;
  int32_t arg = -1;
  if (f < F && op != Reduce::kMax) {
    acc = warp_rows_sum(b, e, w, [&](int64_t i) { return __ldg(x + i * F + f); });
  } else if (f < F) {
    for (int64_t i = b + w; i < e; i += kRowWarps) {
      const float val = __ldg(x + i * F + f);
      if (arg < 0 || max_takes(val, acc)) acc = val, arg = int32_t(i);
    }
  }
  part[w][lane] = acc, part_arg[w][lane] = arg;
  __syncthreads();
  if (w != 0 || f >= F) return;
  for (int h = 1; h < kRowWarps; ++h) {
    const float pv = part[h][lane];
    const int32_t pa = part_arg[h][lane];
    if (op != Reduce::kMax) acc += pv;
    else if (max_merge_takes(pv, pa, acc, arg)) acc = pv, arg = pa;
  }
  if (op == Reduce::kMean && e > b) acc /= float(e - b);
  if (op == Reduce::kMax) {
    if (arg < 0) acc = 0.0f;
    argmax[g * F + f] = arg;
  }
  y[g * F + f] = acc;
}

__global__ void pool_bwd_kernel(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t N,
                                int64_t G, int64_t F, Reduce op, const float* base) {
  GNN_GRID_STRIDE(t, N * F) {
    const int64_t i = t / F, f = t % F, lo = segment_of(graph_ptr, G, i);  // row i's graph
    const int64_t n = graph_ptr[lo + 1] - graph_ptr[lo];
    const float d = __ldg(dy + lo * F + f);
    const float v = op == Reduce::kMax    ? (__ldg(argmax + lo * F + f) == i ? d : 0.0f)
                    : op == Reduce::kMean ? d / float(n)
                                          : d;
    dx[t] = base ? base[t] + v : v;  // a plain load: base may be dx itself
  }
}

__global__ void __launch_bounds__(kRowWarps * 32)
    pool_lse_fwd_kernel(float* y, const float* x, const int64_t* graph_ptr, int64_t F) {
  __shared__ float part[kRowWarps][32];
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
  float m = -INFINITY;
  if (f < F)
    for (int64_t i = b + w; i < e; i += kRowWarps) m = lse_max(m, __ldg(x + i * F + f));
  part[w][lane] = m;
  __syncthreads();
  m = part[0][lane];
  for (int h = 1; h < kRowWarps; ++h) m = lse_max(m, part[h][lane]);  // every warp, the column's max
  __shared__ double sums[kRowWarps][32];  // (the sum in double, as the reference)
  double s = f < F ? warp_rows_sum<double>(b, e, w, [&](int64_t i) { return expf(__ldg(x + i * F + f) - m); }) : 0.0;
  sums[w][lane] = s;
  __syncthreads();
  if (w != 0 || f >= F) return;
  for (int h = 1; h < kRowWarps; ++h) s += sums[h][lane];
  y[g * F + f] = e == b ? 0.0f : fabsf(m) == INFINITY ? m : m + logf(float(s));
}

__global__ void pool_lse_bwd_kernel(float* dx, const float* dy, const float* x, const float* y,
                                    const int64_t* graph_ptr, int64_t N, int64_t G, int64_t F) {
  GNN_GRID_STRIDE(t, N * F) {
    const int64_t f = t % F, lo = segment_of(graph_ptr, G, t / F);  // row t / F's graph
    dx[t] = __ldg(dy + lo * F + f) * expf(__ldg(x + t) - __ldg(y + lo * F + f));
  }
}

}  // namespace

void pool_logsumexp_forward_cuda(float* y, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F,
                                 Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "pool_logsumexp_forward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  pool_lse_fwd_kernel<<<grid, kRowWarps * 32, 0, stream>>>(y, x, graph_ptr, F);
  GNN_CUDA_LAUNCH_CHECK("pool_logsumexp_forward_cuda");
}

void pool_logsumexp_backward_cuda(float* dx, const float* dy, const float* x, const float* y, const int64_t* graph_ptr,
                                  int64_t N, int64_t G, int64_t F, Stream stream) {
  if (N * F == 0) return;
  pool_lse_bwd_kernel<<<grid_for(N * F, "pool_logsumexp_backward_cuda"), kThreads, 0, stream>>>(dx, dy, x, y, graph_ptr,
                                                                                                N, G, F);
  GNN_CUDA_LAUNCH_CHECK("pool_logsumexp_backward_cuda");
}

void pool_forward_cuda(float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F,
                       Reduce op, Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "pool_forward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  pool_fwd_kernel<<<grid, kRowWarps * 32, 0, stream>>>(y, argmax, x, graph_ptr, F, op);
  GNN_CUDA_LAUNCH_CHECK("pool_forward_cuda");
}

void pool_backward_cuda(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t N,
                        int64_t G, int64_t F, Reduce op, const float* base, Stream stream) {
  if (N * F == 0) return;
  pool_bwd_kernel<<<grid_for(N * F, "pool_backward_cuda"), kThreads, 0, stream>>>(dx, dy, argmax, graph_ptr, N, G, F,
                                                                                  op, base);
  GNN_CUDA_LAUNCH_CHECK("pool_backward_cuda");
}

}  // namespace gnn
