// Graph aggregation (kernels/spmm.h): y[v] = reduce_{p in row v} w[p] x[src(p)], and its backward
// (the transposed gather over the CSC for dx, a per-edge dot for dw). With per-head weights [E, H]
// and x [N, H*F], each head h is one SpMM over the column block h*F .. h*F+F-1 (row strides H*F)
// with that head's weights: sum and mean through the multi-head kernels (all heads in one call, w read
// as [E, H]: one walk of the graph forward and two backward rather than H forward, 2H backward and the
// weights transposed both ways; on the CPU each row's heads while its rows are in cache), max one call
// per head with the weights transposed once to [H, E] and their gradient back.
// Host tensors run the CPU kernels, CUDA tensors (and a graph moved there) the CUDA ones.
#include "autograd/dispatch.h"
#include "autograd/ops.h"

namespace gnn::ag {

namespace {

// Each runs where `on` lives (CUDA: T is float, dispatch_dev); ld is both row strides.
constexpr Kernel spmm_forward_k = GNN_KERNEL(spmm_forward);
constexpr Kernel spmm_backward_w_k = GNN_KERNEL(spmm_backward_w);
constexpr Kernel spmm_backward_x_k = GNN_KERNEL(spmm_backward_x);
// with base: y = base + the aggregate
template <class T>
void fwd(const Tensor& on, T* y, int32_t* am, const T* x, const T* w, const CsrView& g, int64_t F, int64_t ld,
         Reduce op, const T* base) {
  run<T>(spmm_forward_k, on, y, am, x, w, g, F, ld, ld, op, base);
}
// with base: dx = base + the gradient (summed first), else dx = the gradient
template <class T>
void bwd_x(const Tensor& on, T* dx, const T* dy, const int32_t* am, const T* w, const CsrView& g, int64_t F, int64_t ld,
           Reduce op, const T* base) {
  run<T>(spmm_backward_x_k, on, dx, dy, am, w, g, F, ld, ld, op, base);
}
template <class T>
void bwd_w(const Tensor& on, T* dw, const T* dy, const T* x, const int32_t* am, const CsrView& g, int64_t F, int64_t ld,
           Reduce op) {
  run<T>(spmm_backward_w_k, on, dw, dy, x, am, g, F, ld, ld, op);
}

constexpr auto transpose_host = [](auto* d, auto* s, int64_t R, int64_t C) { transpose_ref(d, s, R, C); };
constexpr Kernel transpose_k{"transpose", transpose_host, transpose_host,
                             [](const Tensor& on, auto... a) { transpose_cuda(a..., on.stream()); }};
template <class T>
Tensor transpose(const Tensor& a) {  // [R, C] -> [C, R]
  const int64_t R = a.size(0), C = a.size(1);
  Tensor t = empty_like(a, Shape{C, R});
  run<T>(transpose_k, a, ptr<T>(t), ptr<T>(a), R, C);
  return t;
}

// H > 1 heads, sum or mean: every head in one call (kernels/spmm.h, spmm_heads_*), w read as [E, H].
constexpr Kernel spmm_heads_forward_k = GNN_KERNEL(spmm_heads_forward);
constexpr Kernel spmm_heads_backward_x_k{  // (base: the host's; CUDA's kernel has none)
    "spmm_heads_backward_x", [](auto... a) { spmm_heads_backward_x_ref(a...); },
    [](auto... a) { spmm_heads_backward_x_cpu(a...); },
    [](const Tensor& on, auto dx, auto dy, auto w, const CsrView& g, int64_t H, int64_t F, Reduce op, auto base) {
      GNN_CHECK(!base, "spmm_heads_backward_x: no base on CUDA");
      spmm_heads_backward_x_cuda(dx, dy, w, g, H, F, op, on.stream());
    }};
constexpr Kernel spmm_heads_backward_w_k = GNN_KERNEL(spmm_heads_backward_w);
template <class T>
Var spmm_heads(const Graph& graph, const Var& x, Reduce op, const Var& edge_weight, int64_t H) {
  const int64_t E = graph.num_edges, F = x.size(1) / H;
  Tensor y = empty_like(x.value(), Shape{graph.num_nodes, x.size(1)});  // (a bipartite graph's targets)
  run<T>(spmm_heads_forward_k, y, ptr<T>(y), ptr<T>(x.value()), ptr<T>(edge_weight.value()), csr_view(graph), H, F,
         op);
  // The closure reads x's value only for the weights' gradient.
  const Tensor xv = edge_weight.requires_grad() ? x.value() : Tensor();
  return record("spmm", y, {x, edge_weight}, [=, x = GradRef(x)](const Tensor& dy) {
    const CsrView g = csr_view(graph);
    const T* w = ptr<T>(edge_weight.value());
    if (GradSum s = dy.is_cuda() ? GradSum{} : grad_sum(x); s.into.defined()) {  // (as spmm_with's)
      run<T>(spmm_heads_backward_x_k, dy, ptr<T>(s.into), ptr<T>(dy), w, g, H, F, op, ptr<T>(s.held));
      set_grad_sum(x, std::move(s.into));
    } else if (x.requires_grad()) {
      Tensor dx = empty_like(dy, x.shape());
      run<T>(spmm_heads_backward_x_k, dy, ptr<T>(dx), ptr<T>(dy), w, g, H, F, op, static_cast<const T*>(nullptr));
      accumulate(x, dx);
    }
    if (edge_weight.requires_grad()) {
      Tensor dw = empty_like(dy, Shape{E, H});
      run<T>(spmm_heads_backward_w_k, dy, ptr<T>(dw), ptr<T>(dy), ptr<T>(xv), g, H, F, op);
      accumulate(edge_weight, dw);
    }
  });
}

// spmm, and with plus ([N, W], no edge weights): plus + spmm. name: the op's, in errors and the profile.
Var spmm_with(const char* name, const Graph& graph, const Var& x, Reduce op, const Var& edge_weight, const Var& plus) {
  GNN_CHECK(x.defined(), name, ": x is undefined");
  const Device dev = x.device();
  check_arg_on(name, "x", x, 2, x.dtype(), dev);
  check_graph_device(name, graph, dev, /*bipartite_ok=*/true);
  const int64_t N = graph.num_nodes, E = graph.num_edges, W = x.size(1);
  GNN_CHECK(x.size(0) == graph.num_sources(), name, ": x has ", x.size(0), " rows for a graph of ", graph.num_sources(),
            graph.num_src >= 0 ? " source nodes" : " nodes");
  if (plus.defined()) {
    check_arg_on(name, "plus", plus, 2, x.dtype(), dev);
    GNN_CHECK(plus.size(0) == N && plus.size(1) == W, name, ": plus ", plus.shape().str(), " must be the aggregate's [",
              N, ", ", W, "]");
  }
  int64_t H = 1;
  if (edge_weight.defined()) {
    check_arg_on("spmm", "edge_weight", edge_weight, -1, x.dtype(), dev);
    const Tensor& w = edge_weight.value();
    GNN_CHECK(w.dim() <= 2 && w.size(0) == E, "spmm: edge_weight must be [E] or [E, H] with E = ", E, ", got ",
              w.desc());
    H = w.dim() == 2 ? w.size(1) : 1;
    GNN_CHECK(H >= 1 && W % H == 0, "spmm: x has ", W, " columns, which do not split into ", H, " heads");
  }
  const int64_t F = W / H;
  GNN_CHECK(!plus.defined() || H == 1, name, ": plus takes no per-head edge weights");  // base is not offset per head
  return dispatch_dev(name, x.value(), [&](auto t) {
    using T = decltype(t);
    if (H > 1 && op != Reduce::kMax) return spmm_heads<T>(graph, x, op, edge_weight, H);
    const CsrView g = csr_view(graph);
    Tensor wt = edge_weight.defined()
                    ? (H > 1 ? transpose<T>(edge_weight.value().reshape({E, H})) : edge_weight.value())
                    : Tensor();
    Tensor argmax = op == Reduce::kMax ? Tensor::empty(Shape{H, N, F}, DType::I32, dev) : Tensor();
    Tensor y = empty_like(x.value(), Shape{N, W});
    auto wh = [wt, E](int64_t h) { return wt.defined() ? ptr<T>(wt) + h * E : nullptr; };
    auto amh = [argmax, N, F](int64_t h) { return argmax.defined() ? argmax.i32() + h * N * F : nullptr; };
    const T* base = plus.defined() ? ptr<T>(plus.value()) : nullptr;  // (H = 1 with plus)
    for (int64_t h = 0; h < H; ++h)
      fwd<T>(y, ptr<T>(y) + h * F, amh(h), ptr<T>(x.value()) + h * F, wh(h), g, F, W, op, base);
    const Tensor xv = edge_weight.requires_grad() ? x.value() : Tensor();  // read for dw only
    return record(name, y, {x, edge_weight, plus}, [=, x = GradRef(x), plus = GradRef(plus)](const Tensor& dy) {
      const CsrView g = csr_view(graph);
      accumulate(plus, dy);  // first, as add's backward would (with plus = x, x's part then adds to dy)
      if (GradSum s = grad_sum(x); s.into.defined()) {  // accumulate's bits, without dx's buffer and its pass
        for (int64_t h = 0; h < H; ++h)
          bwd_x<T>(dy, ptr<T>(s.into) + h * F, ptr<T>(dy) + h * F, amh(h), wh(h), g, F, W, op, ptr<T>(s.held) + h * F);
        set_grad_sum(x, std::move(s.into));
      } else if (x.requires_grad()) {
        Tensor dx = empty_like(dy, x.shape());
        for (int64_t h = 0; h < H; ++h)
          bwd_x<T>(dy, ptr<T>(dx) + h * F, ptr<T>(dy) + h * F, amh(h), wh(h), g, F, W, op,
                   static_cast<const T*>(nullptr));
        accumulate(x, dx);
      }
      if (edge_weight.requires_grad()) {
        Tensor dwt = empty_like(dy, Shape{H, E});
        for (int64_t h = 0; h < H; ++h)
          bwd_w<T>(dy, ptr<T>(dwt) + h * E, ptr<T>(dy) + h * F, ptr<T>(xv) + h * F, amh(h), g, F, W, op);
        accumulate(edge_weight, (H > 1 ? transpose<T>(dwt) : dwt).reshape(edge_weight.shape().vec()));
      }
    });
  });
}

}  // namespace

Var spmm(const Graph& g, const Var& x, Reduce op, const Var& edge_weight) {
  return spmm_with("spmm", g, x, op, edge_weight, {});
}

Var spmm_plus(const Graph& g, const Var& x, Reduce op, const Var& plus) {
  GNN_CHECK(plus.defined(), "spmm_plus: plus is undefined");  // (spmm_with checks the rest)
  return spmm_with("spmm_plus", g, x, op, {}, plus);
}

}  // namespace gnn::ag
