// CUDA segment softmax and GAT scores (kernels/segment_softmax.h). Every per-segment reduction has a
// fixed order and no atomics, so the result has the same bits every run.
//
// With H a power of two up to 32 (GAT's usual heads), a group of L = max(8, H) lanes owns a segment
// (a CSR row, or for the scores' backward a CSC row) with all of its heads: the lanes stride over the
// segment's entries x heads, which lie contiguous in [E, H], so a lane always holds the same head
// (lane % H) and the lanes of one head combine in a butterfly within the group. TpuGraphs rows have a
// few entries each, so this puts 32 / L rows in a warp and reads them coalesced. A segment with more
// than kHubElems values would leave its group serial while the grid idles: the block that owns it
// takes it whole instead, its 256 threads striding over the values and combining per head through
// shared memory in thread order.
//
// Other head counts run one warp per (segment, head), the lanes striding over the segment's entries.
// Per-edge outputs with no reduction (the scores) use one thread per (edge, head), finding the edge's
// row by binary search in indptr.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/segment_softmax.h"

namespace gnn {
namespace {

constexpr int kWarps = kThreads / 32;

constexpr int64_t kHubElems = 256;

// The values of the lanes in a group of L that hold the same head (lane % H), combined: a butterfly
// over the offsets L/2 .. H, so every lane of the head gets the result.
__device__ __forceinline__ float group_sum(float v, int L, int H) {
  for (int o = L / 2; o >= H; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o, L);
  return v;
}
__device__ __forceinline__ float group_max(float v, int L, int H) {
  for (int o = L / 2; o >= H; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, L));
  return v;
}

// The same over the whole block (thread t holds head t % H), in thread order through part[kThreads + 32].
__device__ float block_combine(float v, int H, bool max, float* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  if (int(threadIdx.x) < H) {
    float r = part[threadIdx.x];
    for (int k = int(threadIdx.x) + H; k < kThreads; k += H) r = max ? fmaxf(r, part[k]) : r + part[k];
    part[kThreads + threadIdx.x] = r;
  }
  __syncthreads();
  const float out = part[kThreads + threadIdx.x % H];
  __syncthreads();  // part is free for the next call
  return out;
}

// One segment's values [first, end) with stride `step` (the caller's lanes), combined per head by comb.
template <class Combine>
__device__ __forceinline__ void softmax_span(float* y, const float* x, int64_t first, int64_t end, int64_t step,
                                             Combine comb) {
  float m = -INFINITY;
  for (int64_t j = first; j < end; j += step) m = fmaxf(m, __ldg(x + j));
  m = comb(m, true);
  float sum = 0.0f;
  for (int64_t j = first; j < end; j += step) {
    const float t = expf(__ldg(x + j) - m);
    y[j] = t;
    sum += t;
  }
  sum = comb(sum, false);
  for (int64_t j = first; j < end; j += step) y[j] /= sum;  // each thread rescales what it wrote
}

template <class Combine>
__device__ __forceinline__ void softmax_bwd_span(float* dx, const float* y, const float* dy, int64_t first, int64_t end,
                                                 int64_t step, Combine comb) {
  float dot = 0.0f;
  for (int64_t j = first; j < end; j += step) dot += __ldg(y + j) * __ldg(dy + j);
  dot = comb(dot, false);
  for (int64_t j = first; j < end; j += step) dx[j] = __ldg(y + j) * (__ldg(dy + j) - dot);
}

// ds * leaky_relu'(pre-activation) at entry q of CSR row r (by_dst: the entry's CSR position is q) or
// of CSC row r (its CSR position is csc_to_csr[q]), head h: one term of da_dst[r, h] or da_src[r, h].
__device__ __forceinline__ float score_grad(const CsrView& g, const float* ds, const float* a_src, const float* a_dst,
                                            bool by_dst, int64_t r, int64_t q, int64_t h, int64_t H, float slope) {
  const int64_t p = by_dst ? q : __ldg(g.csc_to_csr + q);
  const int64_t u = by_dst ? __ldg(g.indices + q) : r, v = by_dst ? r : __ldg(g.csc_indices + q);
  const float z = __ldg(a_src + u * H + h) + __ldg(a_dst + v * H + h);
  return __ldg(ds + p * H + h) * (z > 0.0f ? 1.0f : slope);
}

struct Bounds {
  int64_t b, e;  // a segment's entries
};

// The grouped schedule (see the top of the file) over S segments whose entries range(s) gives:
// span(s, lo, first, end, step, own, comb) runs over segment s's values [lo, hi) = [b * H, e * H), this
// thread taking first, first + step, ... below end; `own` says whether this thread's result counts (a
// group whose segment is a hub or past S runs over nothing, for the butterflies' sake, and writes nothing).
template <class Range, class Span>
__device__ __forceinline__ void grouped_segments(int64_t S, int H, int L, float* part, Range range, Span span) {
  const int groups = kThreads / L, lane = int(threadIdx.x) % L;
  const int64_t s0 = int64_t(blockIdx.x) * groups, s = s0 + int(threadIdx.x) / L;
  int64_t lo = 0, hi = 0;
  if (s < S) {
    const Bounds r = range(s);
    lo = r.b * H, hi = r.e * H;
  }
  const bool hub = hi - lo > kHubElems;
  span(s, lo, lo + lane, hub ? lo : hi, int64_t(L), s < S && !hub,
       [&](float v, bool max) { return max ? group_max(v, L, H) : group_sum(v, L, H); });
  if (!__syncthreads_or(hub)) return;
  const int64_t s_end = s0 + groups < S ? s0 + groups : S;
  for (int64_t r = s0; r < s_end; ++r) {  // the block's hubs, one at a time
    const Bounds rb = range(r);
    lo = rb.b * H, hi = rb.e * H;
    if (hi - lo <= kHubElems) continue;  // the same decision in every thread
    span(r, lo, lo + threadIdx.x, hi, int64_t(kThreads), true,
         [&](float v, bool max) { return block_combine(v, H, max, part); });
  }
}

__global__ void __launch_bounds__(kThreads)
    softmax_fwd_group_kernel(float* y, const float* x, const int32_t* indptr, int64_t S, int H, int L) {
  __shared__ float part[kThreads + 32];
  grouped_segments(
      S, H, L, part,
      [&](int64_t r) {
        return Bounds{indptr[r], indptr[r + 1]};
      },
      [&](int64_t, int64_t, int64_t first, int64_t end, int64_t step, bool, auto comb) {
        softmax_span(y, x, first, end, step, comb);
      });
}

__global__ void __launch_bounds__(kThreads) softmax_bwd_group_kernel(float* dx, const float* y, const float* dy,
                                                                     const int32_t* indptr, int64_t S, int H, int L) {
  __shared__ float part[kThreads + 32];
  grouped_segments(
      S, H, L, part,
      [&](int64_t r) {
        return Bounds{indptr[r], indptr[r + 1]};
      },
      [&](int64_t, int64_t, int64_t first, int64_t end, int64_t step, bool, auto comb) {
        softmax_bwd_span(dx, y, dy, first, end, step, comb);
      });
}

// da_dst over the CSR rows (segments 0 .. R-1), then da_src over the CSC rows (R .. R + C - 1), grouped.
__global__ void __launch_bounds__(kThreads)
    gat_scores_bwd_group_kernel(float* da_src, float* da_dst, const float* ds, const float* a_src, const float* a_dst,
                                CsrView g, int H, int L, float slope) {
  __shared__ float part[kThreads + 32];
  const int64_t R = g.num_rows;
  int shift = 0;
  while ((1 << shift) < H) ++shift;
  grouped_segments(
      R + g.num_cols, H, L, part,
      [&](int64_t s) {
        return s < R ? Bounds{g.indptr[s], g.indptr[s + 1]} : Bounds{g.csc_indptr[s - R], g.csc_indptr[s - R + 1]};
      },
      [&](int64_t s, int64_t lo, int64_t first, int64_t end, int64_t step, bool own, auto comb) {
        const bool by_dst = s < R;
        const int64_t r = by_dst ? s : s - R;
        float acc = 0.0f;
        for (int64_t j = first; j < end; j += step) {
          const int64_t q = j >> shift, h = j & (H - 1);
          acc += score_grad(g, ds, a_src, a_dst, by_dst, r, q, h, H, slope);
        }
        acc = comb(acc, false);
        if (own && first - lo < H) (by_dst ? da_dst : da_src)[r * H + (first - lo)] = acc;
      });
}

// The fallback's (segment, head) values x[p * H + h], p = indptr[s] + lane, + 32, ...: first
// (indptr[s] + lane) * H + h, step 32 H, below indptr[s + 1] * H; the warp combines them.
struct WarpCombine {
  __device__ float operator()(float v, bool max) const { return max ? warp_max(v) : warp_sum(v); }
};

__global__ void __launch_bounds__(kThreads)
    softmax_fwd_kernel(float* y, const float* x, const int32_t* indptr, int64_t S, int64_t H) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (w >= S * H) return;
  const int64_t s = w / H, h = w % H;
  softmax_span(y, x, (int64_t(indptr[s]) + lane) * H + h, int64_t(indptr[s + 1]) * H, 32 * H, WarpCombine{});
}

__global__ void __launch_bounds__(kThreads)
    softmax_bwd_kernel(float* dx, const float* y, const float* dy, const int32_t* indptr, int64_t S, int64_t H) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (w >= S * H) return;
  const int64_t s = w / H, h = w % H;
  softmax_bwd_span(dx, y, dy, (int64_t(indptr[s]) + lane) * H + h, int64_t(indptr[s + 1]) * H, 32 * H, WarpCombine{});
}

__global__ void __launch_bounds__(kThreads)
    gat_scores_fwd_kernel(float* s, const float* a_src, const float* a_dst, CsrView g, int64_t H, float slope) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= g.num_edges * H) return;
  const int64_t p = i / H, h = i % H, v = segment_of(g.indptr, g.num_rows, p);
  const float z = __ldg(a_src + int64_t(__ldg(g.indices + p)) * H + h) + __ldg(a_dst + v * H + h);
  s[i] = z > 0.0f ? z : slope * z;
}

// da_dst[v, h] = sum over CSR row v, da_src[u, h] = sum over CSC row u, of ds * leaky_relu'(pre).
__global__ void __launch_bounds__(kThreads)
    gat_scores_bwd_kernel(float* da_src, float* da_dst, const float* ds, const float* a_src, const float* a_dst,
                          CsrView g, int64_t H, float slope) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  const int64_t dst_items = g.num_rows * H;
  if (w >= dst_items + g.num_cols * H) return;
  const bool by_dst = w < dst_items;
  const int64_t r = (by_dst ? w : w - dst_items) / H, h = (by_dst ? w : w - dst_items) % H;
  const int32_t* ptr = by_dst ? g.indptr : g.csc_indptr;
  float acc = 0.0f;
  for (int32_t q = ptr[r] + lane; q < ptr[r + 1]; q += 32) {
    acc += score_grad(g, ds, a_src, a_dst, by_dst, r, q, h, H, slope);
  }
  acc = warp_sum(acc);
  if (lane == 0) (by_dst ? da_dst : da_src)[r * H + h] = acc;
}

}  // namespace

namespace {
// The grouped kernels' lanes per segment, or 0 where H is not a power of two up to 32.
int group_lanes(int64_t H) { return H <= 32 && (H & (H - 1)) == 0 ? int(std::max<int64_t>(8, H)) : 0; }
}  // namespace

void segment_softmax_forward_cuda(float* y, const float* x, const int32_t* indptr, int64_t S, int64_t H,
                                  Stream stream) {
  if (S * H == 0) return;
  if (const int L = group_lanes(H)) {
    softmax_fwd_group_kernel<<<blocks_for(S, kThreads / L, "segment_softmax_forward_cuda"), kThreads, 0, stream>>>(
        y, x, indptr, S, int(H), L);
    GNN_CUDA_LAUNCH_CHECK("segment_softmax_forward_cuda");
    return;
  }
  softmax_fwd_kernel<<<blocks_for(S * H, kWarps, "segment_softmax_forward_cuda"), kThreads, 0, stream>>>(y, x, indptr,
                                                                                                         S, H);
  GNN_CUDA_LAUNCH_CHECK("segment_softmax_forward_cuda");
}

void segment_softmax_backward_cuda(float* dx, const float* y, const float* dy, const int32_t* indptr, int64_t S,
                                   int64_t H, Stream stream) {
  if (S * H == 0) return;
  if (const int L = group_lanes(H)) {
    softmax_bwd_group_kernel<<<blocks_for(S, kThreads / L, "segment_softmax_backward_cuda"), kThreads, 0, stream>>>(
        dx, y, dy, indptr, S, int(H), L);
    GNN_CUDA_LAUNCH_CHECK("segment_softmax_backward_cuda");
    return;
  }
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
  if (const int L = group_lanes(H)) {
    gat_scores_bwd_group_kernel<<<blocks_for(g.num_rows + g.num_cols, kThreads / L, "gat_scores_backward_cuda"),
                                  kThreads, 0, stream>>>(da_src, da_dst, ds, a_src, a_dst, g, int(H), L, slope);
    GNN_CUDA_LAUNCH_CHECK("gat_scores_backward_cuda");
    return;
  }
  gat_scores_bwd_kernel<<<blocks_for(items, kWarps, "gat_scores_backward_cuda"), kThreads, 0, stream>>>(
      da_src, da_dst, ds, a_src, a_dst, g, H, slope);
  GNN_CUDA_LAUNCH_CHECK("gat_scores_backward_cuda");
}

}  // namespace gnn
