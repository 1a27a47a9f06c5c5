// Dense GEMM on the GPU through cuBLAS (kernels/gemm.h), on the handle and workspace runtime keeps for
// the device (runtime/cuda.h: cuda_blas), bound to the stream of each call. Row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T, so the call passes B first and swaps M and N; the transposes and leading dimensions carry over
// unchanged.
#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <string>

#include "base/cuda_check.h"
#include "kernels/gemm.h"

namespace gnn {
namespace {

std::atomic<int> g_tf32{-1};  // -1: not yet read from GNN_TF32

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

#define GNN_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                         \
    const cublasStatus_t st_ = (expr);                                                         \
    GNN_CHECK(st_ == CUBLAS_STATUS_SUCCESS, cublas_name(st_), " (", int(st_), ") in ", #expr); \
  } while (0)

}  // namespace

void set_gemm_tf32(bool on) { g_tf32 = on ? 1 : 0; }

bool gemm_tf32() {
  if (g_tf32 < 0) {
    const char* v = std::getenv("GNN_TF32");
    g_tf32 = v != nullptr && *v && std::string(v) != "0" ? 1 : 0;  // (empty: as unset)
  }
  return g_tf32 == 1;
}

void gemm_cuda(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const BlasHandle& blas, Stream stream) {
  if (M == 0 || N == 0) return;
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  GNN_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
            "gemm_cuda: dimensions beyond int range (M ", M, ", N ", N, ", K ", K, ")");
  GNN_CHECK(blas.handle != nullptr, "gemm_cuda: no cuBLAS handle (runtime's cuda_blas(device) gives it)");
  const auto h = static_cast<cublasHandle_t>(blas.handle);
  // cublasSetStream puts a handle back on cuBLAS's default workspace pool, which can allocate when a
  // call is captured into a CUDA graph (and grows with every capture), so each call binds runtime's
  // workspace again. All products of a device run on its one stream, never on the workspace at once.
  GNN_CUBLAS_CHECK(cublasSetStream(h, stream));
  GNN_CUBLAS_CHECK(cublasSetWorkspace(h, blas.workspace, blas.workspace_bytes));
  GNN_CUBLAS_CHECK(cublasSetMathMode(h, gemm_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  if (K == 0) alpha = 0;  // C = beta C; cuBLAS handles K = 0 as that
  count_gemm_cuda_flops(2 * M * N * K);
  GNN_CUBLAS_CHECK(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(N),
                               int(M), int(K), &alpha, B, int(ldb), A, int(lda), &beta, C, int(ldc)));
}

}  // namespace gnn
