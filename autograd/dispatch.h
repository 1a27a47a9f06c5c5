// What the op files share: the f32/f64 switch, the device check, and typed wrappers that call a
// kernel's fast CPU version for float and its reference for double (the gradient checks' path).
#pragma once
#include <type_traits>

#include "autograd/var.h"
#include "kernels/gemm.h"
#include "kernels/spmm.h"
#include "runtime/graph.h"

namespace gnn::ag {

// Calls fn(T{}) with T = float or double by the dtype of x; anything else is refused naming the op.
template <class Fn>
decltype(auto) dispatch_real(const char* op, const Tensor& x, Fn&& fn) {
  GNN_CHECK(!x.is_cuda(), op, ": CUDA tensors are not supported by the autograd ops yet (the CUDA backend, issue 8); got ",
            x.desc());
  if (x.dtype() == DType::F32) return fn(float{});
  GNN_CHECK(x.dtype() == DType::F64, op, ": expected f32 or f64 values, got ", x.desc());
  return fn(double{});
}

// Throws unless v is defined, `ndim`-dimensional and of dtype dt; `what` names the argument.
void check_arg(const char* op, const char* what, const Var& v, int ndim, DType dt);
// graph_ptr: i64 [G+1], non-decreasing from 0 to rows (instance_norm, pool, graph_attention).
void check_graph_ptr(const char* op, const Tensor& graph_ptr, int64_t rows);
// Optional per-feature gamma and beta: each undefined or [F] of x's dtype (layer_norm, instance_norm).
void check_affine(const char* op, const Var& gamma, const Var& beta, int64_t F, DType dt);
// The same device and dtype as `like`, any shape.
Tensor empty_like(const Tensor& like, const Shape& shape);

template <class T>
T* ptr(const Tensor& t) { return t.data_as<T>(); }
template <class T>
const T* ptr_or_null(const Var& v) { return v.defined() ? v.value().data_as<T>() : nullptr; }

template <class T>
void gemm_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
            int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else gemm_ref<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

CsrView csr_view(const Graph& g);

}  // namespace gnn::ag
