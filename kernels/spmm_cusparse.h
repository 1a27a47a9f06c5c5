// cuSPARSE SpMM, the comparison backend for `gnn bench kernel spmm-sum|spmm-mean --device cuda
// --spmm cusparse`: y = A x for the CSR A of a graph (rows = destinations) with one value per entry
// (1 for sum, 1/deg(v) for mean, or edge weights); x [num_cols, F] and y [num_rows, F] row-major with
// row strides ldx and ldy. The descriptors, the work buffer and cuSPARSE's preprocessing are set up
// once at construction, so run() times the product alone. Built only with CUDA.
#pragma once
#include <memory>

#include "kernels/spmm.h"

namespace gnn {

class CusparseSpmm {
 public:
  CusparseSpmm(const CsrView& g, const float* values, float* y, const float* x, int64_t F, int64_t ldx, int64_t ldy,
               Stream stream);
  ~CusparseSpmm();
  CusparseSpmm(const CusparseSpmm&) = delete;
  CusparseSpmm& operator=(const CusparseSpmm&) = delete;
  void run();  // enqueues y = A x on the stream

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gnn
