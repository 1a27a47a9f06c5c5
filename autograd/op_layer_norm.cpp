// Layer norm over each row's F values with optional gamma, beta [F] (kernels/layer_norm.h); the CUDA
// kernels for inputs on a GPU.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/layer_norm.h"

namespace gnn::ag {
namespace {

constexpr Kernel layer_norm_forward_k = GNN_KERNEL(layer_norm_forward);
// The CUDA backward sums dgamma and dbeta through a workspace of partials (when either is asked for).
constexpr Kernel layer_norm_backward_k{
    "layer_norm_backward", [](auto... a) { layer_norm_backward_ref(a...); },
    [](auto... a) { layer_norm_backward_cpu(a...); },
    [](const Tensor& on, float* dx, float* dg, float* db, const float* dy, const float* x, const float* mean,
       const float* rstd, const float* gamma, int64_t R, int64_t F) {
      const Tensor ws = dg || db ? empty_like(on, Shape{layer_norm_backward_workspace_cuda(R, F)}) : Tensor();
      layer_norm_backward_cuda(dx, dg, db, dy, x, mean, rstd, gamma, R, F, ws.defined() ? ws.f32() : nullptr,
                               on.stream());
    }};

}  // namespace

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  check_arg_on("layer_norm", "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1);
  check_affine("layer_norm", gamma, beta, F, x.dtype(), x.device());
  return dispatch_dev("layer_norm", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape()), mean = empty_like(x.value(), Shape{R}),
           rstd = empty_like(x.value(), Shape{R});
    const T *xp = ptr<T>(x.value()), *gp = ptr_or_null<T>(gamma), *bp = ptr_or_null<T>(beta);
    run<T>(layer_norm_forward_k, y, ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), xp, gp, bp, R, F, T(eps));
    return record("layer_norm", y, {x, gamma, beta}, [=](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      Tensor dg = gamma.defined() ? empty_like(dy, gamma.shape()) : Tensor();
      Tensor db = beta.defined() ? empty_like(dy, beta.shape()) : Tensor();
      T* dgp = dg.defined() ? ptr<T>(dg) : nullptr;
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      const T *xp = ptr<T>(x.value()), *gp = ptr_or_null<T>(gamma);
      run<T>(layer_norm_backward_k, dy, ptr<T>(dx), dgp, dbp, ptr<T>(dy), xp, ptr<T>(mean), ptr<T>(rstd), gp, R, F);
      accumulate(x, dx);
      if (dg.defined()) accumulate(gamma, dg);
      if (db.defined()) accumulate(beta, db);
    });
  });
}

}  // namespace gnn::ag
