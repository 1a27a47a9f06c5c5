// y = act(x);  dx = dy * act'(x)  (kernels/activation.h), on the host or the GPU
// y = act(x + b);  dx = dy * act'(x + b), db = column sums of dx  (bias_act: a dense layer's epilogue)
#include "autograd/dispatch.h"
#include "autograd/ops.h"

namespace gnn::ag {

Var activation(const Var& x, Act act, double slope) {
  check_arg_on("activation", "x", x, -1, x.dtype(), x.device());
  return dispatch_dev("activation", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    if (y.is_cuda()) {
      if constexpr (std::is_same_v<T, float> && kWithCuda)
        act_forward_cuda(ptr<T>(y), ptr<T>(x.value()), y.numel(), act, T(slope), y.stream());
    } else if constexpr (std::is_same_v<T, float>) {
      act_forward_cpu(ptr<T>(y), ptr<T>(x.value()), y.numel(), act, T(slope));
    } else {
      act_forward_ref<T>(ptr<T>(y), ptr<T>(x.value()), y.numel(), act, T(slope));
    }
    return record("activation", y, {x}, [x, act, slope](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      if (dx.is_cuda()) {
        if constexpr (std::is_same_v<T, float> && kWithCuda)
          act_backward_cuda(ptr<T>(dx), ptr<T>(dy), ptr<T>(x.value()), dx.numel(), act, T(slope), dx.stream());
      } else if constexpr (std::is_same_v<T, float>) {
        act_backward_cpu(ptr<T>(dx), ptr<T>(dy), ptr<T>(x.value()), dx.numel(), act, T(slope));
      } else {
        act_backward_ref<T>(ptr<T>(dx), ptr<T>(dy), ptr<T>(x.value()), dx.numel(), act, T(slope));
      }
      accumulate(x, dx);
    });
  });
}

Var bias_act(const Var& x, const Var& b, Act act, double slope) {
  check_arg_on("bias_act", "x", x, 2, x.dtype(), x.device());
  check_arg_on("bias_act", "b", b, 1, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1);
  GNN_CHECK(b.size(0) == F, "bias_act: b has ", b.size(0), " values for x with ", F, " columns");
  if (act == Act::kNone) return add_bias(x, b);  // the same values, and its dx is dy itself: no pass over x
  return dispatch_dev("bias_act", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    const T *xp = ptr<T>(x.value()), *bp = ptr<T>(b.value());
    if (y.is_cuda()) {
      if constexpr (std::is_same_v<T, float> && kWithCuda)
        bias_act_forward_cuda(ptr<T>(y), nullptr, xp, bp, R, F, act, T(slope), y.stream());
    } else if constexpr (std::is_same_v<T, float>) {
      bias_act_forward_cpu(ptr<T>(y), xp, bp, R, F, act, T(slope));
    } else {
      bias_act_forward_ref<T>(ptr<T>(y), xp, bp, R, F, act, T(slope));
    }
    return record("bias_act", y, {x, b}, [x, b, act, slope, R, F](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      Tensor db = b.requires_grad() ? empty_like(dy, b.shape()) : Tensor();
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      const T *g = ptr<T>(dy), *xp = ptr<T>(x.value()), *bp = ptr<T>(b.value());
      if (dx.is_cuda()) {
        if constexpr (std::is_same_v<T, float> && kWithCuda) {
          const Tensor ws = dbp ? column_sum_workspace_on(dy, R, F) : Tensor();
          bias_act_backward_cuda(ptr<T>(dx), dbp, g, xp, bp, R, F, act, T(slope), ws.defined() ? ptr<T>(ws) : nullptr,
                                 dx.stream());
        }
      } else if constexpr (std::is_same_v<T, float>) {
        bias_act_backward_cpu(ptr<T>(dx), dbp, g, xp, bp, R, F, act, T(slope));
      } else {
        bias_act_backward_ref<T>(ptr<T>(dx), dbp, g, xp, bp, R, F, act, T(slope));
      }
      if (x.requires_grad()) accumulate(x, dx);
      if (db.defined()) accumulate(b, db);
    });
  });
}

}  // namespace gnn::ag
