// The emulator's cuSPARSE (emu/README.md): the handle and descriptor calls and CSR SpMM (FP32, 32-bit
// indices, row-major dense matrices), a plain loop run on the stream like a kernel.
#include <cusparse.h>

#include <cstdint>

#include "emu/emu_state.h"

using namespace gnn_emu;  // NOLINT: the C API below is the emulator's own

struct cusparseContext {
  cudaStream_t stream = nullptr;
};
struct cusparseSpMatEmu {
  int64_t rows, cols, nnz;
  const int32_t *indptr, *indices;
  const float* values;
};
struct cusparseDnMatEmu {
  int64_t rows, cols, ld;
  float* values;
  cusparseOrder_t order;
};

const char* cusparseGetErrorString(cusparseStatus_t s) {
  switch (s) {
    case CUSPARSE_STATUS_SUCCESS:
      return "CUSPARSE_STATUS_SUCCESS";
    case CUSPARSE_STATUS_INVALID_VALUE:
      return "CUSPARSE_STATUS_INVALID_VALUE";
    case CUSPARSE_STATUS_NOT_SUPPORTED:
      return "CUSPARSE_STATUS_NOT_SUPPORTED";
    default:
      return "cuSPARSE error";
  }
}
cusparseStatus_t cusparseCreate(cusparseHandle_t* h) {
  *h = new cusparseContext;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroy(cusparseHandle_t h) {
  delete h;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseSetStream(cusparseHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateConstCsr(cusparseConstSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz,
                                        const void* indptr, const void* indices, const void* values,
                                        cusparseIndexType_t rt, cusparseIndexType_t ct, cusparseIndexBase_t base,
                                        cudaDataType vt) {
  if (rt != CUSPARSE_INDEX_32I || ct != CUSPARSE_INDEX_32I || base != CUSPARSE_INDEX_BASE_ZERO || vt != CUDA_R_32F)
    return CUSPARSE_STATUS_NOT_SUPPORTED;
  *d = new cusparseSpMatEmu{rows,
                            cols,
                            nnz,
                            static_cast<const int32_t*>(indptr),
                            static_cast<const int32_t*>(indices),
                            static_cast<const float*>(values)};
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld, void* values,
                                     cudaDataType vt, cusparseOrder_t order) {
  if (vt != CUDA_R_32F || order != CUSPARSE_ORDER_ROW || ld < cols) return CUSPARSE_STATUS_NOT_SUPPORTED;
  *d = new cusparseDnMatEmu{rows, cols, ld, static_cast<float*>(values), order};
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld,
                                          const void* values, cudaDataType vt, cusparseOrder_t order) {
  cusparseDnMatDescr_t m = nullptr;
  const cusparseStatus_t s = cusparseCreateDnMat(&m, rows, cols, ld, const_cast<void*>(values), vt, order);
  *d = m;
  return s;
}
cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}

namespace {
cusparseStatus_t check_spmm(cusparseOperation_t oa, cusparseOperation_t ob, cusparseConstSpMatDescr_t a,
                            cusparseConstDnMatDescr_t b, cusparseDnMatDescr_t c, cudaDataType t) {
  if (oa != CUSPARSE_OPERATION_NON_TRANSPOSE || ob != CUSPARSE_OPERATION_NON_TRANSPOSE || t != CUDA_R_32F)
    return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (b->rows != a->cols || c->rows != a->rows || c->cols != b->cols) return CUSPARSE_STATUS_INVALID_VALUE;
  return CUSPARSE_STATUS_SUCCESS;
}
}  // namespace

cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t, cusparseOperation_t oa, cusparseOperation_t ob, const void*,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void*,
                                         cusparseDnMatDescr_t c, cudaDataType t, cusparseSpMMAlg_t, size_t* bytes) {
  *bytes = size_t(a->rows + 1) * sizeof(int32_t);  // a buffer, so the caller's allocation of it is exercised
  return check_spmm(oa, ob, a, b, c, t);
}
cusparseStatus_t cusparseSpMM_preprocess(cusparseHandle_t, cusparseOperation_t oa, cusparseOperation_t ob, const void*,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void*,
                                         cusparseDnMatDescr_t c, cudaDataType t, cusparseSpMMAlg_t, void* buffer) {
  Lock lock(g_mu);
  if (!region_of(buffer, size_t(a->rows + 1) * sizeof(int32_t))) return CUSPARSE_STATUS_INVALID_VALUE;
  return check_spmm(oa, ob, a, b, c, t);
}
cusparseStatus_t cusparseSpMM(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha,
                              cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta,
                              cusparseDnMatDescr_t c, cudaDataType t, cusparseSpMMAlg_t, void* buffer) {
  Lock lock(g_mu);
  if (const cusparseStatus_t s = check_spmm(oa, ob, a, b, c, t); s != CUSPARSE_STATUS_SUCCESS) return s;
  if (!region_of(buffer, size_t(a->rows + 1) * sizeof(int32_t))) return CUSPARSE_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const cusparseSpMatEmu A = *a;
  const cusparseDnMatEmu B = *b, C = *c;
  const cudaError_t e = enqueue(h->stream, "cusparseSpMM", [=] {
    Window w;
    for (int64_t r = 0; r < A.rows; ++r)
      for (int64_t f = 0; f < C.cols; ++f) {
        float acc = 0.0f;
        for (int32_t q = A.indptr[r]; q < A.indptr[r + 1]; ++q) acc += A.values[q] * B.values[A.indices[q] * B.ld + f];
        float& out = C.values[r * C.ld + f];
        out = be == 0.0f ? al * acc : al * acc + be * out;
      }
  });
  return e == cudaSuccess ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}
