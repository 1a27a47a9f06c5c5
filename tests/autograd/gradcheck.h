// Gradient checks for the tape: analytic gradients from ag::backward against central differences,
// everything in double, with the step and tolerance of fd_check.h (kFdTape). Inputs are random in
// [-1, 1], which keeps them away from the kinks of relu / max / leaky_relu with probability ~1.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "kernels/graph_cases.h"

namespace gnn::testing {

// A leaf f64 Var of random values in [lo, hi].
inline ag::Var rand_var(const Shape& shape, uint32_t seed, double lo = -1, double hi = 1, bool grad = true) {
  return ag::Var(Tensor::from_vector(random_values<double>(size_t(shape.numel()), seed, lo, hi), shape), grad);
}

// sum(y * R) for a fixed random R: a scalar whose gradient reaches every output element with its own
// weight (a plain sum would hide mistakes that cancel, e.g. a softmax backward).
inline ag::Var probe(const ag::Var& y, uint32_t seed = 99) {
  const ag::Var r(Tensor::from_vector(random_values<double>(size_t(y.value().numel()), seed), y.shape()));
  return ag::sum(ag::mul(y, r));
}

// Checks d f / d v for every element of every input (at most max_elems per input, spread evenly).
inline void check_grads(const std::vector<ag::Var>& inputs, const std::function<ag::Var()>& f,
                        int64_t max_elems = 200) {
  for (const ag::Var& v : inputs) v.zero_grad();
  ag::Var loss = f();
  ag::backward(loss);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ag::Var& v = inputs[k];
    REQUIRE_MESSAGE(v.has_grad(), "input " << k << " got no gradient");
    const std::vector<double> grad = v.grad().to_vector<double>();
    double* x = v.value().f64();
    const int64_t n = v.value().numel(), stride = std::max<int64_t>(1, n / max_elems);
    for (int64_t i = 0; i < n; i += stride) {
      ag::NoGrad ng;
      const double fd = central_difference(x[i], [&] { return f().value().item(); });
      CAPTURE(k);
      CAPTURE(i);
      GNN_CHECK_FD(grad[size_t(i)], fd, kFdTape);
    }
  }
}

}  // namespace gnn::testing
