// cuSPARSE's generic SpMM (kernels/spmm_cusparse.h) with CUSPARSE_SPMM_CSR_ALG2, the algorithm cuSPARSE
// documents for row-major dense matrices, deterministic for a given input.
#include "kernels/spmm_cusparse.h"

#include <cusparse.h>

#include "runtime/cuda.h"
#include "base/cuda_check.h"

namespace gnn {
namespace {

#define GNN_CUSPARSE_CHECK(expr)                                                                  \
  do {                                                                                            \
    const cusparseStatus_t st_ = (expr);                                                          \
    GNN_CHECK(st_ == CUSPARSE_STATUS_SUCCESS, cusparseGetErrorString(st_), " (", int(st_), ") in ", \
              #expr);                                                                             \
  } while (0)

constexpr cusparseSpMMAlg_t kAlg = CUSPARSE_SPMM_CSR_ALG2;

}  // namespace

struct CusparseSpmm::Impl {
  cusparseHandle_t handle = nullptr;
  cusparseConstSpMatDescr_t a = nullptr;
  cusparseConstDnMatDescr_t b = nullptr;
  cusparseDnMatDescr_t c = nullptr;
  void* buffer = nullptr;
  int device = 0;
  const float alpha = 1.0f, beta = 0.0f;
  ~Impl() {
    if (buffer) cuda_free(buffer, device);
    if (c) cusparseDestroyDnMat(c);
    if (b) cusparseDestroyDnMat(b);
    if (a) cusparseDestroySpMat(a);
    if (handle) cusparseDestroy(handle);
  }
};

CusparseSpmm::CusparseSpmm(const CsrView& g, const float* values, float* y, const float* x, int64_t F, int64_t ldx,
                           int64_t ldy, Stream stream)
    : impl_(std::make_unique<Impl>()) {
  GNN_CHECK(values != nullptr, "CusparseSpmm: the CSR needs one value per entry");
  Impl& m = *impl_;
  GNN_CUDA_CHECK(cudaGetDevice(&m.device));
  GNN_CUSPARSE_CHECK(cusparseCreate(&m.handle));
  GNN_CUSPARSE_CHECK(cusparseSetStream(m.handle, stream));
  GNN_CUSPARSE_CHECK(cusparseCreateConstCsr(&m.a, g.num_rows, g.num_cols, g.num_edges, g.indptr, g.indices, values,
                                            CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                            CUDA_R_32F));
  GNN_CUSPARSE_CHECK(cusparseCreateConstDnMat(&m.b, g.num_cols, F, ldx, x, CUDA_R_32F, CUSPARSE_ORDER_ROW));
  GNN_CUSPARSE_CHECK(cusparseCreateDnMat(&m.c, g.num_rows, F, ldy, y, CUDA_R_32F, CUSPARSE_ORDER_ROW));
  size_t bytes = 0;
  GNN_CUSPARSE_CHECK(cusparseSpMM_bufferSize(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             CUSPARSE_OPERATION_NON_TRANSPOSE, &m.alpha, m.a, m.b, &m.beta, m.c,
                                             CUDA_R_32F, kAlg, &bytes));
  if (bytes > 0) m.buffer = cuda_alloc(bytes, m.device);
  GNN_CUSPARSE_CHECK(cusparseSpMM_preprocess(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             CUSPARSE_OPERATION_NON_TRANSPOSE, &m.alpha, m.a, m.b, &m.beta, m.c,
                                             CUDA_R_32F, kAlg, m.buffer));
}

CusparseSpmm::~CusparseSpmm() = default;

void CusparseSpmm::run() {
  Impl& m = *impl_;
  GNN_CUSPARSE_CHECK(cusparseSpMM(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                  &m.alpha, m.a, m.b, &m.beta, m.c, CUDA_R_32F, kAlg, m.buffer));
}

}  // namespace gnn
