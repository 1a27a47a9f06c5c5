// Fill n elements of elem_size bytes (1, 2, 4 or 8) with the bytes of one element: y[i] = value. The
// memory primitive behind Tensor::full and Tensor::fill_, beside the allocator and the copies: runtime
// owns it, so the tensor does not reach up into kernels/.
#pragma once
#include "base/common.h"

namespace gnn {

template <class T>
void fill_ref(T* y, T value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

void fill_cpu(void* y, const void* value, size_t elem_size, int64_t n);
void fill_cuda(void* y, const void* value, size_t elem_size, int64_t n, Stream stream);

}  // namespace gnn
