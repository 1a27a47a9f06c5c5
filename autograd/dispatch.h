// What the op files share beside autograd/checks.h: typed wrappers that call a kernel's fast CPU
// version for float, its reference for double (the gradient checks' path), and its CUDA version for
// tensors on a GPU (f32 only). Private to autograd/ (and its tests).
#pragma once
#include <type_traits>

#include "autograd/checks.h"
#include "autograd/ops.h"
#include "autograd/var.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/spmm.h"
#include "runtime/cuda.h"
#include "runtime/graph.h"

namespace gnn::ag {

// ---- one dispatch ------------------------------------------------------------------------------------
// A kernel of kernels/ comes in three versions: NAME_ref<T> (the reference; in f64 it is the autograd
// path the gradient checks run), NAME_cpu (float, OpenMP + SIMD) and NAME_cuda (float, queued on a
// stream). An op describes each kernel it calls once, as a Kernel, and run<T> is the one place that
// chooses: the CUDA version for a tensor `on` a GPU (f32 only), the CPU version for float on the host,
// else the reference. The CUDA version also receives `on` (for a workspace on its device, or its
// stream); GNN_KERNEL(NAME) describes the usual triple, whose CUDA version takes the same arguments
// and the stream last. A kernel whose versions differ otherwise spells out its lambdas:
//   constexpr Kernel bias_act_forward_k{"bias_act_forward", [](auto... a) { bias_act_forward_ref(a...); },
//                                       [](auto... a) { bias_act_forward_cpu(a...); },
//                                       [](const Tensor& on, auto y, auto... a) { ... }};
template <class Ref, class Cpu, class Cuda>
struct Kernel {
  const char* name;
  Ref ref;
  Cpu cpu;
  Cuda cuda;
};
template <class Ref, class Cpu, class Cuda>
Kernel(const char*, Ref, Cpu, Cuda) -> Kernel<Ref, Cpu, Cuda>;

#define GNN_KERNEL(NAME)                                                                 \
  ::gnn::ag::Kernel {                                                                    \
#NAME, [](auto... a) { NAME##_ref(a...); }, [](auto... a) { NAME##_cpu(a...); },       \
        [](const ::gnn::Tensor& on, auto... a) { NAME##_cuda(a..., on.stream()); } \
  }

template <class T, class K, class... A>
void run(const K& k, const Tensor& on, A... a) {
  if (on.is_cuda()) {
    if constexpr (std::is_same_v<T, float> && kWithCuda) k.cuda(on, a...);
    else GNN_FAIL(k.name, ": no CUDA version for this dtype or build (", on.device().str(), ")");
  } else if constexpr (std::is_same_v<T, float>) {
    k.cpu(a...);
  } else {
    k.ref(a...);
  }
}

// A kernel whose host version is one template for every T (float and double alike) beside its CUDA
// version NAME_cuda(..., stream).
#define GNN_HOST_KERNEL(HOST, CUDA)                                                                                 \
  ::gnn::ag::Kernel {                                                                                               \
#HOST, [](auto... a) { HOST(a...); }, [](auto... a) { HOST(a...); }, [](const ::gnn::Tensor& on,                \
                                                                            auto... a) { CUDA(a..., on.stream()); } \
  }

// The products and maps the op files share, where `on` lives: cuBLAS and the CUDA kernels on its stream
// for a CUDA tensor, the host versions otherwise.
inline constexpr Kernel gemm_k{
    "gemm", [](auto... a) { gemm_ref(a...); }, [](auto... a) { gemm_cpu(a...); },
    [](const Tensor& on, auto... a) { gemm_cuda(a..., cuda_blas(on.device().index), on.stream()); }};
// C [M, N] = op(A) op(B) + bias (ldc N): on the host the bias in the GEMM's store; on a GPU cuBLAS and
// then the bias row.
inline constexpr Kernel gemm_bias_k{
    "gemm_bias", [](auto... a) { gemm_bias_ref(a...); }, [](auto... a) { gemm_bias_cpu(a...); },
    [](const Tensor& on, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
       int64_t ldb, const float* bias, float* C, int64_t ldc) {
      GNN_CHECK(ldc == N, "gemm_bias: the bias row needs a contiguous C, got ldc ", ldc, " for ", N, " columns");
      gemm_cuda(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, cuda_blas(on.device().index), on.stream());
      add_row_cuda(C, C, bias, M, N, on.stream());
    }};
// C = op(A) op(B) into two matrices side by side, [C1 | C2] split at column n1, as gemm_split_ref
// (kernels/gemm.h); on a GPU two cuBLAS products over op(B)'s column ranges (a part of no columns skipped).
inline constexpr Kernel gemm_split_k{
    "gemm_split", [](auto... a) { gemm_split_ref(a...); }, [](auto... a) { gemm_split_cpu(a...); },
    [](const Tensor& on, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
       int64_t ldb, float* C1, int64_t ldc1, float* C2, int64_t ldc2, int64_t n1, const float* R2, int64_t ldr2) {
      const BlasHandle& blas = cuda_blas(on.device().index);
      if (n1 > 0) gemm_cuda(ta, tb, M, n1, K, 1.0f, A, lda, B, ldb, 0.0f, C1, ldc1, blas, on.stream());
      if (N > n1)
        gemm_cuda(ta, tb, M, N - n1, K, 1.0f, A, lda, tb ? B + n1 * ldb : B + n1, ldb, 0.0f, C2, ldc2, blas,
                  on.stream());
      if (R2) {  // then the addend, as add_to
        GNN_CHECK(ldc2 == N - n1 && ldr2 == N - n1,
                  "gemm_split: with an addend on a GPU the second part and the "
                  "addend need contiguous rows (ldc2 ",
                  ldc2, ", ldr2 ", ldr2, " for ", N - n1, " columns)");
        add_cuda(C2, C2, R2, M * (N - n1), 1.0f, on.stream());
      }
    }};
// C = op([A1 | A2]) B (+ bias) as gemm_cat_ref (kernels/gemm.h); on a GPU two cuBLAS products, into C's
// two row ranges (trans_a) or the second accumulated onto the first, and then the bias row (ldc N).
inline constexpr Kernel gemm_cat_k{
    "gemm_cat", [](auto... a) { gemm_cat_ref(a...); }, [](auto... a) { gemm_cat_cpu(a...); },
    [](const Tensor& on, bool ta, int64_t M, int64_t N, int64_t K, const float* A1, int64_t lda1, const float* A2,
       int64_t lda2, int64_t k1, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
      GNN_CHECK(!bias || ldc == N, "gemm_cat: the bias row needs a contiguous C, got ldc ", ldc, " for ", N,
                " columns");
      const BlasHandle& blas = cuda_blas(on.device().index);
      if (ta) {  // C's rows from each part (an empty part has no rows: gemm_cuda returns at M = 0)
        gemm_cuda(true, false, k1, N, K, 1.0f, A1, lda1, B, ldb, 0.0f, C, ldc, blas, on.stream());
        gemm_cuda(true, false, M - k1, N, K, 1.0f, A2, lda2, B, ldb, 0.0f, C + k1 * ldc, ldc, blas, on.stream());
      } else {  // the second part's product added onto the first's; a part of no columns is skipped (cuBLAS
                // refuses its leading dimension of 0)
        if (k1 > 0) gemm_cuda(false, false, M, N, k1, 1.0f, A1, lda1, B, ldb, 0.0f, C, ldc, blas, on.stream());
        if (K > k1)
          gemm_cuda(false, false, M, N, K - k1, 1.0f, A2, lda2, B + k1 * ldb, ldb, k1 > 0 ? 1.0f : 0.0f, C, ldc, blas,
                    on.stream());
        if (K == 0)
          gemm_cuda(false, false, M, N, 0, 1.0f, A1, 1, B, std::max<int64_t>(ldb, 1), 0.0f, C, ldc, blas,
                    on.stream());  // C = 0
      }
      if (bias) add_row_cuda(C, C, bias, M, N, on.stream());
    }};
// C = [A1 | A2] B + bias + R as gemm_cat_add_ref (kernels/gemm.h): on the host R in the product's store where
// the driver takes it; on a GPU gemm_cat_k's products and then the addition (ldc = ldr = N).
inline constexpr Kernel gemm_cat_add_k{
    "gemm_cat_add", [](auto... a) { gemm_cat_add_ref(a...); }, [](auto... a) { gemm_cat_add_cpu(a...); },
    [](const Tensor& on, int64_t M, int64_t N, int64_t K, const float* A1, int64_t lda1, const float* A2, int64_t lda2,
       int64_t k1, const float* B, int64_t ldb, const float* bias, const float* R, int64_t ldr, float* C, int64_t ldc) {
      GNN_CHECK(ldc == N && ldr == N, "gemm_cat_add: on a GPU C and the addend need contiguous rows (ldc ", ldc,
                ", ldr ", ldr, " for ", N, " columns)");
      gemm_cat_k.cuda(on, false, M, N, K, A1, lda1, A2, lda2, k1, B, ldb, bias, C, ldc);
      add_cuda(C, C, R, M * N, 1.0f, on.stream());
    }};
inline constexpr Kernel mul_k = GNN_HOST_KERNEL(mul_to, mul_cuda);
inline constexpr Kernel add_k = GNN_HOST_KERNEL(add_to, add_cuda);
inline constexpr Kernel add_row_k = GNN_HOST_KERNEL(add_row, add_row_cuda);
inline constexpr auto scale_host = [](auto* y, auto* x, auto s, int64_t n) { axpby(y, s, x, decltype(s)(0), n); };
inline constexpr Kernel scale_k{"scale", scale_host, scale_host,
                                [](const Tensor& on, auto... a) { scale_cuda(a..., on.stream()); }};

template <class T>
void gemm_on(const Tensor& on, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
             const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  run<T>(gemm_k, on, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <class T>
void mul_on(const Tensor& on, T* y, const T* a, const T* b, int64_t n) {
  run<T>(mul_k, on, y, a, b, n);
}
template <class T>
void add_on(const Tensor& on, T* y, const T* a, const T* b, int64_t n, T sb = T(1)) {
  run<T>(add_k, on, y, a, b, n, sb);
}
template <class T>
void add_row_on(const Tensor& on, T* y, const T* x, const T* row, int64_t R, int64_t F) {
  run<T>(add_row_k, on, y, x, row, R, F);
}
template <class T>
void scale_on(const Tensor& on, T* y, const T* x, T s, int64_t n) {  // y = s x
  run<T>(scale_k, on, y, x, s, n);
}
// The slice partials column_sum_cuda (and bias_act_backward_cuda's db) needs on `on`'s GPU, undefined
// when R is one slice. Freeing it right after the launches is safe: later work on the stream comes after.
// (A template, so a CPU-only build never references the CUDA function.)
template <class T = float>
Tensor column_sum_workspace_on(const Tensor& on, int64_t R, int64_t F) {
  const int64_t n = column_sum_workspace_cuda(R, F);
  return n ? empty_like(on, Shape{n}) : Tensor();
}
inline constexpr Kernel column_sum_k{
    "column_sum", [](auto... a) { column_sum(a...); }, [](auto... a) { column_sum_cpu(a...); },
    [](const Tensor& on, float* out, const float* x, int64_t R, int64_t F) {
      const Tensor ws = column_sum_workspace_on(on, R, F);
      column_sum_cuda(out, x, R, F, false, ws.defined() ? ws.f32() : nullptr, on.stream());
    }};
template <class T>
void column_sum_on(const Tensor& on, T* out, const T* x, int64_t R, int64_t F) {
  run<T>(column_sum_k, on, out, x, R, F);
}

// out[0] = k * (the sum of x's n values), written where `on` lives (on a GPU nothing waits for it).
inline constexpr auto sum_into_host = [](const Tensor& out, auto* x, int64_t n, auto k) {
  ptr<decltype(k)>(out)[0] = sum_all(x, n) * k;
};
inline constexpr Kernel sum_into_k{"sum_into", sum_into_host, sum_into_host,
                                   [](const Tensor& on, const Tensor& out, const float* x, int64_t n, float k) {
                                     sum_cuda(out.f32(), x, n, on.stream());
                                     if (k != 1.0f) scale_cuda(out.f32(), out.f32(), k, 1, on.stream());
                                   }};
template <class T>
void sum_into_on(const Tensor& on, const Tensor& out, const T* x, int64_t n, T k = T(1)) {
  run<T>(sum_into_k, on, out, x, n, k);
}
// Copies an [R, w] block between row-major matrices of widths wd and ws at column offsets od, os.
template <class T>
void copy_block(T* dst, int64_t wd, int64_t od, const T* src, int64_t ws, int64_t os, int64_t R, int64_t w) {
#pragma omp parallel for if (R * w > (1 << 16))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < w; ++j) dst[r * wd + od + j] = src[r * ws + os + j];
}
inline constexpr Kernel copy_block_k = GNN_HOST_KERNEL(copy_block, copy_block_cuda);
template <class T>
void copy_block_on(const Tensor& on, T* dst, int64_t wd, int64_t od, const T* src, int64_t ws, int64_t os, int64_t R,
                   int64_t w) {
  run<T>(copy_block_k, on, dst, wd, od, src, ws, os, R, w);
}

// The mask a fused op applies to the [N, C*D] rows it writes: FusedDropout's draw as dropout (one mask
// element per value) or, with configs_shared, as dropout_configs (one per node and channel, C configs).
template <class T>
RowsDropout<T> rows_dropout(const FusedDropout& d, int64_t configs) {
  return {dropout_mask<T>(d.p, d.seed), d.configs_shared ? configs : 0};
}

CsrView csr_view(const Graph& g);

}  // namespace gnn::ag
