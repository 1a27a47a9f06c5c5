// The argument checks and the dtype switch an op runs first: the f32/f64 dispatch, the device,
// shape and graph checks, and typed pointers. Public: nn/'s losses and optimisers check and dispatch
// as the ops do. The kernel wrappers the op files share stay in the private autograd/dispatch.h.
#pragma once
#include "autograd/var.h"
#include "runtime/graph.h"

namespace gnn::ag {

// Calls fn(T{}) with T = float or double by the dtype of x; anything else is refused naming the op.
template <class Fn>
decltype(auto) dispatch_real(const char* op, const Tensor& x, Fn&& fn) {
  GNN_CHECK(!x.is_cuda(), op, ": runs on the host only, got ", x.desc());
  if (x.dtype() == DType::F32) return fn(float{});
  GNN_CHECK(x.dtype() == DType::F64, op, ": expected f32 or f64 values, got ", x.desc());
  return fn(double{});
}

// For the ops that also run on CUDA: host tensors as dispatch_real; CUDA tensors must be f32.
template <class Fn>
decltype(auto) dispatch_dev(const char* op, const Tensor& x, Fn&& fn) {
  if (x.is_cuda()) {
    GNN_CHECK(x.dtype() == DType::F32, op, ": CUDA tensors must be f32, got ", x.desc());
    return fn(float{});
  }
  return dispatch_real(op, x, std::forward<Fn>(fn));
}

// Throws unless v is defined, `ndim`-dimensional (any for -1), of dtype dt and on `device` (the other
// inputs' device); `what` names the argument.
void check_arg_on(const char* op, const char* what, const Var& v, int ndim, DType dt, Device device);
// The graph's arrays must be on `device` (graph ops).
// The graph on `device`; one node set (not bipartite) unless the op takes either (spmm).
void check_graph_device(const char* op, const Graph& g, Device device, bool bipartite_ok = false);
// graph_ptr: i64 [G+1], non-decreasing from 0 to rows (instance_norm, pool, graph_attention).
void check_graph_ptr(const char* op, const Tensor& graph_ptr, int64_t rows);
// Optional per-feature gamma and beta: each undefined or [F] of x's dtype on `device` (layer_norm and
// instance_norm; layer_norm passes the host).
void check_affine(const char* op, const Var& gamma, const Var& beta, int64_t F, DType dt, Device device);

// The same device and dtype as `like`, any shape.
Tensor empty_like(const Tensor& like, const Shape& shape);

template <class T>
T* ptr(const Tensor& t) {
  return t.data_as<T>();
}
template <class T>
const T* ptr_or_null(const Var& v) {
  return v.defined() ? v.value().data_as<T>() : nullptr;
}

}  // namespace gnn::ag
