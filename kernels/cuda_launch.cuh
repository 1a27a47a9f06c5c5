// What the CUDA files share: the block size, a grid for n elements (capped at 2^20 blocks, a
// grid-stride loop covers the rest), that loop, a launch that skips n = 0 and checks the launch, the
// warp reductions (a fixed butterfly: every lane gets the same total, the same bits every run), and the
// search for the segment (CSR row, graph, ...) holding an element. Include from .cu files only.
#pragma once
#include <algorithm>

#include "base/common.h"
#include "base/cuda_check.h"

namespace gnn {

inline constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, const char* name) {
  const int64_t b = std::min<int64_t>(ceil_div<int64_t>(n, kThreads), int64_t(1) << 20);
  GNN_CHECK(b > 0, name, ": empty launch");
  return unsigned(b);
}

// The blocks for `items` work items at per_block a block, one item each (no grid-stride loop), checked
// against the grid's limit.
inline unsigned blocks_for(int64_t items, int64_t per_block, const char* name) {
  const int64_t b = ceil_div<int64_t>(items, per_block);
  GNN_CHECK(b < (int64_t(1) << 31), name, ": ", items, " work items is too many for one launch");
  return unsigned(b);
}

// The 32 lanes' values combined in a fixed butterfly; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The segment s with ptr[s] <= p < ptr[s + 1] among `segments` (ptr non-decreasing from 0): binary
// search, so a hub segment costs no more per element than others.
template <class T>
__device__ __forceinline__ int64_t segment_of(const T* ptr, int64_t segments, int64_t p) {
  int64_t lo = 0, hi = segments;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (__ldg(ptr + mid) <= p) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace gnn

// for (i = this thread's first element; i < n; i += the grid's thread count)
#define GNN_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// In a function with a `stream` in scope: return at once for n = 0, else launch kernel over n
// elements on that stream and check the launch.
#define GNN_LAUNCH_N(name, n, kernel, ...)                                           \
  do {                                                                               \
    if ((n) == 0) return;                                                            \
    kernel<<<::gnn::grid_for((n), name), ::gnn::kThreads, 0, stream>>>(__VA_ARGS__); \
    GNN_CUDA_LAUNCH_CHECK(name);                                                     \
  } while (0)
