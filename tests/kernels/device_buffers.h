// What the CUDA kernel tests share: host vectors copied to GPU 0, outputs pre-filled with NaN (so an
// element a kernel never writes fails the comparison), and bitwise equality for the determinism checks.
#pragma once
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/tensor.h"

namespace gnn::testing {

template <class T>
Tensor on_gpu(const std::vector<T>& v) {
  return Tensor::from_vector(v).to(Device::cuda(0));
}

inline Tensor nan_gpu(int64_t n) { return Tensor::full({n}, NAN, DType::F32, Device::cuda(0)); }

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace gnn::testing
