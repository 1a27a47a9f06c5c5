// Central differences: the one way the tests check a gradient, with its step and its tolerances named.
// Every check reads |analytic - numeric| <= atol + rtol |numeric|, all in double.
//
// Why these numbers. With h = 1e-6 the central difference has truncation error ~h^2 |f'''| ~ 1e-12 and
// rounding error ~1e-16 |f| / h ~ 1e-10 for |f| ~ 1. The tape (kFdTape) and a closed-form derivative
// (kFdScalar) are held three to four orders above both. A kernel's double reference (kFdKernel) sums a
// loss over every output through a whole graph, where the per-element rounding adds up, so it gets
// rtol 1e-3; a dropped or doubled term is O(1) and fails all three. Inputs must stay away from the kinks
// of relu / max / leaky_relu and from ties, which random inputs do with probability ~1.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace gnn::testing {

inline constexpr double kFdStep = 1e-6;

struct FdTolerance {
  double atol, rtol;
};
inline constexpr FdTolerance kFdTape{1e-6, 1e-5};  // the autograd tape and nn layers, in double
inline constexpr FdTolerance kFdKernel{1e-5, 1e-3};  // a kernel's double reference backward
inline constexpr FdTolerance kFdScalar{1e-6, 1e-6};  // a closed-form derivative of one variable

// (f(p + h) - f(p - h)) / 2h, p put back afterwards.
template <class F>
double central_difference(double& p, F&& f) {
  const double keep = p;
  p = keep + kFdStep;
  const double lp = f();
  p = keep - kFdStep;
  const double lm = f();
  p = keep;
  return (lp - lm) / (2 * kFdStep);
}

inline bool fd_agrees(double analytic, double numeric, FdTolerance tol) {
  return std::fabs(analytic - numeric) <= tol.atol + tol.rtol * std::fabs(numeric);
}

#define GNN_CHECK_FD(ANALYTIC_, NUMERIC_, TOL_)                                       \
  do {                                                                                \
    const double gnn_a_ = (ANALYTIC_), gnn_n_ = (NUMERIC_);                           \
    CHECK_MESSAGE(::gnn::testing::fd_agrees(gnn_a_, gnn_n_, TOL_),                    \
                  "analytic " << gnn_a_ << " against central difference " << gnn_n_); \
  } while (0)

// Every element of `param` against the analytic gradient `grad` of the scalar loss(), which reads param.
template <class Loss>
void check_gradient(std::vector<double>& param, const std::vector<double>& grad, Loss loss,
                    FdTolerance tol = kFdKernel) {
  for (size_t i = 0; i < param.size(); ++i) {
    CAPTURE(i);
    GNN_CHECK_FD(grad[i], central_difference(param[i], loss), tol);
  }
}

}  // namespace gnn::testing
