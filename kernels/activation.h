// Elementwise activations, forward and backward, on n values:
//   y = act(x);  dx = dy * act'(x)   (the backward takes the input x, so every activation works)
//   relu x <= 0 ? 0 : x | leaky_relu x > 0 ? x : slope x | elu x > 0 ? x : exp(x) - 1 |
//   gelu 0.5 x (1 + erf(x / sqrt 2)) (exact, as torch's default) | sigmoid 1 / (1 + exp(-x)) | tanh
// A NaN goes through as in torch: every activation's value at NaN is NaN, and its derivative there is
// torch's (relu 0, leaky_relu the slope, elu 1, the others NaN).
// act_value and act_derivative are the scalar definitions every kernel (and the fused layers'
// epilogues) uses, so there is one formula per activation. Both are forced inline, as are the math
// functions they call (kernels/math_fn.h, kernels/vmath.h): a loop over elements vectorises only when
// the whole chain is part of its body, and GCC's inliner, left to itself, drops a link wherever a file's
// code outgrows its budget.
#pragma once
#include <cmath>
#include <type_traits>

#include "base/common.h"
#include "kernels/elementwise.h"
#include "kernels/math_fn.h"

namespace gnn {

enum class Act { kNone, kRelu, kLeakyRelu, kElu, kGelu, kSigmoid, kTanh };
const char* act_name(Act a);
Act parse_act(const char* name);  // throws gnn::Error on an unknown name

template <class T>
GNN_HD GNN_INLINE inline T act_value(Act a, T x, T slope) {
  switch (a) {
    case Act::kRelu:
      return x <= T(0) ? T(0) : x;  // (NaN stays NaN, -0 gives +0)
    case Act::kLeakyRelu:
      return x > T(0) ? x : slope * x;
    case Act::kElu:
      return x > T(0) ? x : math_expm1(x);
    case Act::kGelu:
      return T(0.5) * x * (T(1) + math_erf(x * T(0.70710678118654752440)));
    case Act::kSigmoid:
      return math_sigmoid(x);
    case Act::kTanh:
      return math_tanh(x);
    default:
      return x;
  }
}

template <class T>
GNN_HD GNN_INLINE inline T act_derivative(Act a, T x, T slope) {
  switch (a) {
    case Act::kRelu:
      return x > T(0) ? T(1) : T(0);
    case Act::kLeakyRelu:
      return x > T(0) ? T(1) : slope;
    case Act::kElu:
      return x <= T(0) ? math_exp(x) : T(1);
    case Act::kGelu:  // Phi(x) + x phi(x)
      return math_gelu_grad(x);
    case Act::kSigmoid: {
      const T s = math_sigmoid(x);
      return s * (T(1) - s);
    }
    case Act::kTanh: {
      const T t = math_tanh(x);
      return T(1) - t * t;
    }
    default:
      return T(1);
  }
}

// Calls fn(std::integral_constant<Act, a>{}) so loops over elements see the activation as a constant:
// one switch per call instead of one per element, and the loop vectorises.
template <class Fn>
[[gnu::always_inline]] inline decltype(auto) dispatch_act(Act a, Fn&& fn) {
  switch (a) {
    case Act::kRelu:
      return fn(std::integral_constant<Act, Act::kRelu>{});
    case Act::kLeakyRelu:
      return fn(std::integral_constant<Act, Act::kLeakyRelu>{});
    case Act::kElu:
      return fn(std::integral_constant<Act, Act::kElu>{});
    case Act::kGelu:
      return fn(std::integral_constant<Act, Act::kGelu>{});
    case Act::kSigmoid:
      return fn(std::integral_constant<Act, Act::kSigmoid>{});
    case Act::kTanh:
      return fn(std::integral_constant<Act, Act::kTanh>{});
    default:
      return fn(std::integral_constant<Act, Act::kNone>{});
  }
}

template <class T>
void act_forward_ref(T* y, const T* x, int64_t n, Act a, T slope) {
  for (int64_t i = 0; i < n; ++i) y[i] = act_value(a, x[i], slope);
}
template <class T>
void act_backward_ref(T* dx, const T* dy, const T* x, int64_t n, Act a, T slope) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * act_derivative(a, x[i], slope);
}

// A dense layer's epilogue, bias and activation in one pass over [R, F] (b may be null: no bias):
//   y = act(x + b);  dx = dy * act'(x + b) (the pre-activation recomputed, never stored);  db = column sums of dx
// On a GPU the backward's column sums come out of the same pass that writes dx (kernels/elementwise.h,
// column_sum_cuda's row slices): one launch forward, two backward, instead of two and three.
template <class T>
void bias_act_forward_ref(T* y, const T* x, const T* b, int64_t R, int64_t F, Act a, T slope) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) y[r * F + f] = act_value(a, x[r * F + f] + (b ? b[f] : T(0)), slope);
}
template <class T>  // db may be null
void bias_act_backward_ref(T* dx, T* db, const T* dy, const T* x, const T* b, int64_t R, int64_t F, Act a, T slope) {
  for (int64_t f = 0; db && f < F; ++f) db[f] = T(0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      dx[r * F + f] = dy[r * F + f] * act_derivative(a, x[r * F + f] + (b ? b[f] : T(0)), slope);
      if (db) db[f] += dx[r * F + f];
    }
}

// The squeeze-and-excitation gate's product, y = x * sigmoid(z + b) over [R, F] (b [F] or null), in one pass
// instead of bias_act's and mul's two; the backward recomputes s = sigmoid(z + b):
//   dx = dy s;   dz = dy x s (1 - s);   db = the column sums of dz (column_sum's order; db may be null)
template <class T>
void gate_forward_ref(T* y, const T* x, const T* z, const T* b, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f)
      y[r * F + f] = x[r * F + f] * act_value(Act::kSigmoid, z[r * F + f] + (b ? b[f] : T(0)), T(0));
}
template <class T>
void gate_backward_ref(T* dx, T* dz, T* db, const T* dy, const T* x, const T* z, const T* b, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const int64_t i = r * F + f;
      const T v = z[i] + (b ? b[f] : T(0));
      dx[i] = dy[i] * act_value(Act::kSigmoid, v, T(0));
      dz[i] = dy[i] * x[i] * act_derivative(Act::kSigmoid, v, T(0));
    }
  if (db) column_sum(db, dz, R, F);
}

void act_forward_cpu(float* y, const float* x, int64_t n, Act a, float slope);
void act_backward_cpu(float* dx, const float* dy, const float* x, int64_t n, Act a, float slope);
void act_forward_cuda(float* y, const float* x, int64_t n, Act a, float slope, Stream stream);
void act_backward_cuda(float* dx, const float* dy, const float* x, int64_t n, Act a, float slope, Stream stream);
// z (may be null) keeps x + b; x may be y itself. The backward's workspace: column_sum_workspace_cuda(R, F)
// floats (kernels/elementwise.h); db may be null (then no workspace). The host backwards sum db over the
// rows each chunk has just written (column_sum_of), not in a second pass.
void bias_act_forward_cpu(float* y, const float* x, const float* b, int64_t R, int64_t F, Act a, float slope);
void bias_act_backward_cpu(float* dx, float* db, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                           Act a, float slope);
void bias_act_forward_cuda(float* y, float* z, const float* x, const float* b, int64_t R, int64_t F, Act a, float slope,
                           Stream stream);
void gate_forward_cpu(float* y, const float* x, const float* z, const float* b, int64_t R, int64_t F);
void gate_backward_cpu(float* dx, float* dz, float* db, const float* dy, const float* x, const float* z, const float* b,
                       int64_t R, int64_t F);
void gate_forward_cuda(float* y, const float* x, const float* z, const float* b, int64_t R, int64_t F, Stream stream);
// db (may be null) by column_sum_cuda after the pass, with its workspace
void gate_backward_cuda(float* dx, float* dz, float* db, const float* dy, const float* x, const float* z,
                        const float* b, int64_t R, int64_t F, float* workspace, Stream stream);
void bias_act_backward_cuda(float* dx, float* db, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                            Act a, float slope, float* workspace, Stream stream);

}  // namespace gnn
