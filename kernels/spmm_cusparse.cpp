// cuSPARSE's generic SpMM (kernels/spmm_cusparse.h) with CUSPARSE_SPMM_CSR_ALG2, the algorithm cuSPARSE
// documents for row-major dense matrices, deterministic for a given input.
#include "kernels/spmm_cusparse.h"

#include <cusparse.h>

#include "base/cuda_check.h"

namespace gnn {
namespace {

#define GNN_CUSPARSE_CHECK(expr)                                                                            \
  do {                                                                                                      \
    const cusparseStatus_t st_ = (expr);                                                                    \
    GNN_CHECK(st_ == CUSPARSE_STATUS_SUCCESS, cusparseGetErrorString(st_), " (", int(st_), ") in ", #expr); \
  } while (0)

constexpr cusparseSpMMAlg_t kAlg = CUSPARSE_SPMM_CSR_ALG2;

}  // namespace

struct CusparseSpmm::Impl {
  cusparseHandle_t handle = nullptr;  // runtime's
  Stream stream{};
  cusparseConstSpMatDescr_t a = nullptr;
  cusparseConstDnMatDescr_t b = nullptr;
  cusparseDnMatDescr_t c = nullptr;
  void* buffer = nullptr;  // the caller's
  const float alpha = 1.0f, beta = 0.0f;
  // Not the constructor: when a call here throws, the destructor still frees what was made.
  void init(void* sparse_handle, const CsrView& g, const float* values, float* y, const float* x, int64_t F,
            int64_t ldx, int64_t ldy, Stream s) {
    GNN_CHECK(sparse_handle != nullptr, "CusparseSpmm: no cuSPARSE handle (runtime's cuda_sparse(device) gives it)");
    GNN_CHECK(values != nullptr, "CusparseSpmm: the CSR needs one value per entry");
    handle = static_cast<cusparseHandle_t>(sparse_handle);
    stream = s;
    GNN_CUSPARSE_CHECK(cusparseSetStream(handle, stream));
    GNN_CUSPARSE_CHECK(cusparseCreateConstCsr(&a, g.num_rows, g.num_cols, g.num_edges, g.indptr, g.indices, values,
                                              CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                              CUDA_R_32F));
    GNN_CUSPARSE_CHECK(cusparseCreateConstDnMat(&b, g.num_cols, F, ldx, x, CUDA_R_32F, CUSPARSE_ORDER_ROW));
    GNN_CUSPARSE_CHECK(cusparseCreateDnMat(&c, g.num_rows, F, ldy, y, CUDA_R_32F, CUSPARSE_ORDER_ROW));
  }
  ~Impl() {
    if (c) cusparseDestroyDnMat(c);
    if (b) cusparseDestroyDnMat(b);
    if (a) cusparseDestroySpMat(a);
  }
  size_t buffer_size() const {
    size_t bytes = 0;
    GNN_CUSPARSE_CHECK(cusparseSpMM_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                               CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, b, &beta, c, CUDA_R_32F,
                                               kAlg, &bytes));
    return bytes;
  }
};

// The query builds the descriptors a second time; it is setup, never timed.
size_t CusparseSpmm::workspace_bytes(void* sparse_handle, const CsrView& g, const float* values, float* y,
                                     const float* x, int64_t F, int64_t ldx, int64_t ldy) {
  Impl m;
  m.init(sparse_handle, g, values, y, x, F, ldx, ldy, Stream{});
  return m.buffer_size();
}

CusparseSpmm::CusparseSpmm(void* sparse_handle, const CsrView& g, const float* values, float* y, const float* x,
                           int64_t F, int64_t ldx, int64_t ldy, void* work, Stream stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.init(sparse_handle, g, values, y, x, F, ldx, ldy, stream);
  GNN_CHECK(work != nullptr || m.buffer_size() == 0, "CusparseSpmm: no work buffer given, cuSPARSE needs ",
            m.buffer_size(), " bytes (CusparseSpmm::workspace_bytes)");
  m.buffer = work;
  GNN_CUSPARSE_CHECK(cusparseSpMM_preprocess(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             CUSPARSE_OPERATION_NON_TRANSPOSE, &m.alpha, m.a, m.b, &m.beta, m.c,
                                             CUDA_R_32F, kAlg, m.buffer));
}

CusparseSpmm::~CusparseSpmm() = default;

void CusparseSpmm::run() {
  Impl& m = *impl_;
  GNN_CUSPARSE_CHECK(cusparseSetStream(m.handle, m.stream));  // the handle is shared with other callers
  GNN_CUSPARSE_CHECK(cusparseSpMM(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                  &m.alpha, m.a, m.b, &m.beta, m.c, CUDA_R_32F, kAlg, m.buffer));
}

}  // namespace gnn
