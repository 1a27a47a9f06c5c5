// The transcendental functions of the kernels' scalar formulas (activations, softmaxes, log-sum-exp
// pooling, the linear attention's feature map): in float on the host, kernels/vmath.h's, which
// vectorise (within the ULP bounds stated there); in double (the references) and in device code, the
// standard library's (CUDA's own there). Forced inline, like vmath.h's functions: a kernel file that grew
// past GCC's inlining budget called math_erf out of line, one value at a time, and the cross-config
// attention's forward loops stopped vectorising (4.5 -> 11.3 ms a tgraph step).
#pragma once
#include <cmath>
#include <type_traits>

#include "base/common.h"
#ifndef __CUDA_ARCH__
#include "kernels/vmath.h"
#endif

namespace gnn {

#ifdef __CUDA_ARCH__
#define GNN_HOST_F32(T, call)
#else
#define GNN_HOST_F32(T, call) \
  if constexpr (std::is_same_v<T, float>) return call;
#endif
template <class T>
GNN_HD GNN_INLINE inline T math_exp(T x) {
  GNN_HOST_F32(T, vm::exp(x))
  return std::exp(x);
}
template <class T>
GNN_HD GNN_INLINE inline T math_expm1(T x) {
  GNN_HOST_F32(T, vm::expm1(x))
  return std::expm1(x);
}
template <class T>
GNN_HD GNN_INLINE inline T math_erf(T x) {
  GNN_HOST_F32(T, vm::erf(x))
  return std::erf(x);
}
template <class T>
GNN_HD GNN_INLINE inline T math_tanh(T x) {
  GNN_HOST_F32(T, vm::tanh(x))
  return std::tanh(x);
}
template <class T>
GNN_HD GNN_INLINE inline T math_sigmoid(T x) {
  GNN_HOST_F32(T, vm::sigmoid(x))
  return T(1) / (T(1) + std::exp(-x));
}
// GELU's derivative Phi(x) + x phi(x): in float on the host vm::gelu_grad's two polynomials (within
// 2.5 x 2^-24 of the f64 function); elsewhere from erf and exp, phi(x) = e^(-t^2) / sqrt(2 pi), t = x / sqrt 2.
template <class T>
GNN_HD GNN_INLINE inline T math_gelu_grad(T x) {
  GNN_HOST_F32(T, vm::gelu_grad(x))
  const T t = x * T(0.70710678118654752440);
  return T(0.5) * (T(1) + std::erf(t)) + x * T(0.39894228040143267794) * std::exp(-(t * t));
}
template <class T>
GNN_HD GNN_INLINE inline T math_log(T x) {
  GNN_HOST_F32(T, vm::log(x))
  return std::log(x);
}
#undef GNN_HOST_F32

}  // namespace gnn
