// Graph instance norm (with its residual and activation) on the GPU (kernels/instance_norm.h): a block of 8 warps per
// (graph, 32 channels) strides over the graph's rows (kernels/column_sum.cuh) for the mean, the variance and the
// backward's two sums, each combined over the warps in order (the same bits every run). dgamma and dbeta are summed per
// graph into a workspace [2, G, F], then over graphs in order by a second launch.
#include <cuda_runtime.h>

#include "kernels/column_sum.cuh"
#include "kernels/cuda_launch.cuh"
#include "kernels/instance_norm.h"

namespace gnn {
namespace {

// The sum over graph g's rows of fn(i) for channel f, combined over the 8 warps in order; every
// thread of the block gets the total for its lane's channel. All threads of the block must call it. Summed
// in Acc: double for the mean, the variance and the backward's two sums (kernels/instance_norm.h).
template <class Acc = float, class Fn>
__device__ Acc block_rows_sum(int64_t b, int64_t e, bool valid, Fn fn) {
  __shared__ Acc part[kRowWarps][32];
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const Acc acc = valid ? warp_rows_sum<Acc>(b, e, w, fn) : Acc(0);
  __syncthreads();  // part may still be read from a previous call
  part[w][lane] = acc;
  __syncthreads();
  Acc total = part[0][lane];
  for (int h = 1; h < kRowWarps; ++h) total += part[h][lane];
  return total;
}

__global__ void __launch_bounds__(kRowWarps * 32)
    inorm_fwd_kernel(float* y, float* mean, float* rstd, const float* x, const float* res, const float* gamma,
                     const float* beta, const int64_t* graph_ptr, int64_t F, float eps, Act act) {
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
  const bool valid = f < F;
  auto s = [&](int64_t i) { return res ? x[i * F + f] + res[i * F + f] : x[i * F + f]; };
  const float m = n ? float(block_rows_sum<double>(b, e, valid, [&](int64_t i) { return s(i); }) / double(n)) : 0.0f;
  double var = block_rows_sum<double>(b, e, valid, [&](int64_t i) {
    const float d = s(i) - m;
    return d * d;
  });
  // A square past the float range (norm_rstd): the block sums again where any of its columns met one (a vote,
  // as block_rows_sum's barriers need every thread), and those columns take the new sum.
  if (__syncthreads_or(var == INFINITY)) {
    const double again = block_rows_sum<double>(b, e, valid, [&](int64_t i) { return norm_square(s(i) - m); });
    if (var == INFINITY) var = again;
  }
  const float rs = norm_rstd(n ? var / double(n) : 0.0, eps);
  if (!valid) return;
  if (threadIdx.x < 32) mean[g * F + f] = m, rstd[g * F + f] = rs;
  const float gm = gamma ? gamma[f] : 1.0f, bt = beta ? beta[f] : 0.0f;
  for (int64_t i = b + threadIdx.x / 32; i < e; i += kRowWarps)
    y[i * F + f] = act_value(act, (s(i) - m) * rs * gm + bt, 0.0f);
}

// Per graph: dx, and this graph's dgamma / dbeta terms into ws[0][g][f], ws[1][g][f]. dz recomputed
// in each of the three walks rather than stored.
__global__ void __launch_bounds__(kRowWarps * 32)
    inorm_bwd_kernel(float* dx, float* ws, const float* dy, const float* x, const float* res, const float* mean,
                     const float* rstd, const float* gamma, const float* beta, const int64_t* graph_ptr, int64_t G,
                     int64_t F, Act act) {
  const int64_t g = blockIdx.y, f = int64_t(blockIdx.x) * 32 + threadIdx.x % 32;
  const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
  const bool valid = f < F;
  const float m = valid ? mean[g * F + f] : 0.0f, rs = valid ? rstd[g * F + f] : 0.0f;
  const float gm = valid && gamma ? gamma[f] : 1.0f, bt = valid && beta ? beta[f] : 0.0f;
  auto xh = [&](int64_t i) { return ((res ? x[i * F + f] + res[i * F + f] : x[i * F + f]) - m) * rs; };
  auto dz = [&](int64_t i) {
    return act == Act::kNone ? dy[i * F + f] : dy[i * F + f] * act_derivative(act, xh(i) * gm + bt, 0.0f);
  };
  const double sdy = block_rows_sum<double>(b, e, valid, [&](int64_t i) { return dz(i); });  // (in double: the
  const double sdyx = block_rows_sum<double>(b, e, valid, [&](int64_t i) { return dz(i) * xh(i); });  // reference's)
  if (!valid) return;
  if (threadIdx.x < 32) ws[g * F + f] = float(sdyx), ws[(G + g) * F + f] = float(sdy);
  const float s1 = n ? float(sdy * gm / double(n)) : 0.0f, s2 = n ? float(sdyx * gm / double(n)) : 0.0f;
  for (int64_t i = b + threadIdx.x / 32; i < e; i += kRowWarps) dx[i * F + f] = (dz(i) * gm - s1 - xh(i) * s2) * rs;
}

__global__ void inorm_params_kernel(float* dgamma, float* dbeta, const float* ws, int64_t G, int64_t F) {
  const int64_t f = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (f >= F) return;
  float sg = 0.0f, sb = 0.0f;
  for (int64_t g = 0; g < G; ++g) sg += ws[g * F + f], sb += ws[(G + g) * F + f];
  if (dgamma) dgamma[f] = sg;
  if (dbeta) dbeta[f] = sb;
}

}  // namespace

void instance_norm_forward_cuda(float* y, float* mean, float* rstd, const float* x, const float* res,
                                const float* gamma, const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F,
                                float eps, Act act, Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "instance_norm_forward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  inorm_fwd_kernel<<<grid, kRowWarps * 32, 0, stream>>>(y, mean, rstd, x, res, gamma, beta, graph_ptr, F, eps, act);
  GNN_CUDA_LAUNCH_CHECK("instance_norm_forward_cuda");
}

void instance_norm_backward_cuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                 const float* res, const float* mean, const float* rstd, const float* gamma,
                                 const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, Act act,
                                 float* workspace, Stream stream) {
  if (G * F == 0) return;
  GNN_CHECK(G < 65536, "instance_norm_backward_cuda: ", G, " graphs in one batch (at most 65535)");
  const dim3 grid(unsigned(ceil_div<int64_t>(F, 32)), unsigned(G));
  inorm_bwd_kernel<<<grid, kRowWarps * 32, 0, stream>>>(dx, workspace, dy, x, res, mean, rstd, gamma, beta, graph_ptr,
                                                        G, F, act);
  GNN_CUDA_LAUNCH_CHECK("instance_norm_backward_cuda");
  if (dgamma || dbeta) {
    inorm_params_kernel<<<unsigned(ceil_div<int64_t>(F, kThreads)), kThreads, 0, stream>>>(dgamma, dbeta, workspace, G,
                                                                                           F);
    GNN_CUDA_LAUNCH_CHECK("instance_norm_backward_cuda (gamma, beta)");
  }
}

}  // namespace gnn
