// Layer norm over each row's F values with optional gamma, beta [F] (kernels/rowwise.h).
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/rowwise.h"

namespace gnn::ag {

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  check_arg("layer_norm", "x", x, 2, x.dtype());
  const int64_t R = x.size(0), F = x.size(1);
  check_affine("layer_norm", gamma, beta, F, x.dtype(), Device::cpu());
  return dispatch_real("layer_norm", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape()), mean = empty_like(x.value(), Shape{R}), rstd = empty_like(x.value(), Shape{R});
    if constexpr (std::is_same_v<T, float>)
      layer_norm_forward_cpu(ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), ptr<T>(x.value()), ptr_or_null<T>(gamma),
                             ptr_or_null<T>(beta), R, F, T(eps));
    else
      layer_norm_forward_ref<T>(ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), ptr<T>(x.value()), ptr_or_null<T>(gamma),
                                ptr_or_null<T>(beta), R, F, T(eps));
    return record("layer_norm", y, {x, gamma, beta}, [=](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      Tensor dg = gamma.defined() ? empty_like(dy, gamma.shape()) : Tensor();
      Tensor db = beta.defined() ? empty_like(dy, beta.shape()) : Tensor();
      T* dgp = dg.defined() ? ptr<T>(dg) : nullptr;
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      if constexpr (std::is_same_v<T, float>)
        layer_norm_backward_cpu(ptr<T>(dx), dgp, dbp, ptr<T>(dy), ptr<T>(x.value()), ptr<T>(mean), ptr<T>(rstd),
                                ptr_or_null<T>(gamma), R, F);
      else
        layer_norm_backward_ref<T>(ptr<T>(dx), dgp, dbp, ptr<T>(dy), ptr<T>(x.value()), ptr<T>(mean), ptr<T>(rstd),
                                   ptr_or_null<T>(gamma), R, F);
      accumulate(x, dx);
      if (dg.defined()) accumulate(gamma, dg);
      if (db.defined()) accumulate(beta, db);
    });
  });
}

}  // namespace gnn::ag
