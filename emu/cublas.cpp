// The emulator's cuBLAS (emu/README.md): the handle calls and SGEMM (FP32, or with
// CUBLAS_TF32_TENSOR_OP_MATH its inputs rounded to TF32), a plain loop run on the stream like a kernel.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu/emu_state.h"

using namespace gnn_emu;  // NOLINT: the C API below is the emulator's own

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // null: cuBLAS's own pool (what cublasSetStream puts back)
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  h->workspace = nullptr;  // as documented: back to the default workspace pool
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* w, size_t bytes) {
  Lock lock(g_mu);
  if (w && !region_of(w, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = w;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  h->math = m;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
float tf32(float v) {  // rounds to TF32's 10-bit mantissa (nearest, ties away), as the tensor cores read inputs
  if (!std::isfinite(v)) return v;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b = (b + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&v, &b, 4);
  return v;
}
bool device_span(const float* p, int64_t rows, int64_t cols, int64_t ld) {  // column-major rows x cols
  if (rows == 0 || cols == 0) return true;
  const auto* r = region_of(p, size_t((cols - 1) * ld + rows) * sizeof(float));
  return r && r->second.device >= 0;
}
}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  Lock lock(g_mu);
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int64_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  const int64_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max<int64_t>(1, ar) || ldb < std::max<int64_t>(1, br) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!device_span(A, ar, ac, lda) || !device_span(B, br, bc, ldb) || !device_span(C, m, n, ldc))
    die(fmt("cublasSgemm (m %d, n %d, k %d): an operand is not wholly in device memory", m, n, k));
  if (h->stream && h->stream->capturing && !h->workspace)
    die("cublasSgemm captured on cuBLAS's default workspace: cuBLAS would allocate inside the capture (bind a "
        "workspace with cublasSetWorkspace after each cublasSetStream)");
  const float al = *alpha, be = *beta;
  const bool round = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  const cudaError_t e = enqueue(h->stream, "cublasSgemm", [=] {
    Window w;
    auto a = [&](int64_t i, int64_t l) { return ta == CUBLAS_OP_N ? A[i + l * lda] : A[l + i * lda]; };
    auto b = [&](int64_t l, int64_t j) { return tb == CUBLAS_OP_N ? B[l + j * ldb] : B[j + l * ldb]; };
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t l = 0; l < k; ++l) acc += round ? tf32(a(i, l)) * tf32(b(l, j)) : a(i, l) * b(l, j);
        float& c = C[i + j * ldc];
        c = be == 0.0f ? al * acc : al * acc + be * c;  // beta = 0: C is not read (it may hold NaN)
      }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
