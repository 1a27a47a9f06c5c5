// Row-wise softmax, log-softmax and l2-normalisation (kernels/rowwise.h), each saving its output
// (and, for l2, its input) for the backward.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/rowwise.h"

namespace gnn::ag {
namespace {

constexpr Kernel rowwise_forward_k = GNN_KERNEL(rowwise_forward);
constexpr Kernel rowwise_backward_k = GNN_KERNEL(rowwise_backward);

}  // namespace

namespace {

Var rowwise(const char* name, const Var& x, RowOp op, double eps) {
  check_arg_on(name, "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1);
  return dispatch_dev(name, x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    run<T>(rowwise_forward_k, y, ptr<T>(y), ptr<T>(x.value()), R, F, op, T(eps));
    return record(name, y, {x}, [x, y, R, F, op, eps](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      run<T>(rowwise_backward_k, dx, ptr<T>(dx), ptr<T>(y), ptr<T>(dy), ptr<T>(x.value()), R, F, op, T(eps));
      accumulate(x, dx);
    });
  });
}

}  // namespace

Var softmax(const Var& x) { return rowwise("softmax", x, RowOp::kSoftmax, 0); }
Var log_softmax(const Var& x) { return rowwise("log_softmax", x, RowOp::kLogSoftmax, 0); }
Var l2_normalize(const Var& x, double eps) { return rowwise("l2_normalize", x, RowOp::kL2Normalize, eps); }

}  // namespace gnn::ag
