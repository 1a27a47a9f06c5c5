// y = act(x);  dx = dy * act'(x)  (kernels/activation.h), on the host or the GPU
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

}  // namespace gnn::ag
