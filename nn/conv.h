// Graph layers. Each takes the Graph whose CSR rows are destination nodes and x [N, F] (the nodes of
// one graph or of a disjoint union), and returns [N, out]. One .cpp each.
#pragma once
#include <memory>

#include "nn/graph_util.h"
#include "nn/layers.h"

namespace gnn::nn {

// GraphSAGE: y = act([reduce_{j->i} x_j | x_i] W + b) (root_weight) or act(reduce(x) W + b), plus x
// (or a bias-free projection of x when the widths differ) with residual. Mean with a root weight
// runs the fused kernel (one pass, its own backward); other settings compose spmm, concat, matmul.
// weight [2F, out] stacks PyG's lin_l (rows 0..F-1, on the aggregate) over lin_r (rows F..2F-1).
struct SageOptions {
  Reduce aggr = Reduce::kMean;
  bool root_weight = true;
  bool residual = false;
  bool bias = true;
  Act act = Act::kNone;  // applied before the residual is added
  double slope = 0.01;
  bool fused = true;  // false: always the composed path (tests compare the two)
};
class SAGEConv : public Module {
 public:
  SAGEConv(int64_t in, int64_t out, Rng& rng, SageOptions opt = {});
  ag::Var forward(const Graph& g, const ag::Var& x) const;
  ag::Var weight, bias, res_weight;

 private:
  int64_t in_, out_;
  SageOptions opt_;
};

// GCN (Kipf & Welling): y = D^-1/2 (A + I) D^-1/2 x W + b, self-loops added and weights computed once
// per graph. The product with W comes first, so the aggregation runs on the narrower side.
class GCNConv : public Module {
 public:
  GCNConv(int64_t in, int64_t out, Rng& rng, bool bias = true, bool add_self_loops = true);
  ag::Var forward(const Graph& g, const ag::Var& x) const;
  ag::Var weight, bias;

 private:
  struct Prepared {
    Graph graph;
    Tensor norm;
  };
  bool self_loops_;
  mutable GraphCache<Prepared> cache_;
};

// GIN (Xu et al.): y = MLP((1 + eps) x + sum_{j->i} x_j), eps learnable when train_eps.
class GINConv : public Module {
 public:
  GINConv(const std::vector<int64_t>& mlp_dims, Rng& rng, bool train_eps = true, double eps = 0);
  ag::Var forward(const Graph& g, const ag::Var& x);
  ag::Var eps;  // one element

 private:
  MLP mlp_;
};

// GAT (Velickovic et al.), multi-head:
//   x' = x W [N, H*O];  s_p = leaky_relu(<a_src_h, x'_u> + <a_dst_h, x'_v> (+ <a_edge_h, e_p W_e>))
//   alpha = softmax of s over each node's in-edges (dropout on alpha in training)
//   y_v = concat_h or mean_h of sum_p alpha_p,h x'_u,h;  + b
// Self-loops as PyG (existing ones dropped, one per node added; their edge features are the mean of
// the node's incoming edge features).
struct GatOptions {
  int64_t heads = 1;
  bool concat = true;
  double negative_slope = 0.2;
  double dropout = 0;  // on the attention coefficients
  // On the transformed features xW before they are aggregated (the scores still see all of xW), as the
  // GAT authors' released code does besides input dropout; PyG's GATConv has no such dropout.
  double value_dropout = 0;
  bool add_self_loops = true;
  int64_t edge_dim = 0;  // > 0: edge features [E, edge_dim] in input edge order
  bool bias = true;
};
class GATConv : public Module {
 public:
  GATConv(int64_t in, int64_t out, Rng& rng, GatOptions opt = {});
  ag::Var forward(const Graph& g, const ag::Var& x, const Tensor& edge_attr = Tensor());
  ag::Var weight, att_src, att_dst, att_edge, edge_weight, bias;

 private:
  int64_t out_;
  GatOptions opt_;
  struct Prepared {
    LoopedGraph looped;  // the graph on the input graph's device
    Graph host_looped;  // the same on the host (the edge-feature path reads it there)
    Tensor csr_src, csr_dst;  // i32 [E']: the endpoints of each CSR position (the edge-feature path)
  };
  Rng rng_;
  GraphCache<Prepared> cache_;
};

// Multi-head self-attention among the nodes of each graph (graph_ptr i64 [G+1]): y = O(attn(Q x, K x, V x)).
// Full softmax attention, or linear attention (elu + 1 features) for graphs too large for n^2.
class SelfAttention : public Module {
 public:
  SelfAttention(int64_t dim, int64_t heads, Rng& rng, bool linear = false);
  ag::Var forward(const ag::Var& x, const Tensor& graph_ptr) const;

 private:
  int64_t heads_;
  bool linear_;
  Linear q_, k_, v_, o_;
};

// Graph-level readout: the listed poolings of each graph's node rows (graph_ptr i64 [G+1]),
// concatenated: {sum, max} on [N, F] gives [G, 2F]. No parameters.
class Readout : public Module {
 public:
  explicit Readout(std::vector<Reduce> ops) : ops_(std::move(ops)) {
    GNN_CHECK(!ops_.empty(), "Readout: no pooling given");
  }
  ag::Var forward(const ag::Var& x, const Tensor& graph_ptr) const {
    std::vector<ag::Var> parts;
    for (Reduce op : ops_) parts.push_back(ag::pool(x, graph_ptr, op));
    return parts.size() == 1 ? parts[0] : ag::concat_cols(parts);
  }

 private:
  std::vector<Reduce> ops_;
};

}  // namespace gnn::nn
