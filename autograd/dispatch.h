// What the op files share beside autograd/checks.h: typed wrappers that call a kernel's fast CPU
// version for float, its reference for double (the gradient checks' path), and its CUDA version for
// tensors on a GPU (f32 only). Private to autograd/ (and its tests).
#pragma once
#include <type_traits>

#include "autograd/checks.h"
#include "autograd/var.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/spmm.h"
#include "runtime/cuda.h"
#include "runtime/graph.h"

namespace gnn::ag {

template <class T>
void gemm_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
            int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else gemm_ref<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The same products and maps where `on` lives: cuBLAS and the CUDA kernels on its stream for a CUDA
// tensor (T is float there: dispatch_dev), the host versions otherwise.
template <class T>
void gemm_on(const Tensor& on, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
             const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda())
      return gemm_cuda(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cuda_blas(on.device().index), on.stream());
  gemm_t<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <class T>
void mul_on(const Tensor& on, T* y, const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) return mul_cuda(y, a, b, n, on.stream());
  mul_to<T>(y, a, b, n);
}
template <class T>
void add_on(const Tensor& on, T* y, const T* a, const T* b, int64_t n, T sb = T(1)) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) return add_cuda(y, a, b, n, sb, on.stream());
  add_to<T>(y, a, b, n, sb);
}
template <class T>
void add_row_on(const Tensor& on, T* y, const T* x, const T* row, int64_t R, int64_t F) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) return add_row_cuda(y, x, row, R, F, on.stream());
  add_row<T>(y, x, row, R, F);
}
template <class T>
void scale_on(const Tensor& on, T* y, const T* x, T s, int64_t n) {  // y = s x
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) return scale_cuda(y, x, s, n, on.stream());
  axpby<T>(y, s, x, T(0), n);
}
// The slice partials column_sum_cuda (and bias_act_backward_cuda's db) needs on `on`'s GPU, undefined
// when R is one slice. Freeing it right after the launches is safe: later work on the stream comes after.
// (A template, so a CPU-only build never references the CUDA function.)
template <class T = float>
Tensor column_sum_workspace_on(const Tensor& on, int64_t R, int64_t F) {
  const int64_t n = column_sum_workspace_cuda(R, F);
  return n ? empty_like(on, Shape{n}) : Tensor();
}
template <class T>
void column_sum_on(const Tensor& on, T* out, const T* x, int64_t R, int64_t F) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) {
      const Tensor ws = column_sum_workspace_on(on, R, F);
      return column_sum_cuda(out, x, R, F, false, ws.defined() ? ws.f32() : nullptr, on.stream());
    }
  column_sum<T>(out, x, R, F);
}

// out[0] = k * (the sum of x's n values), written where `on` lives (on a GPU nothing waits for it).
template <class T>
void sum_into_on(const Tensor& on, const Tensor& out, const T* x, int64_t n, T k = T(1)) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) {
      sum_cuda(out.f32(), x, n, on.stream());
      if (k != 1.0f) scale_cuda(out.f32(), out.f32(), k, 1, on.stream());
      return;
    }
  ptr<T>(out)[0] = sum_all<T>(x, n) * k;
}
// Copies an [R, w] block between row-major matrices of widths wd and ws at column offsets od, os.
template <class T>
void copy_block_on(const Tensor& on, T* dst, int64_t wd, int64_t od, const T* src, int64_t ws, int64_t os, int64_t R,
                   int64_t w) {
  if constexpr (std::is_same_v<T, float> && kWithCuda)
    if (on.is_cuda()) return copy_block_cuda(dst, wd, od, src, ws, os, R, w, on.stream());
#pragma omp parallel for if (R * w > (1 << 16))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < w; ++j) dst[r * wd + od + j] = src[r * ws + os + j];
}

CsrView csr_view(const Graph& g);

}  // namespace gnn::ag
