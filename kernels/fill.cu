// One thread per element, grid-stride; the value travels by kernel argument, not by a copy.
#include <cstring>

#include "kernels/fill.h"
#include "kernels/cuda_launch.cuh"

namespace gnn {

template <class T>
__global__ void fill_kernel(T* y, T value, int64_t n) {
  GNN_GRID_STRIDE(i, n)
    y[i] = value;
}

template <class T>
static void launch_fill(void* y, const void* value, int64_t n, Stream stream) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  fill_kernel<T><<<grid_for(n, "fill_cuda"), kThreads, 0, stream>>>(static_cast<T*>(y), v, n);
  GNN_CUDA_LAUNCH_CHECK("fill_kernel");
}

void fill_cuda(void* y, const void* value, size_t elem_size, int64_t n, Stream stream) {
  if (n == 0) return;
  switch (elem_size) {
    case 1: launch_fill<uint8_t>(y, value, n, stream); break;
    case 2: launch_fill<uint16_t>(y, value, n, stream); break;
    case 4: launch_fill<uint32_t>(y, value, n, stream); break;
    case 8: launch_fill<uint64_t>(y, value, n, stream); break;
    default: GNN_FAIL("fill_cuda: element size ", elem_size, " not supported");
  }
}

}  // namespace gnn
