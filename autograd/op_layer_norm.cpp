// Layer norm over each row's F values with optional gamma, beta [F] (kernels/layer_norm.h); the CUDA
// kernels for inputs on a GPU.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/layer_norm.h"

namespace gnn::ag {

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  check_arg_on("layer_norm", "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1);
  check_affine("layer_norm", gamma, beta, F, x.dtype(), x.device());
  return dispatch_dev("layer_norm", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape()), mean = empty_like(x.value(), Shape{R}),
           rstd = empty_like(x.value(), Shape{R});
    const T *xp = ptr<T>(x.value()), *gp = ptr_or_null<T>(gamma), *bp = ptr_or_null<T>(beta);
    if (y.is_cuda()) {
      if constexpr (std::is_same_v<T, float> && kWithCuda)
        layer_norm_forward_cuda(ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), xp, gp, bp, R, F, T(eps), y.stream());
    } else if constexpr (std::is_same_v<T, float>) {
      layer_norm_forward_cpu(ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), xp, gp, bp, R, F, T(eps));
    } else {
      layer_norm_forward_ref<T>(ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), xp, gp, bp, R, F, T(eps));
    }
    return record("layer_norm", y, {x, gamma, beta}, [=](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      Tensor dg = gamma.defined() ? empty_like(dy, gamma.shape()) : Tensor();
      Tensor db = beta.defined() ? empty_like(dy, beta.shape()) : Tensor();
      T* dgp = dg.defined() ? ptr<T>(dg) : nullptr;
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      const T *xp = ptr<T>(x.value()), *gp = ptr_or_null<T>(gamma);
      if (dy.is_cuda()) {
        if constexpr (std::is_same_v<T, float> && kWithCuda) {
          // dy * xhat, summed over rows, and the column sums' partials
          const Tensor ws =
              dg.defined() || db.defined() ? empty_like(dy, Shape{layer_norm_backward_workspace_cuda(R, F)}) : Tensor();
          layer_norm_backward_cuda(ptr<T>(dx), dgp, dbp, ptr<T>(dy), xp, ptr<T>(mean), ptr<T>(rstd), gp, R, F,
                                   ws.defined() ? ptr<T>(ws) : nullptr, dy.stream());
        }
      } else if constexpr (std::is_same_v<T, float>) {
        layer_norm_backward_cpu(ptr<T>(dx), dgp, dbp, ptr<T>(dy), xp, ptr<T>(mean), ptr<T>(rstd), gp, R, F);
      } else {
        layer_norm_backward_ref<T>(ptr<T>(dx), dgp, dbp, ptr<T>(dy), xp, ptr<T>(mean), ptr<T>(rstd), gp, R, F);
      }
      accumulate(x, dx);
      if (dg.defined()) accumulate(gamma, dg);
      if (db.defined()) accumulate(beta, db);
    });
  });
}

}  // namespace gnn::ag
