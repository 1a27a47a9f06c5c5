// Graph preparation the convolutions share: self-loops (GCN and GAT add them) and GCN's symmetric
// normalisation. Layers cache the result per graph (GraphCache), so a training loop that passes the
// same Graph every step builds it once.
#pragma once
#include <cstdint>

#include "runtime/graph.h"

namespace gnn::nn {

// The graph with every existing self-loop dropped and one loop per node appended, as PyG's GATConv
// does (remove_self_loops, then add_self_loops). kept_eid (i64) lists, in the new graph's input-edge
// order, the original id of each kept edge; ids >= kept_eid.size(0) are the loops (loop of node i
// is kept_eid.size(0) + i).
struct LoopedGraph {
  Graph graph;
  Tensor kept_eid;
};
LoopedGraph add_self_loops(const Graph& g);

// GCN's weights per CSR position p of the edge u -> v: 1 / sqrt(deg(u) deg(v)), deg = in-degree
// counting every edge once (PyG's gcn_norm with unit edge weights). f32 [E].
Tensor gcn_norm(const Graph& g);

// Remembers one derived value for the last graph seen (by its CSR storage and its sizes), so a layer
// rebuilds it only when it is given a different graph. The cache holds a reference to that storage,
// so a later graph can never be allocated at the same address and be mistaken for it.
template <class T>
class GraphCache {
 public:
  template <class Build>
  const T& get(const Graph& g, Build&& build) {
    const void* key = g.csr_indptr.defined() ? g.csr_indptr.data() : nullptr;
    const void* held = key_.defined() ? key_.data() : nullptr;
    if (!valid_ || key != held || g.num_nodes != n_ || g.num_edges != e_) {
      value_ = build(g);
      key_ = g.csr_indptr, n_ = g.num_nodes, e_ = g.num_edges, valid_ = true;
    }
    return value_;
  }

 private:
  T value_{};
  Tensor key_;
  int64_t n_ = -1, e_ = -1;
  bool valid_ = false;
};

}  // namespace gnn::nn
