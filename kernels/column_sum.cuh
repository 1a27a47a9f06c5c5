// Sums down the rows of [R, F] on the GPU, shared by the kernels that reduce over rows: column sums
// (kernels/elementwise.cu), the bias gradient fused into bias_act's backward (kernels/activation.cu),
// pooling (kernels/pooling.cu) and instance norm (kernels/instance_norm.cu).
// A block is 8 warps for 32 columns: lane = column, warp w takes rows b + w, b + w + 8, ..., and the
// warps' partials combine in warp order, so the result is the same bits on every run. Include from .cu
// files only; the kernels have internal linkage, one copy per file that uses them.
#pragma once
#include <algorithm>

#include "kernels/cuda_launch.cuh"

namespace gnn {
namespace {

constexpr int kRowWarps = 8;

// The sum of fn(i) over rows i = b + w, b + w + 8, ... < e (warp w's fixed stride of a block's 8 warps),
// four rows in flight: one dependent load per row would leave most of the memory system idle. Summed in
// Acc (double for instance norm's sums and log-sum-exp's).
template <class Acc = float, class Fn>
__device__ Acc warp_rows_sum(int64_t b, int64_t e, int w, Fn fn) {
  constexpr int S = kRowWarps;
  Acc a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = b + w;
  for (; i + 3 * S < e; i += 4 * S)
    a0 += Acc(fn(i)), a1 += Acc(fn(i + S)), a2 += Acc(fn(i + 2 * S)), a3 += Acc(fn(i + 3 * S));
  for (; i < e; i += S) a0 += Acc(fn(i));
  return (a0 + a1) + (a2 + a3);
}

// out[s*F + f] (+)= the sum of fn(r, f) over the rows r of slice s = blockIdx.y (slice_rows rows each):
// the block's 8 warps each take a fixed stride of the slice (warp_rows_sum), and the warps' partials
// combine in warp order. fn is called once per element, so it may also store what it computes.
template <class Fn>
__global__ void __launch_bounds__(kRowWarps * 32)
    column_sum_kernel(float* out, Fn fn, int64_t R, int64_t F, int64_t slice_rows, bool accumulate) {
  __shared__ float part[kRowWarps][32];
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const int64_t f = int64_t(blockIdx.x) * 32 + lane;
  const int64_t begin = int64_t(blockIdx.y) * slice_rows, end = begin + slice_rows < R ? begin + slice_rows : R;
  float acc = f < F ? warp_rows_sum(begin, end, w, [&](int64_t r) { return fn(r, f); }) : 0.0f;
  part[w][lane] = acc;
  __syncthreads();
  if (w != 0 || f >= F) return;
  for (int h = 1; h < kRowWarps; ++h) acc += part[h][lane];
  float* o = out + int64_t(blockIdx.y) * F + f;
  *o = accumulate ? *o + acc : acc;
}

struct LoadRows {  // x[r, f]
  const float* x;
  int64_t F;
  __device__ float operator()(int64_t r, int64_t f) const { return __ldg(x + r * F + f); }
};

// The row slices of a column sum: from R alone (never the device), so results do not depend on the GPU.
constexpr int64_t kColumnSliceMinRows = 64, kColumnMaxSlices = 256;
inline int64_t column_slice_rows(int64_t R) {
  const int64_t slices = std::clamp<int64_t>(ceil_div<int64_t>(R, kColumnSliceMinRows), 1, kColumnMaxSlices);
  return std::max<int64_t>(ceil_div<int64_t>(R, slices), 1);
}

// out[f] (+)= sum_r fn(r, f): one launch when R is one slice, else the slices' partials into workspace
// (column_sum_workspace_cuda(R, F) floats) and a second launch summing them in slice order.
template <class Fn>
void column_sum_launch(const char* name, float* out, Fn fn, int64_t R, int64_t F, bool accumulate, float* workspace,
                       Stream stream) {
  if (F == 0) return;
  const unsigned tiles = unsigned(ceil_div<int64_t>(F, 32));
  const int64_t rows = column_slice_rows(R), slices = ceil_div<int64_t>(R, rows);
  if (slices <= 1) {
    column_sum_kernel<Fn><<<dim3(tiles, 1), kRowWarps * 32, 0, stream>>>(out, fn, R, F, rows, accumulate);
  } else {  // each slice's partial sums, then the partials summed in slice order
    GNN_CHECK(workspace, name, ": ", R, " rows need a workspace of column_sum_workspace_cuda floats");
    column_sum_kernel<Fn>
        <<<dim3(tiles, unsigned(slices)), kRowWarps * 32, 0, stream>>>(workspace, fn, R, F, rows, false);
    GNN_CUDA_LAUNCH_CHECK(name);
    column_sum_kernel<LoadRows>
        <<<dim3(tiles, 1), kRowWarps * 32, 0, stream>>>(out, LoadRows{workspace, F}, slices, F, slices, accumulate);
  }
  GNN_CUDA_LAUNCH_CHECK(name);
}

}  // namespace
}  // namespace gnn
