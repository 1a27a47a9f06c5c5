// Readout per graph of a disjoint union: sum, mean or max over each graph's node rows, and log-sum-exp
// (kernels/pooling.h). Max keeps the argmax row for the backward; log-sum-exp's backward reads x and y.
// On a GPU the graph_ptr (checked on the host) is copied there for the kernels.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/pooling.h"

namespace gnn::ag {
namespace {
void check_pool(const char* op, const Var& x, const Tensor& graph_ptr) {
  check_arg_on(op, "x", x, 2, x.dtype(), x.device());
  check_graph_ptr(op, graph_ptr, x.size(0));
}
}  // namespace

Var pool(const Var& x, const Tensor& graph_ptr, Reduce op) {
  check_pool("pool", x, graph_ptr);
  const int64_t G = graph_ptr.size(0) - 1, F = x.size(1), N = x.size(0);
  return dispatch_dev("pool", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{G, F});
    Tensor argmax = op == Reduce::kMax ? Tensor::empty(Shape{G, F}, DType::I32, x.device()) : Tensor();
    const Tensor gptr = graph_ptr.on(x.device());  // checked on the host, read by the kernels
    int32_t* am = argmax.defined() ? argmax.i32() : nullptr;
    if (y.is_cuda()) {
      if constexpr (std::is_same_v<T, float> && kWithCuda)
        pool_forward_cuda(ptr<T>(y), am, ptr<T>(x.value()), gptr.i64(), G, F, op, y.stream());
    } else if constexpr (std::is_same_v<T, float>) {
      pool_forward_cpu(ptr<T>(y), am, ptr<T>(x.value()), gptr.i64(), G, F, op);
    } else {
      pool_forward_ref<T>(ptr<T>(y), am, ptr<T>(x.value()), gptr.i64(), G, F, op);
    }
    return record("pool", y, {x}, [x = GradRef(x), gptr, argmax, N, G, F, op](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      const int32_t* am = argmax.defined() ? argmax.i32() : nullptr;
      if (dy.is_cuda()) {
        if constexpr (std::is_same_v<T, float> && kWithCuda)
          pool_backward_cuda(ptr<T>(dx), ptr<T>(dy), am, gptr.i64(), N, G, F, op, dy.stream());
      } else if constexpr (std::is_same_v<T, float>) {
        pool_backward_cpu(ptr<T>(dx), ptr<T>(dy), am, gptr.i64(), G, F, op);
      } else {
        pool_backward_ref<T>(ptr<T>(dx), ptr<T>(dy), am, gptr.i64(), G, F, op);
      }
      accumulate(x, dx);
    });
  });
}

Var pool_logsumexp(const Var& x, const Tensor& graph_ptr) {
  check_pool("pool_logsumexp", x, graph_ptr);
  const int64_t N = x.size(0), F = x.size(1), G = graph_ptr.size(0) - 1;
  return dispatch_dev("pool_logsumexp", x.value(), [&](auto t) {
    using T = decltype(t);
    const Tensor gptr = graph_ptr.on(x.device());
    Tensor y = empty_like(x.value(), Shape{G, F});
    if (y.is_cuda()) {
      if constexpr (std::is_same_v<T, float> && kWithCuda)
        pool_logsumexp_forward_cuda(ptr<T>(y), ptr<T>(x.value()), gptr.i64(), G, F, y.stream());
    } else if constexpr (std::is_same_v<T, float>) {
      pool_logsumexp_forward_cpu(ptr<T>(y), ptr<T>(x.value()), gptr.i64(), G, F);
    } else {
      pool_logsumexp_forward_ref<T>(ptr<T>(y), ptr<T>(x.value()), gptr.i64(), G, F);
    }
    return record("pool_logsumexp", y, {x}, [x, y, gptr, N, G, F](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      const T *xp = ptr<T>(x.value()), *yp = ptr<T>(y);
      if (dy.is_cuda()) {
        if constexpr (std::is_same_v<T, float> && kWithCuda)
          pool_logsumexp_backward_cuda(ptr<T>(dx), ptr<T>(dy), xp, yp, gptr.i64(), N, G, F, dy.stream());
      } else if constexpr (std::is_same_v<T, float>) {
        pool_logsumexp_backward_cpu(ptr<T>(dx), ptr<T>(dy), xp, yp, gptr.i64(), G, F);
      } else {
        pool_logsumexp_backward_ref<T>(ptr<T>(dx), ptr<T>(dy), xp, yp, gptr.i64(), G, F);
      }
      accumulate(x, dx);
    });
  });
}

}  // namespace gnn::ag
