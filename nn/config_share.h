// Config sharing: compute once what the C configs of a batch have in common (docs/design.md).
//
// A layout config sets the inputs of the configurable nodes only. After l aggregation steps over a
// graph A (A[v, u] != 0: v reads u), only the rows within l hops of a configurable node can differ
// between configs:
//   D_0 = the configurable nodes,   D_(l+1) = D_l  +  { v : A[v, u] != 0 for some u in D_l }
// Every other row of every layer is the same for all configs. A SharedRows at level l holds
//   shared [N, F]        each node's row computed once, as if it did not depend on the config; the rows
//                        of D_l are stale there and never read, so no gradient reaches them
//   dep    [|D_l|, C*F]  the rows of D_l per config, node-major (config c in columns c*F .. c*F+F-1),
//                        in plan order: D_0 in the order of the seeds, then each step's new rows
//                        ascending, so D_l is a prefix of D_(l+1)
// so a layer costs one config's work on the N shared rows plus C configs' work on the |D_l| rows,
// where the plain path does C configs' work on all N. Exact, not an approximation: a row outside
// D_(l+1) reads only rows outside D_l, whose values in `shared` are the true ones for every config.
//
//   dense / activation   f on shared and on dep's rows, per config             (map_rows)
//   aggregation          shared' = A shared;  dep' = A[D', D] dep + A[D', not D] shared, broadcast over
//                        the configs (aggregate; returns level l+1)
//   residual             x at level l seen at level l+1: dep gains the new rows, copied from shared
//                        for every config (advance)
//   pooling per graph    the dependent rows of each config plus the shared rows outside D, once; max as the
//                        larger of the two maxima (pool)
// The backward of each is the autograd of these ops: the gradient of a shared row is the sum over
// configs of what its broadcasts received.
#pragma once
#include <vector>

#include "autograd/ops.h"
#include "runtime/graph.h"

namespace gnn::nn {

class SharePlan {
 public:
  // a: the aggregation graph on the host (N nodes, every graph of the batch), a_weight f32 [E] its
  // per-CSR-position weights (undefined: 1); seeds: i32 [K] the configurable nodes (host); graph_ptr
  // i64 [G+1] the node rows of each graph (host); steps: the aggregation steps the plan covers.
  static SharePlan build(const Graph& a, const Tensor& a_weight, const Tensor& seeds, const Tensor& graph_ptr,
                         int64_t configs, int64_t steps);
  SharePlan to(Device device) const;  // the graphs and weights there, in one transfer

  struct Step {
    Tensor new_rows;  // i32 [n] on the host: the nodes that join D at this step, in their D order
    Graph from_dep;  // bipartite |D_l| -> |D_(l+1)|: the entries of A whose source is in D_l
    Tensor from_dep_w;  // f32, its weights
    Graph from_shared;  // bipartite N -> |D_(l+1)|: the entries whose source is not in D_l
    Tensor from_shared_w;
  };
  int64_t nodes() const { return nodes_; }
  int64_t configs() const { return configs_; }
  int64_t graphs() const { return graphs_; }
  int64_t steps() const { return int64_t(steps_.size()); }
  const Step& step(int64_t l) const { return steps_.at(size_t(l)); }
  int64_t dependent_rows(int64_t level) const { return dep_rows_.at(size_t(level)); }  // |D_level|
  const Tensor& dependent_ids(int64_t level) const { return dep_ids_.at(size_t(level)); }  // i32 [|D_level|], host
  double dependent_share(int64_t level) const {
    return double(dependent_rows(level)) / double(std::max<int64_t>(nodes_, 1));
  }

  // Readout at the last level: graph g's rows with weight 1 / n_g (mean) or 1 (sum, no weight).
  const Graph& pool_dep() const { return pool_dep_; }  // |D_L| -> G
  const Graph& pool_shared() const { return pool_shared_; }  // N -> G, the rows outside D_L only
  const Tensor& pool_dep_mean() const { return pool_dep_mean_; }
  const Tensor& pool_shared_mean() const { return pool_shared_mean_; }
  // Max readout: [G*C] rows from the [2*G*C] stacked maxima over D (per config) and over the shared rows.
  const Graph& pool_max() const { return pool_max_; }

 private:
  int64_t nodes_ = 0, configs_ = 0, graphs_ = 0;
  std::vector<Step> steps_;
  std::vector<int64_t> dep_rows_;
  std::vector<Tensor> dep_ids_;
  Graph pool_dep_, pool_shared_, pool_max_;
  Tensor pool_dep_mean_, pool_shared_mean_, pool_max_w_;
};

struct SharedRows {
  ag::Var shared;  // [N, F]
  ag::Var dep;  // [|D_level|, C*F]
  int64_t level = 0;  // the plan level the rows belong to
  int64_t configs = 1;
};

// [R, F] -> [R, C*F]: every row's F values once per config; the gradient sums over the configs.
ag::Var repeat_cols(const ag::Var& x, int64_t configs);

// f applied to every row: f([R, F]) -> [R, F'] row by row (a dense layer, an activation, a bias).
template <class F>
SharedRows map_rows(const SharedRows& x, F&& f) {
  const int64_t C = x.configs;
  const ag::Var d = f(ag::reshape(x.dep, x.dep.size(0) * C, x.dep.size(1) / C));
  return {f(x.shared), ag::reshape(d, d.size(0) / C, d.size(1) * C), x.level, C};
}
// f on the rows of x and y side by side, f([R, Fx], [R, Fy]) -> [R, F'] row by row (a dense layer over
// [x | y] that never builds the join); x and y of the same level.
template <class F>
SharedRows map_rows(const SharedRows& x, const SharedRows& y, F&& f) {
  GNN_CHECK(x.level == y.level && x.configs == y.configs, "config sharing: rows of levels ", x.level, " and ", y.level,
            " side by side");
  const int64_t C = x.configs, n = x.dep.size(0);
  const ag::Var d = f(ag::reshape(x.dep, n * C, x.dep.size(1) / C), ag::reshape(y.dep, n * C, y.dep.size(1) / C));
  return {f(x.shared, y.shared), ag::reshape(d, n, d.size(1) * C), x.level, C};
}

// One aggregation step y = A x (sum of w * x over each row's entries) of the plan's graph; `a` and
// `a_weight` are that graph on x's device (the plan holds its row blocks). Returns level + 1.
SharedRows aggregate(const SharePlan& plan, const Graph& a, const Tensor& a_weight, const SharedRows& x);
// x at the next level (for a residual connection): its dep rows extended by the step's new rows.
SharedRows advance(const SharePlan& plan, const SharedRows& x);
SharedRows add(const SharedRows& a, const SharedRows& b);  // the same level
// Gradient only through the rows where keep (u8 [N] on x's device, its host copy keep_host): segment
// training. Undefined keep: x itself.
SharedRows keep_grad_rows(const SharePlan& plan, const SharedRows& x, const Tensor& keep, const Tensor& keep_host);
// Per graph and config at the plan's last level: [G*C, F], graph-major (row g*C + c). op: kSum, kMean
// or kMax (the larger of each config's max over D and the max over the shared rows outside D, each an
// spmm max, so the gradient goes to the argmax row; on an exact tie the row chosen may differ from a
// plain pool's).
ag::Var pool(const SharePlan& plan, const SharedRows& x, Reduce op);
// The plain config-batched activation [N, C*F] of x (tests, and layers that need every row).
ag::Var expand(const SharePlan& plan, const SharedRows& x);

}  // namespace gnn::nn
