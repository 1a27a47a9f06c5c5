// CUDA segment softmax and GAT scores (kernels/segment_softmax.h). Every per-segment reduction runs in
// one warp per (segment, head): the lanes stride over the segment's edges and combine with a fixed
// shuffle tree, so a hub's 10k edges cost 313 strides of one warp and the result has the same bits
// every run (no atomics). Per-edge outputs with no reduction (the scores) use one thread per
// (edge, head), finding the edge's row by binary search in indptr.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/segment_softmax.h"

namespace gnn {
namespace {

constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) softmax_fwd_kernel(float* y, const float* x, const int32_t* indptr,
                                                               int64_t S, int64_t H) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (w >= S * H) return;
  const int64_t s = w / H, h = w % H;
  const int32_t b = indptr[s], e = indptr[s + 1];
  float m = -INFINITY;
  for (int32_t p = b + lane; p < e; p += 32) m = fmaxf(m, __ldg(x + p * H + h));
  m = warp_max(m);
  float sum = 0.0f;
  for (int32_t p = b + lane; p < e; p += 32) {
    const float t = expf(__ldg(x + p * H + h) - m);
    y[p * H + h] = t;
    sum += t;
  }
  sum = warp_sum(sum);
  __syncwarp();
  for (int32_t p = b + lane; p < e; p += 32) y[p * H + h] /= sum;  // each lane rescales what it wrote
}

__global__ void __launch_bounds__(kThreads) softmax_bwd_kernel(float* dx, const float* y, const float* dy,
                                                               const int32_t* indptr, int64_t S, int64_t H) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (w >= S * H) return;
  const int64_t s = w / H, h = w % H;
  const int32_t b = indptr[s], e = indptr[s + 1];
  float dot = 0.0f;
  for (int32_t p = b + lane; p < e; p += 32) dot += __ldg(y + p * H + h) * __ldg(dy + p * H + h);
  dot = warp_sum(dot);
  for (int32_t p = b + lane; p < e; p += 32) dx[p * H + h] = __ldg(y + p * H + h) * (__ldg(dy + p * H + h) - dot);
}

__global__ void __launch_bounds__(kThreads) gat_scores_fwd_kernel(float* s, const float* a_src, const float* a_dst,
                                                                  CsrView g, int64_t H, float slope) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= g.num_edges * H) return;
  const int64_t p = i / H, h = i % H, v = segment_of(g.indptr, g.num_rows, p);
  const float z = __ldg(a_src + int64_t(__ldg(g.indices + p)) * H + h) + __ldg(a_dst + v * H + h);
  s[i] = z > 0.0f ? z : slope * z;
}

// da_dst[v, h] = sum over CSR row v, da_src[u, h] = sum over CSC row u, of ds * leaky_relu'(pre).
__global__ void __launch_bounds__(kThreads) gat_scores_bwd_kernel(float* da_src, float* da_dst, const float* ds,
                                                                  const float* a_src, const float* a_dst, CsrView g,
                                                                  int64_t H, float slope) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  const int64_t dst_items = g.num_rows * H;
  if (w >= dst_items + g.num_cols * H) return;
  const bool by_dst = w < dst_items;
  const int64_t r = (by_dst ? w : w - dst_items) / H, h = (by_dst ? w : w - dst_items) % H;
  const int32_t* ptr = by_dst ? g.indptr : g.csc_indptr;
  float acc = 0.0f;
  for (int32_t q = ptr[r] + lane; q < ptr[r + 1]; q += 32) {
    const int64_t p = by_dst ? q : __ldg(g.csc_to_csr + q);
    const int64_t u = by_dst ? __ldg(g.indices + q) : r, v = by_dst ? r : __ldg(g.csc_indices + q);
    const float z = __ldg(a_src + u * H + h) + __ldg(a_dst + v * H + h);
    acc += __ldg(ds + p * H + h) * (z > 0.0f ? 1.0f : slope);
  }
  acc = warp_sum(acc);
  if (lane == 0) (by_dst ? da_dst : da_src)[r * H + h] = acc;
}

}  // namespace

void segment_softmax_forward_cuda(float* y, const float* x, const int32_t* indptr, int64_t S, int64_t H, Stream stream) {
  if (S * H == 0) return;
  softmax_fwd_kernel<<<blocks_for(S * H, kWarps, "segment_softmax_forward_cuda"), kThreads, 0, stream>>>(y, x, indptr, S, H);
  GNN_CUDA_LAUNCH_CHECK("segment_softmax_forward_cuda");
}

void segment_softmax_backward_cuda(float* dx, const float* y, const float* dy, const int32_t* indptr, int64_t S,
                                   int64_t H, Stream stream) {
  if (S * H == 0) return;
  softmax_bwd_kernel<<<blocks_for(S * H, kWarps, "segment_softmax_backward_cuda"), kThreads, 0, stream>>>(dx, y, dy,
                                                                                                         indptr, S, H);
  GNN_CUDA_LAUNCH_CHECK("segment_softmax_backward_cuda");
}

void gat_scores_forward_cuda(float* s, const float* a_src, const float* a_dst, const CsrView& g, int64_t H, float slope,
                             Stream stream) {
  if (g.num_edges * H == 0) return;
  gat_scores_fwd_kernel<<<blocks_for(g.num_edges * H, kThreads, "gat_scores_forward_cuda"), kThreads, 0, stream>>>(
      s, a_src, a_dst, g, H, slope);
  GNN_CUDA_LAUNCH_CHECK("gat_scores_forward_cuda");
}

void gat_scores_backward_cuda(float* da_src, float* da_dst, const float* ds, const float* a_src, const float* a_dst,
                              const CsrView& g, int64_t H, float slope, Stream stream) {
  const int64_t items = (g.num_rows + g.num_cols) * H;
  if (items == 0) return;
  gat_scores_bwd_kernel<<<blocks_for(items, kWarps, "gat_scores_backward_cuda"), kThreads, 0, stream>>>(
      da_src, da_dst, ds, a_src, a_dst, g, H, slope);
  GNN_CUDA_LAUNCH_CHECK("gat_scores_backward_cuda");
}

}  // namespace gnn
