// The many-tensor passes of kernels/optim.h on the GPU: block c does chunk c of the list (found by a
// binary search over the entries' first chunks), so an optimiser step over every parameter, the
// gradient norm and its clipping are one launch each. Elements use the same functions as the host.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/optim.h"

namespace gnn {
namespace {

// fn(entry, i) for each element of this block's chunk, the entry copied into registers once.
template <class E, class Fn>
__device__ __forceinline__ void chunk_elements(const E* list, int64_t count, Fn fn) {
  const int64_t c = blockIdx.x;
  const E e = list[chunk_owner(list, count, c)];
  int64_t begin = 0, end = 0;
  chunk_range(e, c, begin, end);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) fn(e, i);
}

__global__ void __launch_bounds__(kThreads) adam_multi_kernel(const AdamTensor<float>* list, int64_t count) {
  chunk_elements(list, count, [](const AdamTensor<float>& e, int64_t i) {
    e.w[i] = float(adam_element(double(e.w[i]), double(e.g[i]), e.m[i], e.v[i], e.s));
  });
}

__global__ void __launch_bounds__(kThreads) sgd_multi_kernel(const SgdTensor<float>* list, int64_t count) {
  chunk_elements(list, count, [](const SgdTensor<float>& e, int64_t i) {
    e.w[i] = float(sgd_element(double(e.w[i]), double(e.g[i]), e.buf ? e.buf + i : nullptr, e.s));
  });
}

__global__ void __launch_bounds__(kThreads)
    scale_multi_kernel(const ScaleTensor<float>* list, int64_t count, double s) {
  chunk_elements(list, count, [s](const ScaleTensor<float>& e, int64_t i) { e.y[i] = float(double(e.x[i]) * s); });
}

// Thread t sums elements t, t + 256, ... of the chunk; a fixed tree combines the 256 partials.
__global__ void __launch_bounds__(kThreads)
    sum_squares_multi_kernel(double* partial, const SumSquaresTensor<float>* list, int64_t count) {
  __shared__ double part[kThreads];
  double acc = 0;
  chunk_elements(list, count, [&acc](const SumSquaresTensor<float>& e, int64_t i) {
    const double x = double(e.x[i]);
    acc += x * x;
  });
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

}  // namespace

void adam_multi_cuda(const AdamTensor<float>* list, int64_t count, int64_t chunks, Stream stream) {
  if (chunks == 0) return;
  adam_multi_kernel<<<blocks_for(chunks, 1, "adam_multi_cuda"), kThreads, 0, stream>>>(list, count);
  GNN_CUDA_LAUNCH_CHECK("adam_multi_cuda");
}

void sgd_multi_cuda(const SgdTensor<float>* list, int64_t count, int64_t chunks, Stream stream) {
  if (chunks == 0) return;
  sgd_multi_kernel<<<blocks_for(chunks, 1, "sgd_multi_cuda"), kThreads, 0, stream>>>(list, count);
  GNN_CUDA_LAUNCH_CHECK("sgd_multi_cuda");
}

void sum_squares_multi_cuda(double* partial, const SumSquaresTensor<float>* list, int64_t count, int64_t chunks,
                            Stream stream) {
  if (chunks == 0) return;
  sum_squares_multi_kernel<<<blocks_for(chunks, 1, "sum_squares_multi_cuda"), kThreads, 0, stream>>>(partial, list,
                                                                                                     count);
  GNN_CUDA_LAUNCH_CHECK("sum_squares_multi_cuda");
}

void scale_multi_cuda(const ScaleTensor<float>* list, int64_t count, int64_t chunks, double s, Stream stream) {
  if (chunks == 0) return;
  scale_multi_kernel<<<blocks_for(chunks, 1, "scale_multi_cuda"), kThreads, 0, stream>>>(list, count, s);
  GNN_CUDA_LAUNCH_CHECK("scale_multi_cuda");
}

}  // namespace gnn
