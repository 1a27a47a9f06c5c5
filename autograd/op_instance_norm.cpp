// Graph instance norm: per graph of a disjoint union and per channel, with an optional residual before
// it and activation and dropout after it (kernels/instance_norm.h). On a GPU
// the graph_ptr (checked on the host) is copied there for the kernels.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/instance_norm.h"

namespace gnn::ag {
namespace {

// A fused dropout on a GPU: the norm's kernels and dropout's (dropout_apply_cuda or, one mask for a node's
// configs, dropout_configs_apply_cuda) around them, their bits. N rows of F columns.
inline void dropout_cuda(float* y, const float* x, int64_t N, int64_t F, const RowsDropout<float>& drop, uint64_t seed,
                         Stream stream) {
  if (drop.configs > 0)
    dropout_configs_apply_cuda(y, x, N, drop.configs, F / drop.configs, seed, drop.mask.threshold, drop.mask.scale,
                               stream);
  else dropout_apply_cuda(y, x, N * F, seed, drop.mask.threshold, drop.mask.scale, stream);
}
constexpr Kernel instance_norm_forward_k{
    "instance_norm_forward",  // the host versions take neither the seed nor the row count (the mask holds its key)
    [](auto y, auto m, auto r, auto x, auto res, auto g, auto b, auto gp, int64_t G, int64_t F, auto eps, Act act,
       const auto& drop, uint64_t,
       int64_t) { instance_norm_forward_ref(y, m, r, x, res, g, b, gp, G, F, eps, act, drop); },
    [](auto y, auto m, auto r, auto x, auto res, auto g, auto b, auto gp, int64_t G, int64_t F, auto eps, Act act,
       const auto& drop, uint64_t,
       int64_t) { instance_norm_forward_cpu(y, m, r, x, res, g, b, gp, G, F, eps, act, drop); },
    [](const Tensor& on, float* y, float* mean, float* rstd, const float* x, const float* res, const float* gamma,
       const float* beta, const int64_t* gp, int64_t G, int64_t F, float eps, Act act, const RowsDropout<float>& drop,
       uint64_t seed, int64_t N) {
      instance_norm_forward_cuda(y, mean, rstd, x, res, gamma, beta, gp, G, F, eps, act, on.stream());
      if (drop.mask.on) dropout_cuda(y, y, N, F, drop, seed, on.stream());
    }};
// The CUDA backward sums dgamma and dbeta per graph in a workspace, then in graph order. `held` (x's
// gradient so far, for dx = held + the norm's dx in its last pass) on the host only.
constexpr Kernel instance_norm_backward_k{
    "instance_norm_backward",
    [](auto dx, auto dg, auto db, auto dy, auto x, auto res, auto m, auto r, auto g, auto b, auto gp, int64_t G,
       int64_t F, Act act, const auto& drop, uint64_t, int64_t,
       auto held) { instance_norm_backward_ref(dx, dg, db, dy, x, res, m, r, g, b, gp, G, F, act, drop, held); },
    [](auto dx, auto dg, auto db, auto dy, auto x, auto res, auto m, auto r, auto g, auto b, auto gp, int64_t G,
       int64_t F, Act act, const auto& drop, uint64_t, int64_t,
       auto held) { instance_norm_backward_cpu(dx, dg, db, dy, x, res, m, r, g, b, gp, G, F, act, drop, held); },
    [](const Tensor& on, float* dx, float* dg, float* db, const float* dy, const float* x, const float* res,
       const float* mean, const float* rstd, const float* gamma, const float* beta, const int64_t* gp, int64_t G,
       int64_t F, Act act, const RowsDropout<float>& drop, uint64_t seed, int64_t N, const float* held) {
      GNN_CHECK(!held, "instance_norm_backward: a held gradient is added on the host only");
      const Tensor ws = empty_like(on, Shape{2, G, F});
      Tensor masked;
      if (drop.mask.on) {  // dropout's backward first, into a buffer of its own
        masked = empty_like(on, Shape{N, F});
        dropout_cuda(masked.f32(), dy, N, F, drop, seed, on.stream());
        dy = masked.f32();
      }
      instance_norm_backward_cuda(dx, dg, db, dy, x, res, mean, rstd, gamma, beta, gp, G, F, act, ws.f32(),
                                  on.stream());
    }};

}  // namespace

Var instance_norm(const Var& x, const Var& gamma, const Var& beta, const Tensor& graph_ptr, double eps,
                  const Var& residual, Act act, FusedDropout dropout, int64_t configs) {
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
  GNN_CHECK(dropout.p >= 0 && dropout.p < 1, "instance_norm: dropout p must lie in [0, 1), got ", dropout.p);
  GNN_CHECK(!dropout.configs_shared || (configs >= 1 && F % configs == 0), "instance_norm: ", F, " columns are not ",
            configs, " configs side by side (a dropout mask shared by the configs)");
  const int64_t G = graph_ptr.size(0) - 1, N = x.size(0);
  const uint64_t seed = dropout.seed;
  return dispatch_dev("instance_norm", x.value(), [&](auto t) {
    using T = decltype(t);
    const RowsDropout<T> drop = rows_dropout<T>(dropout, configs);
    Tensor y = empty_like(x.value(), x.shape()), mean = empty_like(x.value(), Shape{G, F}),
           rstd = empty_like(x.value(), Shape{G, F});
    const Tensor gptr = graph_ptr.on(x.device());  // checked on the host, read by the kernels
    const int64_t* gp = gptr.i64();
    run<T>(instance_norm_forward_k, y, ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), ptr<T>(x.value()),
           ptr_or_null<T>(residual), ptr_or_null<T>(gamma), ptr_or_null<T>(beta), gp, G, F, T(eps), act, drop, seed, N);
    return record("instance_norm", y, {x, gamma, beta, residual}, [=](const Tensor& dy) {
      Tensor dg = gamma.defined() ? empty_like(dy, gamma.shape()) : Tensor();
      Tensor db = beta.defined() ? empty_like(dy, beta.shape()) : Tensor();
      T* dgp = dg.defined() ? ptr<T>(dg) : nullptr;
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      const int64_t* gp = gptr.i64();
      // x's gradient so far plus the norm's in the last pass (accumulate's bits, without dx's buffer and
      // the pass adding it): on the host, where no dz is stored in dx between the passes and no residual
      // shares dx.
      GradSum sum;
      if (dy.device().is_cpu() && act == Act::kNone && !drop.mask.on && !residual.defined()) sum = grad_sum(GradRef(x));
      Tensor dx = sum.into.defined() ? sum.into : empty_like(dy, x.shape());
      run<T>(instance_norm_backward_k, dy, ptr<T>(dx), dgp, dbp, ptr<T>(dy), ptr<T>(x.value()),
             ptr_or_null<T>(residual), ptr<T>(mean), ptr<T>(rstd), ptr_or_null<T>(gamma), ptr_or_null<T>(beta), gp, G,
             F, act, drop, seed, N, sum.held.defined() ? ptr<T>(sum.held) : static_cast<const T*>(nullptr));
      if (sum.into.defined()) set_grad_sum(GradRef(x), dx);
      else accumulate(x, dx);
      accumulate(residual, dx);  // d(x + residual) reaches both (accumulate never writes a shared gradient)
      if (dg.defined()) accumulate(gamma, dg);
      if (db.defined()) accumulate(beta, db);
    });
  });
}

}  // namespace gnn::ag
