// Readout per graph of a disjoint union: sum, mean or max over each graph's node rows, and log-sum-exp
// (kernels/pooling.h). Max keeps the argmax row for the backward; log-sum-exp's backward reads x and y.
// On a GPU the graph_ptr (checked on the host) is copied there for the kernels.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/pooling.h"

namespace gnn::ag {
namespace {

constexpr Kernel pool_forward_k = GNN_KERNEL(pool_forward);
constexpr Kernel pool_logsumexp_forward_k = GNN_KERNEL(pool_logsumexp_forward);
// The CUDA backwards also take the row count N, after graph_ptr; the host ones do not.
constexpr Kernel pool_backward_k{
    "pool_backward",
    [](auto dx, auto dy, auto am, auto gp, int64_t, auto... a) { pool_backward_ref(dx, dy, am, gp, a...); },
    [](auto dx, auto dy, auto am, auto gp, int64_t, auto... a) { pool_backward_cpu(dx, dy, am, gp, a...); },
    [](const Tensor& on, auto... a) { pool_backward_cuda(a..., on.stream()); }};
constexpr Kernel pool_logsumexp_backward_k{
    "pool_logsumexp_backward",
    [](auto dx, auto dy, auto x, auto y, auto gp, int64_t, auto... a) {
      pool_logsumexp_backward_ref(dx, dy, x, y, gp, a...);
    },
    [](auto dx, auto dy, auto x, auto y, auto gp, int64_t, auto... a) {
      pool_logsumexp_backward_cpu(dx, dy, x, y, gp, a...);
    },
    [](const Tensor& on, auto... a) { pool_logsumexp_backward_cuda(a..., on.stream()); }};

// mean + max: on a GPU the two pools' kernels and add's (their bits), the mean's backward first.
constexpr Kernel pool_mean_max_forward_k{
    "pool_mean_max_forward", [](auto... a) { pool_mean_max_forward_ref(a...); },
    [](auto... a) { pool_mean_max_forward_cpu(a...); },
    [](const Tensor& on, float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F) {
      const Tensor mean = empty_like(on, Shape{G, F});
      pool_forward_cuda(mean.f32(), nullptr, x, graph_ptr, G, F, Reduce::kMean, on.stream());
      pool_forward_cuda(y, argmax, x, graph_ptr, G, F, Reduce::kMax, on.stream());
      add_cuda(y, mean.f32(), y, G * F, 1.0f, on.stream());
    }};
constexpr Kernel pool_mean_max_backward_k{
    "pool_mean_max_backward",
    [](auto dx, auto dy, auto am, auto gp, int64_t, auto... a) { pool_mean_max_backward_ref(dx, dy, am, gp, a...); },
    [](auto dx, auto dy, auto am, auto gp, int64_t, auto... a) { pool_mean_max_backward_cpu(dx, dy, am, gp, a...); },
    [](const Tensor& on, float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t N,
       int64_t G, int64_t F, const float* base) {
      pool_backward_cuda(dx, dy, argmax, graph_ptr, N, G, F, Reduce::kMean, base, on.stream());
      pool_backward_cuda(dx, dy, argmax, graph_ptr, N, G, F, Reduce::kMax, dx, on.stream());
    }};

void check_pool(const char* op, const Var& x, const Tensor& graph_ptr) {
  check_arg_on(op, "x", x, 2, x.dtype(), x.device());
  check_graph_ptr(op, graph_ptr, x.size(0));
}

int32_t* argmax_or_null(const Tensor& argmax) { return argmax.defined() ? argmax.i32() : nullptr; }

// What pool and pool_mean_max share: y [G, F] by forward(t, y, argmax, gptr) (argmax [G, F] where kept);
// in the backward x's gradient by backward(t, dy, into, argmax, gptr, base), as into = base + its part in
// one pass over x's held gradient where grad_sum allows, else written apart (base null) and accumulated.
// Sizes come from the tensors: x [N, F] = into, y [G, F] = dy.
template <class Forward, class Backward>
Var pool_with(const char* op, const Var& x, const Tensor& graph_ptr, bool keeps_argmax, Forward forward,
              Backward backward) {
  check_pool(op, x, graph_ptr);
  const int64_t G = graph_ptr.size(0) - 1, F = x.size(1);
  return dispatch_dev(op, x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{G, F});
    Tensor argmax = keeps_argmax ? Tensor::empty(Shape{G, F}, DType::I32, x.device()) : Tensor();
    const Tensor gptr = graph_ptr.on(x.device());  // checked on the host, read by the kernels
    forward(t, y, argmax, gptr);
    return record(op, y, {x}, [x = GradRef(x), gptr, argmax, backward](const Tensor& dy) {
      if (GradSum s = grad_sum(x); s.into.defined()) {  // x's gradient + this one, in one pass
        backward(T{}, dy, s.into, argmax, gptr, ptr<T>(s.held));
        return set_grad_sum(x, std::move(s.into));
      }
      Tensor dx = empty_like(dy, x.shape());
      backward(T{}, dy, dx, argmax, gptr, static_cast<const T*>(nullptr));
      accumulate(x, dx);
    });
  });
}

}  // namespace

Var pool(const Var& x, const Tensor& graph_ptr, Reduce op) {
  return pool_with(
      "pool", x, graph_ptr, op == Reduce::kMax,
      [&](auto t, const Tensor& y, const Tensor& argmax, const Tensor& gptr) {
        using T = decltype(t);
        run<T>(pool_forward_k, y, ptr<T>(y), argmax_or_null(argmax), ptr<T>(x.value()), gptr.i64(), y.size(0),
               y.size(1), op);
      },
      [op](auto t, const Tensor& dy, const Tensor& dx, const Tensor& argmax, const Tensor& gptr, auto base) {
        using T = decltype(t);
        run<T>(pool_backward_k, dy, ptr<T>(dx), ptr<T>(dy), argmax_or_null(argmax), gptr.i64(), dx.size(0), dy.size(0),
               dy.size(1), op, base);
      });
}

Var pool_mean_max(const Var& x, const Tensor& graph_ptr) {
  return pool_with(
      "pool_mean_max", x, graph_ptr, true,
      [&](auto t, const Tensor& y, const Tensor& argmax, const Tensor& gptr) {
        using T = decltype(t);
        run<T>(pool_mean_max_forward_k, y, ptr<T>(y), argmax.i32(), ptr<T>(x.value()), gptr.i64(), y.size(0),
               y.size(1));
      },
      [](auto t, const Tensor& dy, const Tensor& dx, const Tensor& argmax, const Tensor& gptr, auto base) {
        using T = decltype(t);
        run<T>(pool_mean_max_backward_k, dy, ptr<T>(dx), ptr<T>(dy), argmax.i32(), gptr.i64(), dx.size(0), dy.size(0),
               dy.size(1), base);
      });
}

Var pool_logsumexp(const Var& x, const Tensor& graph_ptr) {
  check_pool("pool_logsumexp", x, graph_ptr);
  const int64_t N = x.size(0), F = x.size(1), G = graph_ptr.size(0) - 1;
  return dispatch_dev("pool_logsumexp", x.value(), [&](auto t) {
    using T = decltype(t);
    const Tensor gptr = graph_ptr.on(x.device());
    Tensor y = empty_like(x.value(), Shape{G, F});
    run<T>(pool_logsumexp_forward_k, y, ptr<T>(y), ptr<T>(x.value()), gptr.i64(), G, F);
    return record("pool_logsumexp", y, {x}, [x, y, gptr, N, G, F](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      const T *xp = ptr<T>(x.value()), *yp = ptr<T>(y);
      run<T>(pool_logsumexp_backward_k, dy, ptr<T>(dx), ptr<T>(dy), xp, yp, gptr.i64(), N, G, F);
      accumulate(x, dx);
    });
  });
}

}  // namespace gnn::ag
