// Softmax over each node's incoming edges, per head (kernels/segment_softmax.h):
//   y = softmax over the CSR row;  dx = y * (dy - sum_row y dy)
// The CPU kernels, or the CUDA ones for a graph and scores on the GPU.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/segment_softmax.h"

namespace gnn::ag {
namespace {

constexpr Kernel segment_softmax_forward_k = GNN_KERNEL(segment_softmax_forward);
constexpr Kernel segment_softmax_backward_k = GNN_KERNEL(segment_softmax_backward);

}  // namespace

Var segment_softmax(const Graph& graph, const Var& scores) {
  check_arg_on("segment_softmax", "scores", scores, 2, scores.dtype(), scores.device());
  check_graph_device("segment_softmax", graph, scores.device());
  GNN_CHECK(scores.size(0) == graph.num_edges, "segment_softmax: scores has ", scores.size(0), " rows for a graph of ",
            graph.num_edges, " edges");
  const int64_t S = graph.num_nodes, H = scores.size(1);
  return dispatch_dev("segment_softmax", scores.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(scores.value(), scores.shape());
    const int32_t* indptr = graph.csr_indptr.i32();
    run<T>(segment_softmax_forward_k, y, ptr<T>(y), ptr<T>(scores.value()), indptr, S, H);
    return record("segment_softmax", y, {scores}, [scores, y, graph, S, H](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      const int32_t* indptr = graph.csr_indptr.i32();
      run<T>(segment_softmax_backward_k, dy, ptr<T>(dx), ptr<T>(y), ptr<T>(dy), indptr, S, H);
      accumulate(scores, dx);
    });
  });
}

}  // namespace gnn::ag
