// Building blocks the recipes share, on config-batched activations [N, C*D] (data.h).
#pragma once
#include <type_traits>

#include "apps/train/recipe.h"
#include "apps/train/segment_pass.h"
#include "nn/layers.h"

namespace gnn::train {

// Each node's own output layout, node_feat[134:140] (minor-to-major dimension order, 0-padded in the
// files), as categories of one embedding with the layout config values: 0 where the dimension is past
// the node's rank (the -1 of a config; rank = the nonzero output dims in node_feat[21:27]), v + 1 for a
// dimension index v in 0..5, 0 too for a value that is not one. i32 [N, 6] from raw node_feat [N, 140].
constexpr int64_t kNodeLayoutDims = 6;
Tensor layout_dim_categories(const Tensor& node_feat);
// The same as a recipe-only input (GraphFeature, per node, on the host): layout-tgraph and layout-sage-5th
// read it as b.feature(kNodeLayout).
extern const GraphFeature kNodeLayout;

// [opcode embedding | node features]: [N, E + F], the same for every config.
// With `norm`, the node features go through it first (node_norm).
ag::Var node_input(const nn::Embedding& opcode_embedding, const Batch& b, const nn::Standardize* norm = nullptr);
// --node-transform / --config-transform trainable: the 6th place's in-forward standardisation of the
// node (tile config) features, a mean and a std per column trained with the model (nn::Standardize),
// started from the training statistics in `d`; null under any other transform (the features then arrive
// transformed). A recipe that offers it registers it as "node_norm" ("config_norm") and adds "trainable"
// to the flag's choices (offer_trainable).
std::unique_ptr<nn::Standardize> node_norm(const ModelDims& d);
std::unique_ptr<nn::Standardize> config_norm(const ModelDims& d);
void offer_trainable(std::vector<HParamSpec>& specs, const std::string& flag);  // node- or config-transform

// x [R, C*D] <-> [R*C, D]: one row per (row, config).
inline ag::Var per_config(const ag::Var& x, int64_t C) { return ag::reshape(x, x.size(0) * C, x.size(1) / C); }
inline ag::Var node_major(const ag::Var& x, int64_t C) { return ag::reshape(x, x.size(0) / C, x.size(1) * C); }

// Gradient only through the batch's segment nodes (layout segment training); identity otherwise.
inline ag::Var segment(const Batch& b, const ag::Var& x) {
  return b.keep_grad.defined() ? ag::keep_grad_rows(x, b.keep_grad) : x;
}
inline nn::SharedRows segment(const Batch& b, const nn::SharePlan& plan, const nn::SharedRows& x) {
  return nn::keep_grad_rows(plan, x, b.keep_grad, b.keep_grad_host());
}

// The plain path's first layer of a layout model: [node rows | config] for every (node, config) through
// a row-wise f (a dense layer), node-major [N, C*D]. (The config-shared path's is
// nn::map_rows(layout_input_shared(node_rows, b), f).)
template <class F>
ag::Var layout_input(const ag::Var& node_rows, const Batch& b, F&& f) {
  const int64_t C = b.configs;
  return node_major(f(per_config(ag::join_configs(node_rows, ag::Var(b.node_config), C), C)), C);
}

// Layout inputs as config-shared rows at level 0 of `plan`: every node's [opcode embedding | node
// features | 0] once, the configurable nodes' [... | config] per config.
nn::SharedRows layout_input_shared(const nn::Embedding& opcode_embedding, const Batch& b);
// The same from any node rows [N, A]: [node rows | 0] once, [node rows | config] per config.
nn::SharedRows layout_input_shared(const ag::Var& node_rows, const Batch& b);
// The configurable nodes' rows of config-shared x, [K, C*F] in config_nodes order: a plan's D starts
// with them, so they are x.dep's first K rows at every level.
ag::Var configurable_rows(const Batch& b, const nn::SharedRows& x);

// ---- one model, two paths ------------------------------------------------------------------------
// A layout model is written once, as a template over a path: PlainPath runs it on config-batched rows
// [N, C*D], SharedPath on config-shared rows (nn/config_share.h: each row no config reaches computed
// once). The two are the same function (check_config_sharing in the tests holds them to it); a model
// picks the shared one when --share is on and the batch has configurable nodes. With a SegmentPass
// (segment_pass.h), cut and the sums are the pass's.
//   template <class Path> ag::Var run(const Path& p) {
//     auto x = p.cut(p.input(node_input(emb_, p.b), prenet));
//     for (const auto& l : layers_) x = p.cut(p.layer(*l, x));
//     return head_.forward(p.pool(x, Reduce::kMean));
//   }
struct PlainPath {
  using Rows = ag::Var;
  const Batch& b;
  SegmentPass* seg = nullptr;
  int64_t C = 0;  // the configs a row holds; 0: the batch's (a tile model's late join runs with 1)
  int64_t configs() const { return C ? C : b.configs; }
  // [node rows | config] for every (node, config) through a row-wise f (layout_input).
  template <class F>
  Rows input(const ag::Var& node_rows, F&& f) const {
    GNN_CHECK(configs() == b.configs, "PlainPath::input: the layout input holds the batch's ", b.configs,
              " configs, not ", configs());
    return layout_input(node_rows, b, f);
  }
  template <class F>
  Rows map(const Rows& x, F&& f) const {  // f on each (row, config)'s [D] row
    return node_major(f(per_config(x, configs())), configs());
  }
  template <class F>
  Rows map(const Rows& x, const Rows& y, F&& f) const {  // f on each (row, config)'s rows of x and y
    return node_major(f(per_config(x, configs()), per_config(y, configs())), configs());
  }
  template <class F>
  Rows each(const Rows& x, F&& f) const {  // f elementwise
    return f(x);
  }
  template <class Layer>
  Rows layer(const Layer& l, const Rows& x) const {
    return l.forward(*this, x);
  }
  // One aggregation over g's in-edges, C*D values per neighbour in one gather: the sum of w * x (w per
  // CSR position, undefined: 1), or with mean_w (1 / the row's degree per CSR position) the mean.
  Rows aggregate(const Graph& g, const Tensor& w, const Rows& x) const {
    return ag::spmm(g, x, Reduce::kSum, w.defined() ? ag::Var(w) : ag::Var());
  }
  Rows aggregate_mean(const Graph& g, const Tensor& mean_w, const Rows& x) const {
    (void)mean_w;  // the mean reduction divides by the degree itself
    return ag::spmm(g, x, Reduce::kMean);
  }
  Rows advance(const Rows& x) const { return x; }  // x beside an aggregation's result (a root term)
  Rows residual(const Rows& y, const Rows& x) const { return ag::add(y, x); }  // y + x
  Rows cut(const Rows& x) const { return seg ? seg->cut(x) : segment(b, x); }
  ag::Var pool(const Rows& x, Reduce op) const { return per_config(ag::pool(x, b.graph_ptr, op), configs()); }
  ag::Var sum(const Rows& x) const { return seg ? seg->sum(b, x) : pool(x, Reduce::kSum); }  // [G*C, D]
  ag::Var configurable(const Rows& x) const { return ag::gather_rows(x, b.config_nodes); }  // [K, C*D]
  ag::Var configurable_sum(const Rows& x) const {  // [G*C, D] over each graph's configurable nodes
    return seg ? seg->configurable_sum(b, x)
               : per_config(ag::pool(configurable(x), b.config_ptr, Reduce::kSum), configs());
  }
};

struct SharedPath {
  using Rows = nn::SharedRows;
  const Batch& b;
  const nn::SharePlan& plan;
  SegmentPass* seg = nullptr;
  int64_t configs() const { return b.configs; }
  template <class F>
  Rows input(const ag::Var& node_rows, F&& f) const {
    return nn::map_rows(layout_input_shared(node_rows, b), f);
  }
  template <class F>
  Rows map(const Rows& x, F&& f) const {
    return nn::map_rows(x, f);
  }
  template <class F>
  Rows map(const Rows& x, const Rows& y, F&& f) const {
    return nn::map_rows(x, y, f);
  }
  template <class F>
  Rows each(const Rows& x, F&& f) const {
    return nn::map_rows(x, f);
  }
  template <class Layer>
  Rows layer(const Layer& l, const Rows& x) const {
    return l.forward(*this, x);
  }
  // One step of the plan (whose graph g is, on x's device); returns the next level. The mean is the
  // sum weighted by mean_w.
  Rows aggregate(const Graph& g, const Tensor& w, const Rows& x) const { return nn::aggregate(plan, g, w, x); }
  Rows aggregate_mean(const Graph& g, const Tensor& mean_w, const Rows& x) const {
    return nn::aggregate(plan, g, mean_w, x);
  }
  Rows advance(const Rows& x) const { return nn::advance(plan, x); }  // x at the next level
  Rows residual(const Rows& y, const Rows& x) const { return nn::add(y, advance(x)); }
  Rows cut(const Rows& x) const { return seg ? seg->cut(plan, x) : segment(b, plan, x); }
  ag::Var pool(const Rows& x, Reduce op) const { return nn::pool(plan, x, op); }
  ag::Var sum(const Rows& x) const { return seg ? seg->sum(b, plan, x) : pool(x, Reduce::kSum); }
  ag::Var configurable(const Rows& x) const { return configurable_rows(b, x); }
  ag::Var configurable_sum(const Rows& x) const {
    return seg ? seg->configurable_sum(b, x)
               : per_config(ag::pool(configurable(x), b.config_ptr, Reduce::kSum), b.configs);
  }
};

// ---- layers on either path -----------------------------------------------------------------------
// Each is one template forward(path, x): on a PlainPath x is config-batched [N, C*D]; on a SharedPath
// it is config-shared rows, and a layer with an aggregation is one step of the path's plan (whose graph
// must be the layer's: graph_plan for ConfigSage, share_plan for ResGcnLayer, consumers_plan for
// ConsumerSage), returning the next level.

// The official tile SAGE layer on config-batched x [N, C*D]: y = Dense([(A + A^T) x ; x]) per config,
// then act and, if asked, row l2-normalisation. Returns [N, C*out].
class ConfigSage : public nn::Module {
 public:
  ConfigSage(int64_t in, int64_t out, Rng& rng, Act act, bool l2_normalize);
  template <class Path>
  typename Path::Rows forward(const Path& p, const typename Path::Rows& x) const {
    // Sum over both edge directions; then one GEMM over the (row, config)s, [agg | x] never built. (The
    // aggregation is recorded before the root's advance, in statements of their own.)
    const auto agg = p.aggregate(p.b.graph, Tensor(), x);
    const auto root = p.advance(x);
    return p.map(agg, root, [&](const ag::Var& a, const ag::Var& r) {
      const ag::Var y = lin_.forward_cat(a, r, act_);
      return l2_ ? ag::l2_normalize(y) : y;
    });
  }

 private:
  nn::Linear lin_;
  Act act_;
  bool l2_;
};

// A residual GCN layer on [N, C*D]: x + act(D^-1/2 (A + A^T + I) D^-1/2 x W + b); without the x +
// when residual is false (the seed papers' vanilla GNN).
class ResGcnLayer : public nn::Module {
 public:
  ResGcnLayer(int64_t dim, Rng& rng, Act act, bool residual = true);
  template <class Path>
  typename Path::Rows forward(const Path& p, const typename Path::Rows& x) const {
    // x W first (one GEMM over the (row, config)s), then the normalised aggregation, then bias and act.
    const Batch::Gcn& gcn = p.b.gcn();
    const auto xw = p.map(x, [&](const ag::Var& v) { return lin_.forward(v); });
    const auto y =
        p.map(p.aggregate(gcn.graph, gcn.weight, xw), [&](const ag::Var& v) { return ag::bias_act(v, bias, act_); });
    return residual_ ? p.residual(y, x) : y;
  }
  ag::Var bias;

 private:
  nn::Linear lin_;  // no bias: the bias is added after the aggregation
  Act act_;
  bool residual_;
};

// ---- the 6th place's layers (recipes/layout_sage_6th.cpp, recipes/layout_gin_6th.cpp) ---------------
// Its norm is torch's InstanceNorm1d without affine parameters, on [configs, nodes, D] over the nodes,
// and on the pooled [configs, D] over the configs of the slate.
// x [N, C*D] normalised over the nodes of each graph, per config and channel.
inline ag::Var node_norm(const Batch& b, const ag::Var& x) {
  return ag::instance_norm(x, ag::Var(), ag::Var(), b.graph_ptr);
}
// act(node_norm(x + residual)) in one op each way (the 6th place's layer end, GELU(norm(f(x) + x))).
inline ag::Var node_norm_act(const Batch& b, const ag::Var& x, const ag::Var& residual, Act act) {
  return ag::instance_norm(x, ag::Var(), ag::Var(), b.graph_ptr, 1e-5, residual, act);
}

// act(norm(x W (+ b))) on config-batched rows x [R, C*in] -> [R, C*out], the norm over each group of
// rows of `ptr` per config and channel: the node rows of each graph (graph_ptr, C configs), or the
// pooled rows [G*C, in] of each graph's configs (group_ptr, C = 1).
class LinearNormAct : public nn::Module {
 public:
  LinearNormAct(int64_t in, int64_t out, Rng& rng, Act act, bool bias = false);
  ag::Var forward(const ag::Var& x, int64_t C, const Tensor& ptr) const;
  // The same on join_configs(node, config, C), the join never built (nn::Linear::forward_joined); with
  // `dropout` (ConfigDropout::fused) the dropout after the activation in the norm's own passes, the bits
  // of ConfigDropout::forward after it.
  ag::Var forward_joined(const ag::Var& node, const ag::Var& config, int64_t C, const Tensor& ptr,
                         ag::FusedDropout dropout = {}) const;

 private:
  ag::Var norm_act(const ag::Var& y, const Tensor& ptr, ag::FusedDropout dropout = {}, int64_t C = 1) const;
  nn::Linear lin_;
  Act act_;
};

// The 6th place's late part on pooled rows [G*C, in]: Linear(D) -> norm -> GELU -> Linear(D/2) -> norm
// -> GELU -> Linear(1), the norms over the configs of each graph (group_ptr). Returns [G*C, 1].
class SlateHead : public nn::Module {
 public:
  SlateHead(int64_t dim, Rng& rng) : SlateHead(dim, dim, rng) {}
  SlateHead(int64_t in, int64_t dim, Rng& rng);
  ag::Var forward(const Batch& b, const ag::Var& pooled) const;

 private:
  LinearNormAct a_, b_;
  nn::Linear out_;
};

// GAT (Velickovic et al.) on config-batched rows [N, C*in], each node attending over the nodes that
// consume it and itself (Batch::consumers_looped), H heads of width D concatenated, per config:
//   z = x W [N, C*H*D];  s_p = leaky_relu(<a_src_h, z_u> + <a_dst_h, z_v>, 0.2) per config and head
//   y_v = sum_p softmax_p(s) z_u + b   (the softmax over v's in-edges)
// The C configs' H heads are C*H heads of the graph ops (gat_scores, segment_softmax, spmm), so one
// gather serves every config. Returns [N, C*H*D].
class ConsumerGat : public nn::Module {
 public:
  ConsumerGat(int64_t in, int64_t heads, int64_t dim, Rng& rng);
  ag::Var forward(const Batch& b, const ag::Var& x, int64_t C) const;

 private:
  ag::Var weight_, att_src_, att_dst_, bias_;  // [in, H*D], [H, D], [H, D], [H*D]
};

// PyG's SAGEConv (mean) on [N, C*D], each node aggregating the nodes that consume it (Batch::consumers):
// mean_{u consumes v} x_u W_l + b + x_v W_r, W_l over W_r in one [2D, out] weight. Returns [N, C*out].
// On the plain path a layer that narrows (out < in) takes its product first, [x W_agg | x W_root] per (node,
// config), and then the mean of the first halves plus the second (ag::sage_combine): the same function,
// reassociated, so it rounds otherwise; the product reads x alone (K = in, not 2 in) and the gather moves
// out values a neighbour, not in. `product_first` false keeps the aggregate-first order (PyG's).
class ConsumerSage : public nn::Module {
 public:
  ConsumerSage(int64_t in, int64_t out, Rng& rng, bool product_first = true);
  // act(node_norm(SAGE(x) + x)) on the plain path (the 6th place's layer end), the same bits either way: where
  // the product takes an addend in its store (gemm_adds_in_store: bf16 products on the host) the residual
  // is added there and its gradient comes out of the product's, so the norm reads one input, not two;
  // elsewhere the norm adds it (node_norm_act).
  ag::Var forward_residual_norm(const PlainPath& p, const ag::Var& x, Act act) const;
  template <class Path>
  typename Path::Rows forward(const Path& p, const typename Path::Rows& x) const {
    if constexpr (std::is_same_v<Path, PlainPath>)
      if (takes_product_first()) return forward_product_first(p, x);
    const auto agg = p.aggregate_mean(p.b.consumers(), p.b.consumers_mean(), x);
    const auto root = p.advance(x);
    return p.map(agg, root, [&](const ag::Var& a, const ag::Var& r) { return lin_.forward_cat(a, r); });
  }

 private:
  // whether the plain path takes the product first: asked for, and the layer narrows past half
  bool takes_product_first() const { return product_first_ && lin_.out_features() < lin_.in_features() / 2; }
  ag::Var forward_product_first(const PlainPath& p, const ag::Var& x) const;
  nn::Linear lin_;
  bool product_first_;
};

// ---- the 1st place's layers (recipes/layout_tgraph.cpp) ------------------------------------------------
class CrossConfigAttention;
// Squeeze-and-excitation over the channels of each (row, config): x * sigmoid(W2 relu(W1 x + b1) + b2),
// W1 [D, D/reduction]. x [R, C*D] -> [R, C*D].
class ChannelAttention : public nn::Module {
 public:
  ChannelAttention(int64_t dim, int64_t reduction, Rng& rng);
  ag::Var forward(const ag::Var& x, int64_t C) const;
  // cross.forward(forward(x, C), C, residual, act, dropout) as one op (ag::squeeze_excite_attention)
  ag::Var forward_cross(const ag::Var& x, int64_t C, const CrossConfigAttention& cross,
                        const ag::Var& residual = ag::Var(), Act act = Act::kNone, ag::FusedDropout dropout = {}) const;

 private:
  nn::Linear squeeze_, excite_;
};

// Cross-config attention on x [R, C*D]: [x | x * softmax_c(beta x)] per config, the softmax over the
// configs of each (row, channel); beta a learned inverse temperature. Returns act(that + residual)
// [R, C*2D] (residual optional), one fused op (ag::config_attention): a config's rows now depend on
// every config beside it in the batch. `dropout`: dropout on the result, in the same pass.
class CrossConfigAttention : public nn::Module {
 public:
  explicit CrossConfigAttention(double beta);
  ag::Var forward(const ag::Var& x, int64_t C, const ag::Var& residual = ag::Var(), Act act = Act::kNone,
                  ag::FusedDropout dropout = {}) const;
  ag::Var beta;
};

// The 6th place's model hyper-parameters, the same for its SAGE and GIN (recipes/layout_sage_6th.cpp), and
// its data and training settings with them.
struct Params6th {
  int64_t op_embed = 0, hidden = 0, layers = 0;
  double dropout = 0;
  bool dropout_shared = false;  // --dropout-mask shared
  double op_max_norm = 0;  // --op-max-norm: the original's opcode embedding max_norm (1); 0 off
};
const HParamTable<Params6th>& params_6th();
std::vector<HParamSpec> hparams_6th();

// Dropout in training with masks drawn from the batch's noise_seed (and `salt`, one per site), so a
// resumed run draws what the unbroken one drew.
inline Rng batch_rng(const Batch& b, uint64_t salt) { return Rng(b.noise_seed ^ (salt * 0x9E3779B97F4A7C15ull)); }
inline ag::Var batch_dropout(const Batch& b, const ag::Var& x, double p, bool training, uint64_t salt) {
  Rng rng = batch_rng(b, salt);
  return ag::dropout(x, p, rng, training);
}

// Dropout on config-batched rows x [N, C*F] with one mask per (node, channel), the same for the C
// configs. The ranking losses compare the configs of a graph; a mask drawn per config (plain dropout on
// x) makes them differ by its noise on every node, while the config itself changes a few percent of the
// nodes, so the pairwise differences the loss sees are mostly the masks' (recipes/layout_sage_6th.cpp).
ag::Var config_shared_dropout(const Batch& b, const ag::Var& x, int64_t C, double p, bool training, uint64_t salt);
// A layout recipe's dropout on config-batched rows with probability p, as its --dropout-mask says
// (dropout_mask_hp): one mask for all the configs of a graph (shared), or one per config.
struct ConfigDropout {
  ConfigDropout(double p, bool shared) : p(p), shared(shared) {}
  ag::Var forward(const Batch& b, const ag::Var& x, int64_t C, bool training, uint64_t salt) const {
    return shared ? config_shared_dropout(b, x, C, p, training, salt) : batch_dropout(b, x, p, training, salt);
  }
  // The same dropout for an op that applies it in its own last pass (ag::FusedDropout): the same draw.
  ag::FusedDropout fused(const Batch& b, bool training, uint64_t salt) const {
    if (!training || p == 0) return {};
    Rng rng = batch_rng(b, salt);
    return {p, rng.next(), shared};
  }
  double p;
  bool shared;
};

// The graph of each (graph, config) row: i32 [G*C] = 0,..,0 (C times), 1, ...
Tensor config_graph(const Batch& b);
// Graph-level rows [G, D] repeated for each config: [G*C, D].
inline ag::Var repeat_configs(const Batch& b, const ag::Var& pooled) {
  return ag::gather_rows(pooled, config_graph(b));
}
// Tile config features moved onto every node of their graph: [N, C*B].
inline ag::Var tile_configs_on_nodes(const Batch& b) {
  return ag::gather_rows(ag::Var(b.config_feat.reshape({b.graphs, -1})), b.node_graph);
}
// The same for config features the model computed from b.config_feat ([G*C, B], as it).
inline ag::Var tile_configs_on_nodes(const Batch& b, const ag::Var& config) {
  return ag::gather_rows(ag::reshape(config, b.graphs, config.size(0) / b.graphs * config.size(1)), b.node_graph);
}

}  // namespace gnn::train
