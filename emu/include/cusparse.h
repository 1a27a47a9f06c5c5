// gnn.cpp's CUDA emulator (emu/README.md): the cuSPARSE generic SpMM calls gnn makes (CSR times a
// row-major dense matrix), run on the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

enum cudaDataType { CUDA_R_32F = 0, CUDA_R_64F = 1 };

struct cusparseContext;
struct cusparseSpMatEmu;
struct cusparseDnMatEmu;
using cusparseHandle_t = cusparseContext*;
using cusparseSpMatDescr_t = cusparseSpMatEmu*;
using cusparseConstSpMatDescr_t = const cusparseSpMatEmu*;
using cusparseDnMatDescr_t = cusparseDnMatEmu*;
using cusparseConstDnMatDescr_t = const cusparseDnMatEmu*;

enum cusparseStatus_t {
  CUSPARSE_STATUS_SUCCESS = 0,
  CUSPARSE_STATUS_NOT_INITIALIZED = 1,
  CUSPARSE_STATUS_ALLOC_FAILED = 2,
  CUSPARSE_STATUS_INVALID_VALUE = 3,
  CUSPARSE_STATUS_EXECUTION_FAILED = 6,
  CUSPARSE_STATUS_NOT_SUPPORTED = 10,
};
enum cusparseIndexType_t { CUSPARSE_INDEX_16U = 1, CUSPARSE_INDEX_32I = 2, CUSPARSE_INDEX_64I = 3 };
enum cusparseIndexBase_t { CUSPARSE_INDEX_BASE_ZERO = 0, CUSPARSE_INDEX_BASE_ONE = 1 };
enum cusparseOrder_t { CUSPARSE_ORDER_COL = 1, CUSPARSE_ORDER_ROW = 2 };
enum cusparseOperation_t { CUSPARSE_OPERATION_NON_TRANSPOSE = 0, CUSPARSE_OPERATION_TRANSPOSE = 1 };
enum cusparseSpMMAlg_t {
  CUSPARSE_SPMM_ALG_DEFAULT = 0,
  CUSPARSE_SPMM_CSR_ALG1 = 4,
  CUSPARSE_SPMM_CSR_ALG2 = 6,
  CUSPARSE_SPMM_CSR_ALG3 = 12
};

const char* cusparseGetErrorString(cusparseStatus_t status);
cusparseStatus_t cusparseCreate(cusparseHandle_t* handle);
cusparseStatus_t cusparseDestroy(cusparseHandle_t handle);
cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream);
cusparseStatus_t cusparseCreateConstCsr(cusparseConstSpMatDescr_t* descr, int64_t rows, int64_t cols, int64_t nnz,
                                        const void* row_offsets, const void* col_ind, const void* values,
                                        cusparseIndexType_t row_type, cusparseIndexType_t col_type,
                                        cusparseIndexBase_t base, cudaDataType value_type);
cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t descr);
cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* descr, int64_t rows, int64_t cols, int64_t ld, void* values,
                                     cudaDataType value_type, cusparseOrder_t order);
cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t* descr, int64_t rows, int64_t cols, int64_t ld,
                                          const void* values, cudaDataType value_type, cusparseOrder_t order);
cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t descr);
cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t op_a, cusparseOperation_t op_b,
                                         const void* alpha, cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                         const void* beta, cusparseDnMatDescr_t c, cudaDataType compute_type,
                                         cusparseSpMMAlg_t alg, size_t* bytes);
cusparseStatus_t cusparseSpMM_preprocess(cusparseHandle_t handle, cusparseOperation_t op_a, cusparseOperation_t op_b,
                                         const void* alpha, cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                         const void* beta, cusparseDnMatDescr_t c, cudaDataType compute_type,
                                         cusparseSpMMAlg_t alg, void* buffer);
cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t op_a, cusparseOperation_t op_b,
                              const void* alpha, cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                              const void* beta, cusparseDnMatDescr_t c, cudaDataType compute_type,
                              cusparseSpMMAlg_t alg, void* buffer);
