// One thread per element, grid-stride; the value travels by kernel argument, not by a copy.
#include <algorithm>
#include <cstring>

#include "base/cuda_check.h"
#include "runtime/fill.h"

namespace gnn {

template <class T>
__global__ void fill_kernel(T* y, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = value;
}

template <class T>
static void launch_fill(void* y, const void* value, int64_t n, Stream stream) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  constexpr int64_t kThreads = 256;  // grid-stride, at most 2^20 blocks
  const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20));
  fill_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(y), v, n);
  GNN_CUDA_LAUNCH_CHECK("fill_kernel");
}

void fill_cuda(void* y, const void* value, size_t elem_size, int64_t n, Stream stream) {
  if (n == 0) return;
  switch (elem_size) {
    case 1:
      launch_fill<uint8_t>(y, value, n, stream);
      break;
    case 2:
      launch_fill<uint16_t>(y, value, n, stream);
      break;
    case 4:
      launch_fill<uint32_t>(y, value, n, stream);
      break;
    case 8:
      launch_fill<uint64_t>(y, value, n, stream);
      break;
    default:
      GNN_FAIL("fill_cuda: element size ", elem_size, " not supported");
  }
}

}  // namespace gnn
