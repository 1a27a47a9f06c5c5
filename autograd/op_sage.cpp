// The fused SAGE layer y = act([mean_{j->i} x_j | x_i] W + b) (kernels/sage.h) with its own backward.
// The float path keeps z and h = [agg | x] from the forward so the backward is two whole-matrix
// products; tests check it against the composition spmm -> concat_cols -> matmul -> add_bias -> act.
// On a GPU the same steps run as kernels/sage.cu: four launches forward, six backward.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/sage.h"

namespace gnn::ag {
namespace {

// Forward: (y, z, h, x, g, W, b, F, O, act, slope); z and h null when nothing will run the backward (the
// reference always writes z and keeps no h). The CUDA version aggregates into scratch when h is null.
constexpr Kernel sage_forward_k{
    "sage_forward",
    [](auto* y, auto* z, auto*, auto* x, const CsrView& g, auto... a) { sage_forward_ref(y, z, x, g, a...); },
    [](auto... a) { sage_forward_cpu(a...); },
    [](const Tensor& on, float* y, float* z, float* h, const float* x, const CsrView& g, const float* W, const float* b,
       int64_t F, int64_t O, Act act, float slope) {
      const Tensor scratch = h ? Tensor() : empty_like(on, Shape{g.num_rows, 2 * F});
      sage_forward_cuda(y, z, h, h ? nullptr : scratch.f32(), x, g, W, b, F, O, act, slope,
                        cuda_blas(on.device().index), on.stream());
    }};
// Backward: (dx, dW, db, dy, z, h, x, g, W, F, O, act, slope); the fast versions read h = [agg | x], the
// reference x itself, and they take a workspace of their own.
constexpr Kernel sage_backward_k{
    "sage_backward",
    [](auto* dx, auto* dW, auto* db, auto* dy, auto* z, auto*, auto* x, const CsrView& g, auto... a) {
      sage_backward_ref(dx, dW, db, dy, z, x, g, a...);
    },
    [](float* dx, float* dW, float* db, const float* dy, const float* z, const float* h, const float*, const CsrView& g,
       const float* W, int64_t F, int64_t O, Act act, float slope) {
      const Tensor ws = Tensor::empty(Shape{sage_backward_workspace(g.num_rows, F, O)}, DType::F32);
      sage_backward_cpu(dx, dW, db, dy, z, h, g, W, F, O, act, slope, ws.f32());
    },
    [](const Tensor& on, float* dx, float* dW, float* db, const float* dy, const float* z, const float* h, const float*,
       const CsrView& g, const float* W, int64_t F, int64_t O, Act act, float slope) {
      const Tensor ws = empty_like(on, Shape{sage_backward_workspace_cuda(g.num_rows, F, O)});
      sage_backward_cuda(dx, dW, db, dy, z, h, g, W, F, O, act, slope, ws.f32(), cuda_blas(on.device().index),
                         on.stream());
    }};

constexpr Kernel sage_combine_forward_k = GNN_KERNEL(sage_combine_forward);
constexpr Kernel sage_combine_backward_k = GNN_KERNEL(sage_combine_backward);

}  // namespace

Var sage_combine(const Graph& graph, const Var& q, int64_t configs, const Var& b) {
  check_arg_on("sage_combine", "q", q, 2, q.dtype(), q.device());
  check_graph_device("sage_combine", graph, q.device());
  const int64_t N = graph.num_nodes, C = configs;
  GNN_CHECK(C >= 1, "sage_combine: configs must be at least 1, got ", C);
  GNN_CHECK(q.size(0) == N, "sage_combine: q has ", q.size(0), " rows for a graph of ", N, " nodes");
  GNN_CHECK(q.size(1) % (2 * C) == 0, "sage_combine: q's ", q.size(1), " columns are not ", C,
            " configs of [aggregate | root] halves of one width");
  const int64_t O = q.size(1) / (2 * C);
  if (b.defined()) {
    check_arg_on("sage_combine", "b", b, 1, q.dtype(), q.device());
    GNN_CHECK(b.size(0) == O, "sage_combine: b has ", b.size(0), " values for ", O, " outputs");
  }
  return dispatch_dev("sage_combine", q.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(q.value(), Shape{N, C * O});
    run<T>(sage_combine_forward_k, y, ptr<T>(y), ptr<T>(q.value()), ptr_or_null<T>(b), csr_view(graph), C, O);
    return record("sage_combine", y, {q, b}, [=, q = GradRef(q), b = GradRef(b)](const Tensor& dy) {
      if (b.requires_grad()) {  // the bias's gradient first, as matmul_bias's
        Tensor db = empty_like(dy, Shape{O});
        column_sum_on<T>(dy, ptr<T>(db), ptr<T>(dy), N * C, O);
        accumulate(b, db);
      }
      if (q.requires_grad()) {
        Tensor dq = empty_like(dy, Shape{N, 2 * C * O});
        run<T>(sage_combine_backward_k, dy, ptr<T>(dq), ptr<T>(dy), csr_view(graph), C, O);
        accumulate(q, dq);
      }
    });
  });
}

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
    run<T>(sage_forward_k, y, ptr<T>(y), z.defined() ? ptr<T>(z) : nullptr, h.defined() ? ptr<T>(h) : nullptr,
           ptr<T>(x.value()), g, ptr<T>(W.value()), ptr_or_null<T>(b), F, O, act, T(slope));
    return record("sage_fused", y, {x, W, b}, [=](const Tensor& dy) {
      const CsrView g = csr_view(graph);
      Tensor dx = empty_like(dy, x.shape()), dW = empty_like(dy, W.shape());
      Tensor db = b.defined() ? empty_like(dy, b.shape()) : Tensor();
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      run<T>(sage_backward_k, dy, ptr<T>(dx), ptr<T>(dW), dbp, ptr<T>(dy), ptr<T>(z), h.defined() ? ptr<T>(h) : nullptr,
             ptr<T>(x.value()), g, ptr<T>(W.value()), F, O, act, T(slope));
      accumulate(x, dx);
      accumulate(W, dW);
      if (db.defined()) accumulate(b, db);
    });
  });
}

}  // namespace gnn::ag
