#include "runtime/graph.h"

#include <limits>
#include <vector>

namespace gnn {

Graph Graph::from_edges(const int64_t* src, const int64_t* dst, int64_t E, int64_t N, const std::string& what) {
  Graph g = from_bipartite_edges(src, dst, E, N, N, what);
  g.num_src = -1;
  return g;
}

Graph Graph::from_bipartite_edges(const int64_t* src, const int64_t* dst, int64_t E, int64_t S, int64_t N,
                                  const std::string& what) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  GNN_CHECK(N >= 0 && N < kMax && S >= 0 && S < kMax, what, ": ", std::max(N, S), " nodes does not fit int32 indices");
  GNN_CHECK(E >= 0 && E < kMax, what, ": ", E, " edges does not fit int32 indices");
  for (int64_t e = 0; e < E; ++e) {
    GNN_CHECK(src[e] >= 0 && src[e] < S && dst[e] >= 0 && dst[e] < N, what, ": edge ", e, " (", src[e], " -> ", dst[e],
              ") has a node id outside [0, ", S, ") -> [0, ", N, ")");
  }
  Graph g;
  g.num_nodes = N;
  g.num_edges = E;
  g.num_src = S;
  g.csr_indptr = Tensor::empty({N + 1}, DType::I32);
  g.csc_indptr = Tensor::empty({S + 1}, DType::I32);
  g.csr_indices = Tensor::empty({E}, DType::I32);
  g.csr_eid = Tensor::empty({E}, DType::I32);
  g.csc_indices = Tensor::empty({E}, DType::I32);
  g.csc_to_csr = Tensor::empty({E}, DType::I32);
  int32_t* rp = g.csr_indptr.i32();
  int32_t* cp = g.csc_indptr.i32();
  int32_t* ri = g.csr_indices.i32();
  int32_t* re = g.csr_eid.i32();
  int32_t* ci = g.csc_indices.i32();
  int32_t* cc = g.csc_to_csr.i32();

  // Counting sort by destination, stable in input order.
  std::fill(rp, rp + N + 1, 0);
  std::fill(cp, cp + S + 1, 0);
  for (int64_t e = 0; e < E; ++e) rp[dst[e] + 1]++, cp[src[e] + 1]++;
  for (int64_t v = 0; v < N; ++v) rp[v + 1] += rp[v];
  for (int64_t u = 0; u < S; ++u) cp[u + 1] += cp[u];
  std::vector<int32_t> next(rp, rp + N);
  for (int64_t e = 0; e < E; ++e) {
    const int32_t pos = next[dst[e]]++;
    ri[pos] = int32_t(src[e]);
    re[pos] = int32_t(e);
  }
  // Counting sort of the CSR entries by source, stable in CSR order.
  next.assign(cp, cp + S);
  for (int64_t v = 0; v < N; ++v) {
    for (int32_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int32_t pos = next[ri[p]]++;
      ci[pos] = int32_t(v);
      cc[pos] = p;
    }
  }
  return g;
}

Graph Graph::from_edge_index(const Tensor& edge_index, int64_t N, EdgeColumns columns, const std::string& what) {
  GNN_CHECK(edge_index.defined() && edge_index.dim() == 2 && edge_index.size(1) == 2 &&
                (edge_index.dtype() == DType::I64 || edge_index.dtype() == DType::I32),
            what, " must be i32 or i64 with shape [E, 2], got ", edge_index.desc());
  GNN_CHECK(edge_index.device().is_cpu(), what, " must be on the host to build a graph, got ", edge_index.desc());
  const int64_t E = edge_index.size(0);
  std::vector<int64_t> a(E), b(E);
  for (int64_t e = 0; e < E; ++e) {
    if (edge_index.dtype() == DType::I64) {
      a[e] = edge_index.i64()[2 * e], b[e] = edge_index.i64()[2 * e + 1];
    } else {
      a[e] = edge_index.i32()[2 * e], b[e] = edge_index.i32()[2 * e + 1];
    }
  }
  return columns == EdgeColumns::kSrcDst ? from_edges(a.data(), b.data(), E, N, what)
                                         : from_edges(b.data(), a.data(), E, N, what);
}

Graph Graph::to(Device device) const {
  Graph g = *this;
  Tensor::move_packed(g.arrays(), device);
  return g;
}

int64_t Graph::in_degree(int64_t v) const {
  GNN_CHECK(v >= 0 && v < num_nodes, "node ", v, " out of range [0, ", num_nodes, ")");
  return csr_indptr.i32()[v + 1] - csr_indptr.i32()[v];
}

int64_t Graph::out_degree(int64_t u) const {
  GNN_CHECK(u >= 0 && u < num_nodes, "node ", u, " out of range [0, ", num_nodes, ")");
  return csc_indptr.i32()[u + 1] - csc_indptr.i32()[u];
}

}  // namespace gnn
