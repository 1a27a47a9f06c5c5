#include "nn/graph_util.h"

#include <cmath>
#include <vector>

namespace gnn::nn {

LoopedGraph add_self_loops(const Graph& g) {
  GNN_CHECK(!g.csr_indptr.is_cuda(), "add_self_loops: the graph must be on the host");
  const int64_t N = g.num_nodes, E = g.num_edges;
  // The edges back in input order, from the CSR and its edge ids.
  std::vector<int64_t> src(static_cast<size_t>(E)), dst(static_cast<size_t>(E));
  const int32_t *indptr = g.csr_indptr.i32(), *indices = g.csr_indices.i32(), *eid = g.csr_eid.i32();
  for (int64_t v = 0; v < N; ++v)
    for (int32_t p = indptr[v]; p < indptr[v + 1]; ++p) src[size_t(eid[p])] = indices[p], dst[size_t(eid[p])] = v;
  std::vector<int64_t> s2, d2, kept;
  s2.reserve(size_t(E + N)), d2.reserve(size_t(E + N)), kept.reserve(size_t(E));
  for (int64_t e = 0; e < E; ++e)
    if (src[size_t(e)] != dst[size_t(e)]) s2.push_back(src[size_t(e)]), d2.push_back(dst[size_t(e)]), kept.push_back(e);
  for (int64_t i = 0; i < N; ++i) s2.push_back(i), d2.push_back(i);
  LoopedGraph out;
  out.graph = Graph::from_edges(s2.data(), d2.data(), int64_t(s2.size()), N, "graph with self-loops");
  out.kept_eid = Tensor::from_vector(kept);
  return out;
}

Tensor gcn_norm(const Graph& g) {
  GNN_CHECK(!g.csr_indptr.is_cuda(), "gcn_norm: the graph must be on the host");
  const int64_t N = g.num_nodes;
  const int32_t *indptr = g.csr_indptr.i32(), *indices = g.csr_indices.i32();
  std::vector<double> inv_sqrt(static_cast<size_t>(N));
  for (int64_t v = 0; v < N; ++v) {
    const int32_t d = indptr[v + 1] - indptr[v];
    inv_sqrt[size_t(v)] = d > 0 ? 1.0 / std::sqrt(double(d)) : 0.0;
  }
  Tensor w = Tensor::empty(Shape{g.num_edges}, DType::F32);
  float* wp = w.f32();
  for (int64_t v = 0; v < N; ++v)
    for (int32_t p = indptr[v]; p < indptr[v + 1]; ++p)
      wp[p] = float(inv_sqrt[size_t(indices[p])] * inv_sqrt[size_t(v)]);
  return w;
}

}  // namespace gnn::nn
