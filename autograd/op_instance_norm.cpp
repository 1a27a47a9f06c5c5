// Graph instance norm: per graph of a disjoint union and per channel, with an optional residual before
// it and activation after it (kernels/instance_norm.h). On a GPU
// the graph_ptr (checked on the host) is copied there for the kernels.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/instance_norm.h"

namespace gnn::ag {
namespace {

constexpr Kernel instance_norm_forward_k = GNN_KERNEL(instance_norm_forward);
// The CUDA backward sums dgamma and dbeta per graph in a workspace, then in graph order.
constexpr Kernel instance_norm_backward_k{
    "instance_norm_backward", [](auto... a) { instance_norm_backward_ref(a...); },
    [](auto... a) { instance_norm_backward_cpu(a...); },
    [](const Tensor& on, float* dx, float* dg, float* db, const float* dy, const float* x, const float* res,
       const float* mean, const float* rstd, const float* gamma, const float* beta, const int64_t* gp, int64_t G,
       int64_t F, Act act) {
      const Tensor ws = empty_like(on, Shape{2, G, F});
      instance_norm_backward_cuda(dx, dg, db, dy, x, res, mean, rstd, gamma, beta, gp, G, F, act, ws.f32(),
                                  on.stream());
    }};

}  // namespace

Var instance_norm(const Var& x, const Var& gamma, const Var& beta, const Tensor& graph_ptr, double eps,
                  const Var& residual, Act act) {
  const Device dev = x.device();
  check_arg_on("instance_norm", "x", x, 2, x.dtype(), dev);
  const int64_t F = x.size(1);
  check_graph_ptr("instance_norm", graph_ptr, x.size(0));
  check_affine("instance_norm", gamma, beta, F, x.dtype(), dev);
  GNN_CHECK(act != Act::kLeakyRelu, "instance_norm: the fused activation takes no slope; apply leaky_relu after it");
  if (residual.defined()) {
    check_arg_on("instance_norm", "residual", residual, 2, x.dtype(), dev);
    GNN_CHECK(residual.shape() == x.shape(), "instance_norm: residual ", residual.value().desc(), " is not x's ",
              x.shape().str());
  }
  const int64_t G = graph_ptr.size(0) - 1;
  return dispatch_dev("instance_norm", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape()), mean = empty_like(x.value(), Shape{G, F}),
           rstd = empty_like(x.value(), Shape{G, F});
    const Tensor gptr = graph_ptr.on(x.device());  // checked on the host, read by the kernels
    const int64_t* gp = gptr.i64();
    run<T>(instance_norm_forward_k, y, ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), ptr<T>(x.value()),
           ptr_or_null<T>(residual), ptr_or_null<T>(gamma), ptr_or_null<T>(beta), gp, G, F, T(eps), act);
    return record("instance_norm", y, {x, gamma, beta, residual}, [=](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      Tensor dg = gamma.defined() ? empty_like(dy, gamma.shape()) : Tensor();
      Tensor db = beta.defined() ? empty_like(dy, beta.shape()) : Tensor();
      T* dgp = dg.defined() ? ptr<T>(dg) : nullptr;
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      const int64_t* gp = gptr.i64();
      run<T>(instance_norm_backward_k, dy, ptr<T>(dx), dgp, dbp, ptr<T>(dy), ptr<T>(x.value()),
             ptr_or_null<T>(residual), ptr<T>(mean), ptr<T>(rstd), ptr_or_null<T>(gamma), ptr_or_null<T>(beta), gp, G,
             F, act);
      accumulate(x, dx);
      accumulate(residual, dx);  // d(x + residual) reaches both (accumulate never writes a shared gradient)
      if (dg.defined()) accumulate(gamma, dg);
      if (db.defined()) accumulate(beta, db);
    });
  });
}

}  // namespace gnn::ag
