// A directed graph in both compressed forms, built from an edge list by counting sort in O(N + E).
//   CSR (by destination): row v lists the edges j -> v; forward aggregation gathers along it.
//   CSC (by source):      row u lists the edges u -> k; the backward of that gather walks it, so
//                         gradients are sums over sorted segments, never atomics.
// Within a CSR row edges keep their input order; CSC rows list their edges in CSR order, so both
// forms, and everything computed from them, are deterministic for a given edge list.
//   csr_indptr [N+1], csr_indices [E] (source of each entry), csr_eid [E] (input edge id)
//   csc_indptr [N+1], csc_indices [E] (destination), csc_to_csr [E] (CSR position of each entry:
//   how per-edge values such as weights or attention are read in the backward pass)
// Indices are int32 (N, E < 2^31); empty graphs, isolated nodes, self-loops and duplicates are fine.
#pragma once
#include "runtime/tensor.h"

namespace gnn {

// How the two columns of an [E, 2] edge_index are ordered. TpuGraphs rows are [u, v] with u
// consuming v's output, so messages flow v -> u: that is kDstSrc.
enum class EdgeColumns { kSrcDst, kDstSrc };

struct Graph {
  int64_t num_nodes = 0;  // destination nodes (CSR rows, rows of an aggregation's output)
  int64_t num_edges = 0;
  int64_t num_src = -1;  // a bipartite graph's source nodes (rows of x); -1: the same nodes, num_nodes
  int64_t num_sources() const { return num_src < 0 ? num_nodes : num_src; }
  Tensor csr_indptr, csr_indices, csr_eid;
  Tensor csc_indptr, csc_indices, csc_to_csr;

  // src, dst: E node ids each, checked to lie in [0, num_nodes); `what` names the edge list in errors.
  static Graph from_edges(const int64_t* src, const int64_t* dst, int64_t num_edges, int64_t num_nodes,
                          const std::string& what = "edge list");
  // A bipartite graph from num_sources source nodes to num_nodes destinations: spmm reads x [num_sources,
  // F] and writes [num_nodes, F] (config sharing's row blocks, pooling as an aggregation). Only spmm
  // takes one; the other graph ops want one node set.
  static Graph from_bipartite_edges(const int64_t* src, const int64_t* dst, int64_t num_edges, int64_t num_sources,
                                    int64_t num_nodes, const std::string& what = "edge list");
  // edge_index: [E, 2], i32 or i64, on the host.
  static Graph from_edge_index(const Tensor& edge_index, int64_t num_nodes, EdgeColumns columns,
                               const std::string& what = "edge_index");

  Device device() const { return csr_indptr.device(); }
  Graph to(Device device) const;  // the six arrays in one transfer (Tensor::to_packed)
  std::vector<Tensor*> arrays() {
    return {&csr_indptr, &csr_indices, &csr_eid, &csc_indptr, &csc_indices, &csc_to_csr};
  }
  Graph on(Device device) const { return this->device() == device ? *this : to(device); }  // no copy when there
  // Host-only conveniences (tests, preprocessing).
  int64_t in_degree(int64_t v) const;
  int64_t out_degree(int64_t u) const;
};

}  // namespace gnn
