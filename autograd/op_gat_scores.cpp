// GAT edge scores s[p, h] = leaky_relu(a_src[src(p), h] + a_dst[v, h]) (kernels/segment_softmax.h);
// the backward sums each node's edge gradients over its CSR row (a_dst) and CSC row (a_src). Runs where
// the inputs and the graph are: the CPU kernels, or the CUDA ones for a graph moved to the GPU.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/segment_softmax.h"

namespace gnn::ag {
namespace {

constexpr Kernel gat_scores_forward_k = GNN_KERNEL(gat_scores_forward);
constexpr Kernel gat_scores_backward_k = GNN_KERNEL(gat_scores_backward);

}  // namespace

Var gat_scores(const Graph& graph, const Var& a_src, const Var& a_dst, double slope) {
  const Device dev = a_src.device();
  check_arg_on("gat_scores", "a_src", a_src, 2, a_src.dtype(), dev);
  check_arg_on("gat_scores", "a_dst", a_dst, 2, a_src.dtype(), dev);
  check_graph_device("gat_scores", graph, dev);
  const int64_t N = graph.num_nodes, H = a_src.size(1);
  GNN_CHECK(a_src.shape() == Shape({N, H}) && a_dst.shape() == Shape({N, H}), "gat_scores: a_src ", a_src.shape().str(),
            " and a_dst ", a_dst.shape().str(), " must both be [N, H] with N = ", N);
  return dispatch_dev("gat_scores", a_src.value(), [&](auto t) {
    using T = decltype(t);
    const CsrView g = csr_view(graph);
    Tensor s = empty_like(a_src.value(), Shape{graph.num_edges, H});
    const T *as = ptr<T>(a_src.value()), *ad = ptr<T>(a_dst.value());
    run<T>(gat_scores_forward_k, s, ptr<T>(s), as, ad, g, H, T(slope));
    return record("gat_scores", s, {a_src, a_dst}, [=](const Tensor& ds) {
      const CsrView g = csr_view(graph);
      Tensor da_src = empty_like(ds, a_src.shape()), da_dst = empty_like(ds, a_dst.shape());
      const T *as = ptr<T>(a_src.value()), *ad = ptr<T>(a_dst.value());
      run<T>(gat_scores_backward_k, ds, ptr<T>(da_src), ptr<T>(da_dst), ptr<T>(ds), as, ad, g, H, T(slope));
      accumulate(a_src, da_src);
      accumulate(a_dst, da_dst);
    });
  });
}

}  // namespace gnn::ag
