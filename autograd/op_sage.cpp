// The fused SAGE layer y = act([mean_{j->i} x_j | x_i] W + b) (kernels/sage.h) with its own backward.
// The float path keeps z and h = [agg | x] from the forward so the backward is two whole-matrix
// products; tests check it against the composition spmm -> concat_cols -> matmul -> add_bias -> act.
// On a GPU the same steps run as kernels/sage.cu: four launches forward, six backward.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/sage.h"

namespace gnn::ag {

Var sage_fused(const Graph& graph, const Var& x, const Var& W, const Var& b, Act act, double slope) {
  check_arg_on("sage_fused", "x", x, 2, x.dtype(), x.device());
  check_graph_device("sage_fused", graph, x.device());
  check_arg_on("sage_fused", "W", W, 2, x.dtype(), x.device());
  const int64_t N = graph.num_nodes, F = x.size(1), O = W.size(1);
  GNN_CHECK(x.size(0) == N, "sage_fused: x has ", x.size(0), " rows for a graph of ", N, " nodes");
  GNN_CHECK(W.size(0) == 2 * F, "sage_fused: W must be [2F, O] = [", 2 * F, ", O] for ", F, " input features, got ",
            W.shape().str());
  if (b.defined()) {
    check_arg_on("sage_fused", "b", b, 1, x.dtype(), x.device());
    GNN_CHECK(b.size(0) == O, "sage_fused: b has ", b.size(0), " values for ", O, " outputs");
  }
  return dispatch_dev("sage_fused", x.value(), [&](auto t) {
    using T = decltype(t);
    const CsrView g = csr_view(graph);
    const bool training = grad_enabled() && (x.requires_grad() || W.requires_grad() || b.requires_grad());
    Tensor y = empty_like(x.value(), Shape{N, O});
    // z (pre-activation) is kept for the backward; the double reference always writes it
    Tensor z = training || !std::is_same_v<T, float> ? empty_like(x.value(), Shape{N, O}) : Tensor();
    Tensor h = training ? empty_like(x.value(), Shape{N, 2 * F}) : Tensor();
    if (x.value().is_cuda()) {
      if constexpr (std::is_same_v<T, float> && kWithCuda) {
        const Tensor scratch = training ? Tensor() : empty_like(x.value(), Shape{N, 2 * F});
        sage_forward_cuda(ptr<T>(y), training ? ptr<T>(z) : nullptr, training ? ptr<T>(h) : nullptr,
                          training ? nullptr : ptr<T>(scratch), ptr<T>(x.value()), g, ptr<T>(W.value()),
                          ptr_or_null<T>(b), F, O, act, T(slope), cuda_blas(x.value().device().index),
                          x.value().stream());
      }
    } else if constexpr (std::is_same_v<T, float>) {
      sage_forward_cpu(ptr<T>(y), training ? ptr<T>(z) : nullptr, training ? ptr<T>(h) : nullptr, ptr<T>(x.value()), g,
                       ptr<T>(W.value()), ptr_or_null<T>(b), F, O, act, T(slope));
    } else {
      sage_forward_ref<T>(ptr<T>(y), ptr<T>(z), ptr<T>(x.value()), g, ptr<T>(W.value()), ptr_or_null<T>(b), F, O, act,
                          T(slope));
    }
    return record("sage_fused", y, {x, W, b}, [=](const Tensor& dy) {
      const CsrView g = csr_view(graph);
      Tensor dx = empty_like(dy, x.shape()), dW = empty_like(dy, W.shape());
      Tensor db = b.defined() ? empty_like(dy, b.shape()) : Tensor();
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      if (dy.is_cuda()) {
        if constexpr (std::is_same_v<T, float> && kWithCuda) {
          const Tensor ws = empty_like(dy, Shape{sage_backward_workspace_cuda(N, F, O)});
          sage_backward_cuda(ptr<T>(dx), ptr<T>(dW), dbp, ptr<T>(dy), ptr<T>(z), ptr<T>(h), g, ptr<T>(W.value()), F, O,
                             act, T(slope), ptr<T>(ws), cuda_blas(dy.device().index), dy.stream());
        }
      } else if constexpr (std::is_same_v<T, float>) {
        const Tensor ws = Tensor::empty(Shape{sage_backward_workspace(N, F, O)}, DType::F32);
        sage_backward_cpu(ptr<T>(dx), ptr<T>(dW), dbp, ptr<T>(dy), ptr<T>(z), ptr<T>(h), g, ptr<T>(W.value()), F, O,
                          act, T(slope), ptr<T>(ws));
      } else {
        sage_backward_ref<T>(ptr<T>(dx), ptr<T>(dW), dbp, ptr<T>(dy), ptr<T>(z), ptr<T>(x.value()), g,
                             ptr<T>(W.value()), F, O, act, T(slope));
      }
      accumulate(x, dx);
      accumulate(W, dW);
      if (db.defined()) accumulate(b, db);
    });
  });
}

}  // namespace gnn::ag
