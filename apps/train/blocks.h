// Building blocks the recipes share, on config-batched activations [N, C*D] (data.h).
#pragma once
#include "apps/train/recipe.h"
#include "nn/layers.h"

namespace gnn::train {

// [opcode embedding | node features]: [N, E + F], the same for every config.
ag::Var node_input(const nn::Embedding& opcode_embedding, const Batch& b);

// x [R, C*D] <-> [R*C, D]: one row per (row, config).
inline ag::Var per_config(const ag::Var& x, int64_t C) { return ag::reshape(x, x.size(0) * C, x.size(1) / C); }
inline ag::Var node_major(const ag::Var& x, int64_t C) { return ag::reshape(x, x.size(0) / C, x.size(1) * C); }

// The official tile SAGE layer on config-batched x [N, C*D]: y = Dense([(A + A^T) x ; x]) per config,
// then act and, if asked, row l2-normalisation. Returns [N, C*out].
class ConfigSage : public nn::Module {
 public:
  ConfigSage(int64_t in, int64_t out, Rng& rng, Act act, bool l2_normalize);
  ag::Var forward(const Batch& b, const ag::Var& x, int64_t C) const;
 private:
  nn::Linear lin_;
  Act act_;
  bool l2_;
};

// A residual GCN layer on [N, C*D]: x + act(D^-1/2 (A + A^T + I) D^-1/2 x W + b).
class ResGcnLayer : public nn::Module {
 public:
  ResGcnLayer(int64_t dim, Rng& rng, Act act);
  ag::Var forward(const Batch& b, const ag::Var& x, int64_t C) const;
  // The same layer on config-shared rows (nn/config_share.h): one plan step.
  nn::SharedRows forward(const Batch& b, const nn::SharePlan& plan, const nn::SharedRows& x) const;
  ag::Var bias;
 private:
  nn::Linear lin_;  // no bias: the bias is added after the aggregation
  Act act_;
};

// The graph of each (graph, config) row: i32 [G*C] = 0,..,0 (C times), 1, ...
Tensor config_graph(const Batch& b);
// Graph-level rows [G, D] repeated for each config: [G*C, D].
inline ag::Var repeat_configs(const Batch& b, const ag::Var& pooled) { return ag::gather_rows(pooled, config_graph(b)); }
// Tile config features moved onto every node of their graph: [N, C*B].
inline ag::Var tile_configs_on_nodes(const Batch& b) {
  return ag::gather_rows(ag::Var(b.config_feat.reshape({b.graphs, -1})), b.node_graph);
}

// Gradient only through the batch's segment nodes (layout segment training); identity otherwise.
inline ag::Var segment(const Batch& b, const ag::Var& x) { return b.keep_grad.defined() ? ag::keep_grad_rows(x, b.keep_grad) : x; }
inline nn::SharedRows segment(const Batch& b, const nn::SharePlan& plan, const nn::SharedRows& x) {
  return nn::keep_grad_rows(plan, x, b.keep_grad, b.keep_grad_host());
}

// Layout inputs as config-shared rows at level 0 of `plan`: every node's [opcode embedding | node
// features | 0] once, the configurable nodes' [... | config] per config.
nn::SharedRows layout_input_shared(const nn::Embedding& opcode_embedding, const Batch& b);

}  // namespace gnn::train
