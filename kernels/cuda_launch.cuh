// What the one-thread-per-element CUDA files share (elementwise.cu, attention.cu, sage.cu, fill.cu):
// the block size, a grid for n elements (capped at 2^20 blocks, a grid-stride loop covers the rest),
// that loop, and a launch that skips n = 0 and checks the launch. Include from .cu files only.
#pragma once
#include <algorithm>

#include "kernels/common.h"
#include "runtime/cuda_check.h"

namespace gnn {

inline constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, const char* name) {
  const int64_t b = std::min<int64_t>(ceil_div<int64_t>(n, kThreads), int64_t(1) << 20);
  GNN_CHECK(b > 0, name, ": empty launch");
  return unsigned(b);
}

}  // namespace gnn

// for (i = this thread's first element; i < n; i += the grid's thread count)
#define GNN_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// In a function with a `stream` in scope: return at once for n = 0, else launch kernel over n
// elements on that stream and check the launch.
#define GNN_LAUNCH_N(name, n, kernel, ...)                                \
  do {                                                                   \
    if ((n) == 0) return;                                                \
    kernel<<<::gnn::grid_for((n), name), ::gnn::kThreads, 0, stream>>>(__VA_ARGS__); \
    GNN_CUDA_LAUNCH_CHECK(name);                                         \
  } while (0)
