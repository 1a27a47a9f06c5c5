// What the CUDA kernel tests share: host vectors copied to GPU 0, outputs pre-filled with NaN (so an
// element a kernel never writes fails the comparison), and bitwise equality for the determinism checks.
#pragma once
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace gnn::testing {

template <class T>
Tensor on_gpu(const std::vector<T>& v) {
  return Tensor::from_vector(v).to(Device::cuda(0));
}

inline Tensor nan_gpu(int64_t n) { return Tensor::full({n}, NAN, DType::F32, Device::cuda(0)); }

// R x F shapes for the elementwise CUDA kernels: one element, a few, a wide and a tall row block.
inline const std::vector<std::pair<int64_t, int64_t>> kElementShapes = {
    {1, 1}, {7, 3}, {1000, 33}, {3, 1000}, {30000, 20}};

// R x F shapes for the row-wise CUDA kernels: R wider than a block's 8 warps of rows, F not a multiple
// of 32, F = 1 and a 1-row case, and R <= 64, a few and the most column-sum slices (256, the last short).
inline const std::vector<std::pair<int64_t, int64_t>> kRowShapes = {{1, 1},     {7, 3},    {64, 5},    {65, 40},
                                                                    {1000, 33}, {3, 1000}, {20000, 7}, {100003, 32}};

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace gnn::testing
