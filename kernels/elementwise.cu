// CUDA maps and per-graph readouts: elementwise arithmetic and column sums (kernels/elementwise.h),
// activations (the same scalar formulas as the CPU, kernels/activation.h), embedding gather and its
// ordered backward, pooling per graph (kernels/pooling.h), and the column plumbing of the autograd ops
// (slices, head sums and dots, row masks, one-block sums).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/activation.h"
#include "kernels/cuda_launch.cuh"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/instance_norm.h"
#include "kernels/pooling.h"

namespace gnn {
namespace {

template <Act A>
__global__ void act_fwd_kernel(float* y, const float* x, int64_t n, float slope) {
  GNN_GRID_STRIDE(i, n)
    y[i] = act_value(A, __ldg(x + i), slope);
}

template <Act A>
__global__ void act_bwd_kernel(float* dx, const float* dy, const float* x, int64_t n, float slope) {
  GNN_GRID_STRIDE(i, n)
    dx[i] = __ldg(dy + i) * act_derivative(A, __ldg(x + i), slope);
}

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

__global__ void embedding_kernel(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F) {
  GNN_GRID_STRIDE(i, n * F)
    y[i] = __ldg(table + int64_t(__ldg(idx + i / F)) * F + i % F);
}

// Block = 8 warps for graph blockIdx.y and features [32 blockIdx.x, +32): lane = feature, warp w takes
// rows b + w, b + w + 8, ...; warp 0 combines the 8 partials in warp order.
constexpr int kPoolWarps = 8;

// The sum of fn(i) over rows i = b + w, b + w + 8, ... < e (warp w's fixed stride of a block's 8 warps),
// four rows in flight: one dependent load per row would leave most of the memory system idle.
template <class Fn>
__device__ float warp_rows_sum(int64_t b, int64_t e, int w, Fn fn) {
  constexpr int S = kPoolWarps;
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  int64_t i = b + w;
  for (; i + 3 * S < e; i += 4 * S) a0 += fn(i), a1 += fn(i + S), a2 += fn(i + 2 * S), a3 += fn(i + 3 * S);
  for (; i < e; i += S) a0 += fn(i);
  return (a0 + a1) + (a2 + a3);
}

// out[s*F + f] (+)= the sum of fn(r, f) over the rows r of slice s = blockIdx.y (slice_rows rows each):
// the block's 8 warps each take a fixed stride of the slice (warp_rows_sum), and the warps' partials
// combine in warp order. fn is called once per element, so it may also store what it computes.
template <class Fn>
__global__ void __launch_bounds__(kPoolWarps * 32) column_sum_kernel(float* out, Fn fn, int64_t R, int64_t F,
                                                                     int64_t slice_rows, bool accumulate) {
  __shared__ float part[kPoolWarps][32];
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const int64_t f = int64_t(blockIdx.x) * 32 + lane;
  const int64_t begin = int64_t(blockIdx.y) * slice_rows, end = begin + slice_rows < R ? begin + slice_rows : R;
  float acc = f < F ? warp_rows_sum(begin, end, w, [&](int64_t r) { return fn(r, f); }) : 0.0f;
  part[w][lane] = acc;
  __syncthreads();
  if (w != 0 || f >= F) return;
  for (int h = 1; h < kPoolWarps; ++h) acc += part[h][lane];
  float* o = out + int64_t(blockIdx.y) * F + f;
  *o = accumulate ? *o + acc : acc;
}

struct LoadRows {  // x[r, f]
  const float* x;
  int64_t F;
  __device__ float operator()(int64_t r, int64_t f) const { return __ldg(x + r * F + f); }
};

template <Act A>
struct BiasActGrad {  // dx[r, f] = dy[r, f] act'(x[r, f] + b[f]), stored and summed
  float* dx;
  const float *dy, *x, *b;
  int64_t F;
  float slope;
  __device__ float operator()(int64_t r, int64_t f) const {
    const int64_t i = r * F + f;
    const float d = __ldg(dy + i) * act_derivative(A, __ldg(x + i) + (b ? __ldg(b + f) : 0.0f), slope);
    dx[i] = d;
    return d;
  }
};

// y = act(x + b); z (when not null) keeps x + b. x may be y itself.
template <Act A>
__global__ void bias_act_fwd_kernel(float* y, float* z, const float* x, const float* b, int64_t R, int64_t F,
                                    float slope) {
  GNN_GRID_STRIDE(i, R * F) {
    const float v = x[i] + (b ? __ldg(b + i % F) : 0.0f);
    if (z) z[i] = v;
    y[i] = act_value(A, v, slope);
  }
}

template <Act A>
__global__ void bias_act_bwd_kernel(float* dx, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                                    float slope) {
  const BiasActGrad<A> g{dx, dy, x, b, F, slope};
  GNN_GRID_STRIDE(i, R * F) g(i / F, i % F);
}

__global__ void __launch_bounds__(kPoolWarps * 32) pool_fwd_kernel(float* y, int32_t* argmax, const float* x,
                                                                   const int64_t* graph_ptr, int64_t F, Reduce op) {
  __shared__ float part[kPoolWarps][32];
  __shared__ int32_t part_arg[kPoolWarps][32];
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
  float acc = op == Reduce::kMax ? -INFINITY : 0.0f;
  int32_t arg = -1;
  if (f < F && op != Reduce::kMax) {
    acc = warp_rows_sum(b, e, w, [&](int64_t i) { return __ldg(x + i * F + f); });
  } else if (f < F) {
    for (int64_t i = b + w; i < e; i += kPoolWarps) {
      const float val = __ldg(x + i * F + f);
      if (arg < 0 || val > acc) acc = val, arg = int32_t(i);
    }
  }
  part[w][lane] = acc, part_arg[w][lane] = arg;
  __syncthreads();
  if (w != 0 || f >= F) return;
  for (int h = 1; h < kPoolWarps; ++h) {
    const float pv = part[h][lane];
    const int32_t pa = part_arg[h][lane];
    if (op != Reduce::kMax) acc += pv;
    else if (pa >= 0 && (arg < 0 || pv > acc || (pv == acc && pa < arg))) acc = pv, arg = pa;
  }
  if (op == Reduce::kMean && e > b) acc /= float(e - b);
  if (op == Reduce::kMax) {
    if (arg < 0) acc = 0.0f;
    argmax[g * F + f] = arg;
  }
  y[g * F + f] = acc;
}

// The sum over graph g's rows of fn(i) for channel f, combined over the 8 warps in order; every
// thread of the block gets the total for its lane's channel. All threads of the block must call it.
template <class Fn>
__device__ float block_rows_sum(int64_t b, int64_t e, bool valid, Fn fn) {
  __shared__ float part[kPoolWarps][32];
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const float acc = valid ? warp_rows_sum(b, e, w, fn) : 0.0f;
  __syncthreads();  // part may still be read from a previous call
  part[w][lane] = acc;
  __syncthreads();
  float total = part[0][lane];
  for (int h = 1; h < kPoolWarps; ++h) total += part[h][lane];
  return total;
}

__global__ void __launch_bounds__(kPoolWarps * 32) inorm_fwd_kernel(float* y, float* mean, float* rstd, const float* x,
                                                                    const float* gamma, const float* beta,
                                                                    const int64_t* graph_ptr, int64_t F, float eps) {
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
  const bool valid = f < F;
  const float m = n ? block_rows_sum(b, e, valid, [&](int64_t i) { return x[i * F + f]; }) / float(n) : 0.0f;
  const float var = block_rows_sum(b, e, valid, [&](int64_t i) { const float d = x[i * F + f] - m; return d * d; });
  const float rs = 1.0f / sqrtf((n ? var / float(n) : 0.0f) + eps);
  if (!valid) return;
  if (threadIdx.x < 32) mean[g * F + f] = m, rstd[g * F + f] = rs;
  const float gm = gamma ? gamma[f] : 1.0f, bt = beta ? beta[f] : 0.0f;
  for (int64_t i = b + threadIdx.x / 32; i < e; i += kPoolWarps) y[i * F + f] = (x[i * F + f] - m) * rs * gm + bt;
}

// Per graph: dx, and this graph's dgamma / dbeta terms into ws[0][g][f], ws[1][g][f].
__global__ void __launch_bounds__(kPoolWarps * 32) inorm_bwd_kernel(float* dx, float* ws, const float* dy, const float* x,
                                                                    const float* mean, const float* rstd,
                                                                    const float* gamma, const int64_t* graph_ptr,
                                                                    int64_t G, int64_t F) {
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
  const bool valid = f < F;
  const float m = valid ? mean[g * F + f] : 0.0f, rs = valid ? rstd[g * F + f] : 0.0f;
  const float gm = valid && gamma ? gamma[f] : 1.0f;
  const float sdy = block_rows_sum(b, e, valid, [&](int64_t i) { return dy[i * F + f]; });
  const float sdyx = block_rows_sum(b, e, valid, [&](int64_t i) { return dy[i * F + f] * (x[i * F + f] - m) * rs; });
  if (!valid) return;
  if (threadIdx.x < 32) ws[g * F + f] = sdyx, ws[(G + g) * F + f] = sdy;
  const float s1 = n ? sdy * gm / float(n) : 0.0f, s2 = n ? sdyx * gm / float(n) : 0.0f;
  for (int64_t i = b + threadIdx.x / 32; i < e; i += kPoolWarps)
    dx[i * F + f] = (dy[i * F + f] * gm - s1 - (x[i * F + f] - m) * rs * s2) * rs;
}

__global__ void inorm_params_kernel(float* dgamma, float* dbeta, const float* ws, int64_t G, int64_t F) {
  const int64_t f = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (f >= F) return;
  float sg = 0.0f, sb = 0.0f;
  for (int64_t g = 0; g < G; ++g) sg += ws[g * F + f], sb += ws[(G + g) * F + f];
  if (dgamma) dgamma[f] = sg;
  if (dbeta) dbeta[f] = sb;
}

__global__ void pool_bwd_kernel(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t N,
                                int64_t G, int64_t F, Reduce op) {
  GNN_GRID_STRIDE(t, N * F) {
    const int64_t i = t / F, f = t % F, lo = segment_of(graph_ptr, G, i);  // row i's graph
    const int64_t n = graph_ptr[lo + 1] - graph_ptr[lo];
    const float d = __ldg(dy + lo * F + f);
    dx[t] = op == Reduce::kMax ? (__ldg(argmax + lo * F + f) == i ? d : 0.0f) : op == Reduce::kMean ? d / float(n) : d;
  }
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
__global__ void __launch_bounds__(kThreads) head_dot_kernel(float* y, const float* x, const float* a, int64_t R,
                                                            int64_t H, int64_t D, int G) {
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

__global__ void dropout_kernel(float* y, const float* x, int64_t n, uint32_t key, uint32_t threshold, float scale) {
  GNN_GRID_STRIDE(i, n)
    y[i] = __ldg(x + i) * (dropout_drops(key, i, threshold) ? 0.0f : scale);
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

// ws[c, f] = the sum over chunk c's uses (of row k, c - chunk_ptr[k] kEmbedChunk-use steps into
// ptr[k] .. ptr[k+1]) of dy[use, f], in order; consecutive threads consecutive f.
__global__ void embedding_chunk_kernel(float* ws, const float* dy, const int64_t* ptr, const int64_t* uses,
                                       const int64_t* chunk_ptr, int64_t chunks, int64_t K, int64_t F) {
  GNN_GRID_STRIDE(t, chunks * F) {
    const int64_t c = t / F, f = t % F, k = segment_of(chunk_ptr, K, c);
    const int64_t begin = __ldg(ptr + k) + (c - __ldg(chunk_ptr + k)) * kEmbedChunk;
    const int64_t row_end = __ldg(ptr + k + 1), end = begin + kEmbedChunk < row_end ? begin + kEmbedChunk : row_end;
    float acc = 0.0f;
    for (int64_t u = begin; u < end; ++u) acc += __ldg(dy + __ldg(uses + u) * F + f);
    ws[t] = acc;
  }
}

// dtable[k, f] = the sum of row k's chunk sums, in order.
__global__ void embedding_rows_kernel(float* dtable, const float* ws, const int64_t* chunk_ptr, int64_t K, int64_t F) {
  GNN_GRID_STRIDE(t, K * F) {
    const int64_t k = t / F, f = t % F;
    float acc = 0.0f;
    for (int64_t c = __ldg(chunk_ptr + k); c < __ldg(chunk_ptr + k + 1); ++c) acc += __ldg(ws + c * F + f);
    dtable[t] = acc;
  }
}

}  // namespace

void act_forward_cuda(float* y, const float* x, int64_t n, Act a, float slope, Stream stream) {
  if (n == 0) return;
  dispatch_act(a, [&](auto A) { act_fwd_kernel<decltype(A)::value><<<grid_for(n, "act_forward_cuda"), kThreads, 0, stream>>>(y, x, n, slope); });
  GNN_CUDA_LAUNCH_CHECK("act_forward_cuda");
}

void act_backward_cuda(float* dx, const float* dy, const float* x, int64_t n, Act a, float slope, Stream stream) {
  if (n == 0) return;
  dispatch_act(a, [&](auto A) {
    act_bwd_kernel<decltype(A)::value><<<grid_for(n, "act_backward_cuda"), kThreads, 0, stream>>>(dx, dy, x, n, slope);
  });
  GNN_CUDA_LAUNCH_CHECK("act_backward_cuda");
}

void embedding_forward_cuda(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F, Stream stream) {
  if (n * F == 0) return;
  embedding_kernel<<<grid_for(n * F, "embedding_forward_cuda"), kThreads, 0, stream>>>(y, table, idx, n, F);
  GNN_CUDA_LAUNCH_CHECK("embedding_forward_cuda");
}

void pool_forward_cuda(float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F,
                       Reduce op, Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "pool_forward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  pool_fwd_kernel<<<grid, kPoolWarps * 32, 0, stream>>>(y, argmax, x, graph_ptr, F, op);
  GNN_CUDA_LAUNCH_CHECK("pool_forward_cuda");
}

void instance_norm_forward_cuda(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, float eps,
                                Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "instance_norm_forward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  inorm_fwd_kernel<<<grid, kPoolWarps * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, graph_ptr, F, eps);
  GNN_CUDA_LAUNCH_CHECK("instance_norm_forward_cuda");
}

void instance_norm_backward_cuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                 const float* mean, const float* rstd, const float* gamma, const int64_t* graph_ptr,
                                 int64_t G, int64_t F, float* workspace, Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "instance_norm_backward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  inorm_bwd_kernel<<<grid, kPoolWarps * 32, 0, stream>>>(dx, workspace, dy, x, mean, rstd, gamma, graph_ptr, G, F);
  GNN_CUDA_LAUNCH_CHECK("instance_norm_backward_cuda");
  if (dgamma || dbeta) {
    inorm_params_kernel<<<unsigned(ceil_div<int64_t>(F, kThreads)), kThreads, 0, stream>>>(dgamma, dbeta, workspace, G, F);
    GNN_CUDA_LAUNCH_CHECK("instance_norm_backward_cuda (gamma, beta)");
  }
}

void pool_backward_cuda(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t N,
                        int64_t G, int64_t F, Reduce op, Stream stream) {
  if (N * F == 0) return;
  pool_bwd_kernel<<<grid_for(N * F, "pool_backward_cuda"), kThreads, 0, stream>>>(dx, dy, argmax, graph_ptr, N, G, F, op);
  GNN_CUDA_LAUNCH_CHECK("pool_backward_cuda");
}

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

namespace {
// The row slices of a column sum: from R alone (never the device), so results do not depend on the GPU.
constexpr int64_t kColumnSliceMinRows = 64, kColumnMaxSlices = 256;
int64_t column_slice_rows(int64_t R) {
  const int64_t slices = std::clamp<int64_t>(ceil_div<int64_t>(R, kColumnSliceMinRows), 1, kColumnMaxSlices);
  return std::max<int64_t>(ceil_div<int64_t>(R, slices), 1);
}

template <class Fn>
void column_sum_launch(const char* name, float* out, Fn fn, int64_t R, int64_t F, bool accumulate, float* workspace,
                       Stream stream) {
  if (F == 0) return;
  const unsigned tiles = unsigned(ceil_div<int64_t>(F, 32));
  const int64_t rows = column_slice_rows(R), slices = ceil_div<int64_t>(R, rows);
  if (slices <= 1) {
    column_sum_kernel<Fn><<<dim3(tiles, 1), kPoolWarps * 32, 0, stream>>>(out, fn, R, F, rows, accumulate);
  } else {  // each slice's partial sums, then the partials summed in slice order
    GNN_CHECK(workspace, name, ": ", R, " rows need a workspace of column_sum_workspace_cuda floats");
    column_sum_kernel<Fn><<<dim3(tiles, unsigned(slices)), kPoolWarps * 32, 0, stream>>>(workspace, fn, R, F, rows,
                                                                                    false);
    GNN_CUDA_LAUNCH_CHECK(name);
    column_sum_kernel<LoadRows><<<dim3(tiles, 1), kPoolWarps * 32, 0, stream>>>(out, LoadRows{workspace, F}, slices, F,
                                                                                slices, accumulate);
  }
  GNN_CUDA_LAUNCH_CHECK(name);
}
}  // namespace

int64_t column_sum_workspace_cuda(int64_t R, int64_t F) {
  const int64_t slices = ceil_div<int64_t>(R, column_slice_rows(R));
  return slices > 1 ? slices * F : 0;
}

void column_sum_cuda(float* out, const float* x, int64_t R, int64_t F, bool accumulate, float* workspace,
                     Stream stream) {
  column_sum_launch("column_sum_cuda", out, LoadRows{x, F}, R, F, accumulate, workspace, stream);
}

void bias_act_forward_cuda(float* y, float* z, const float* x, const float* b, int64_t R, int64_t F, Act a, float slope,
                           Stream stream) {
  if (R * F == 0) return;
  dispatch_act(a, [&](auto A) {
    constexpr Act kA = decltype(A)::value;
    bias_act_fwd_kernel<kA><<<grid_for(R * F, "bias_act_forward_cuda"), kThreads, 0, stream>>>(y, z, x, b, R, F, slope);
  });
  GNN_CUDA_LAUNCH_CHECK("bias_act_forward_cuda");
}

void bias_act_backward_cuda(float* dx, float* db, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                            Act a, float slope, float* workspace, Stream stream) {
  dispatch_act(a, [&](auto A) {
    using Grad = BiasActGrad<decltype(A)::value>;
    if (db) return column_sum_launch("bias_act_backward_cuda", db, Grad{dx, dy, x, b, F, slope}, R, F, false, workspace,
                                     stream);
    if (R * F == 0) return;
    constexpr Act kA = decltype(A)::value;
    bias_act_bwd_kernel<kA><<<grid_for(R * F, "bias_act_backward_cuda"), kThreads, 0, stream>>>(dx, dy, x, b, R, F, slope);
    GNN_CUDA_LAUNCH_CHECK("bias_act_backward_cuda");
  });
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

void dropout_apply_cuda(float* y, const float* x, int64_t n, uint64_t seed, uint32_t threshold, float scale,
                        Stream stream) {
  GNN_LAUNCH_N("dropout_apply_cuda", n, dropout_kernel, y, x, n, dropout_key(seed), threshold, scale);
}

void embedding_backward_cuda(float* dtable, const float* dy, const int64_t* ptr, const int64_t* uses,
                             const int64_t* chunk_ptr, int64_t chunks, int64_t K, int64_t F, float* workspace,
                             Stream stream) {
  if (K * F == 0) return;
  if (chunks > 0) {
    embedding_chunk_kernel<<<grid_for(chunks * F, "embedding_backward_cuda"), kThreads, 0, stream>>>(
        workspace, dy, ptr, uses, chunk_ptr, chunks, K, F);
    GNN_CUDA_LAUNCH_CHECK("embedding_backward_cuda");
  }
  GNN_LAUNCH_N("embedding_backward_cuda", K * F, embedding_rows_kernel, dtable, workspace, chunk_ptr, K, F);
}

void sum_cuda(float* out, const float* x, int64_t n, Stream stream) {
  sum_kernel<<<1, kSumThreads, 0, stream>>>(out, x, n);
  GNN_CUDA_LAUNCH_CHECK("sum_cuda");
}

}  // namespace gnn
