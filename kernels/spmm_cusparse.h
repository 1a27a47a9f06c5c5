// cuSPARSE SpMM, the comparison backend for `gnn bench kernel spmm-sum|spmm-mean --device cuda
// --spmm cusparse`: y = A x for the CSR A of a graph (rows = destinations) with one value per entry
// (1 for sum, 1/deg(v) for mean, or edge weights); x [num_cols, F] and y [num_rows, F] row-major with
// row strides ldx and ldy. The descriptors and cuSPARSE's preprocessing are set up once at
// construction, so run() times the product alone. The cuSPARSE handle is runtime's (cuda_sparse) and
// the work buffer the caller's: workspace_bytes() says how big, and it must outlive the object
// (kernels allocate nothing and own no library handle). Built only with CUDA.
#pragma once
#include <cstddef>
#include <memory>

#include "kernels/spmm.h"

namespace gnn {

class CusparseSpmm {
 public:
  // The bytes of work buffer cuSPARSE asks for this product (may be 0).
  static size_t workspace_bytes(void* sparse_handle, const CsrView& g, const float* values, float* y, const float* x,
                                int64_t F, int64_t ldx, int64_t ldy);
  // work: workspace_bytes(...) bytes on the current device (null when that is 0).
  // sparse_handle: a cusparseHandle_t (runtime/cuda.h: cuda_sparse(device)); it is bound to `stream`
  // at construction and before every run().
  CusparseSpmm(void* sparse_handle, const CsrView& g, const float* values, float* y, const float* x, int64_t F,
               int64_t ldx, int64_t ldy, void* work, Stream stream);
  ~CusparseSpmm();
  CusparseSpmm(const CusparseSpmm&) = delete;
  CusparseSpmm& operator=(const CusparseSpmm&) = delete;
  void run();  // enqueues y = A x on the stream

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gnn
