// tile-gat-6th: the 6th place tile model of the Kaggle "Fast or Slow" competition (hengck23; TPUGRAPHS.md
// sections 5-6: valid 1 - slowdown@5 = 0.975; read from its public code,
// src/res-gatconv4-listmle-hop5-tile/model.py and src/res_gatconv4_tile_configuration.py).
//
//   input          [opcode embedding (128) | standardised node features] per node
//   early          Linear(256, no bias) -> norm -> GELU -> Linear(256, no bias) -> norm -> GELU
//   join (early)   [x | standardised config features] per node and config -> Linear(256) -> GELU
//   layers (4)     x = GELU(norm(GAT(x) + x)), 4 heads of 64 concatenated, each node attending over the
//                  nodes that consume it and itself (PyG's default flow on the files' edge_index)
//   readout        mean pool + max pool over the kernel's nodes
//   late           [standardised config features | pooled] -> Linear(256) -> norm -> GELU -> Linear(128)
//                  -> norm -> GELU -> Linear(1)
// "norm" is an instance norm without affine parameters: over the kernel's nodes per channel (and per
// config once they have joined), over the configs of the slate per channel in the late part. ListMLE
// over the configs of each kernel (temperature 1, no MSE term); 32 kernels x 64 configs per step; AdamW
// lr 5e-4 with torch's default weight decay 0.01, constant.
//
// Where this departs from the original, and why:
// - The published code joins the configs late (--join late here): the pooled graph embedding and the
//   config features meet in the first late Linear, and the norm over the slate's configs that follows
//   subtracts the part that is the same for every config, the graph's. So its score is a function of
//   the config features alone and the graph layers get no gradient (checked here: zero up to rounding).
//   The issue that asked for this recipe describes the model as early-joined, and a tile model that
//   ignores its kernel is not what a user of a GNN engine wants, so --join early is the default. The
//   configs cannot join at the input as in the official EarlyJoinSAGE: a config's features are the
//   same on every node, and the first norm over the nodes would subtract them again. They join after
//   the early part through a Linear and a GELU with no norm, whose nonlinearity keeps them.
// - The code has the residual commented out and single-head GATv2 layers; we keep the residual and use
//   4 heads of 64 (--heads), as the issue describes. --heads 1 is the code's single head.
// - GATv2 scores a pair as a^T leaky_relu(W [x_u | x_v]); ours is GAT's leaky_relu(a_src^T W x_u +
//   a_dst^T W x_v), the attention the engine's kernels compute (segment softmax, weighted SpMM).
// - Its opcode embedding renormalises looked-up rows to l2 norm 1 (max_norm=1); ours is plain by default,
//   --op-max-norm 1 is the original's. Its standardisation statistics come from the train split, as ours.
// - Its listMLE (allRank's) maximises the likelihood of the order slowest first, scores as utilities;
//   ours that of fastest first, minus scores as utilities. The two are different losses once a slate has
//   three configs. --listmle-order slowest is theirs; on generated tile kernels the two train alike
//   (docs/benchmarks.md, "The tile GAT against its original"). Its ties are broken by a random shuffle,
//   ours by config index; its log(cumsum + 1e-10) is ours without the 1e-10.
// - Its standardisation statistics are nn.Parameters, so AdamW trains (and decays) them; ours are fixed
//   by default, and --node-transform trainable --config-transform trainable are its (nn::Standardize).
//   Under --join late the slate norm follows the config features, so the config mean's gradient is
//   zero in exact arithmetic, as is the node statistics' whole gradient; under --join early (the
//   default) the configs pass a GELU first, and both carry a gradient.
// - It trains 2.5 epochs over all tile kernels in mixed precision; we train in f32, epochs as asked.
// - Its epoch is every slate of 64 configs of every kernel (a kernel of n >= 128 configs gives n // 64
//   of them, a smaller one one slate of all n); ours draws one slate of min(--configs, n) configs per
//   kernel and epoch, so a kernel of many configs is seen once an epoch, not n // 64 times.
// - The late norm makes a config's score depend on the configs scored beside it, as in the original;
//   eval and predict score a kernel's configs in near-equal chunks of at most --eval-chunk (100, its
//   validation slate).
//
// Checked against the original (scripts/check_vs_original.py --model tilegat6): with --join late --heads 1
// --listmle-order slowest, given the same weights and batch, the scores, the loss and every late
// gradient agree within 1e-4 relative, and both sides' graph gradients are rounding noise: the
// published function does not depend on the GAT layers, so GAT against GATv2 does not enter it.
#include <vector>

#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  int64_t op_embed = 0, hidden = 0, layers = 0, heads = 0;
  bool join_early = false;
  double op_max_norm = 0;  // --op-max-norm: the original's opcode embedding max_norm (1); 0 off
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::op_embed, integer_hp("op-embed", "128", 1, 4096, "opcode embedding width"))
          .add(&P::hidden, integer_hp("hidden", "256", 2, 65536, "width of every layer (the last head layer has half)"))
          .add(&P::layers, integer_hp("layers", "4", 1, 64, "GAT layers"))
          .add(&P::heads,
               integer_hp("heads", "4", 1, 256, "attention heads per GAT layer (concatenated; divides --hidden)"))
          .add(&P::join_early,
               choice_hp("join", "early", "early|late",
                         "where the config features join: on every node before the GAT layers, or after the pool "
                         "(the published code, whose slate norm then cancels the graph)"),
               "early")
          .add(&P::op_max_norm, op_max_norm_hp());
  return t;
}

class TileGat6th : public RankModel {
 public:
  TileGat6th(const Params& h, const ModelDims& d, Rng& rng)
      : early_join_(h.join_early),
        emb_(kOpcodes, h.op_embed, rng),
        early1_(h.op_embed + d.node_features, h.hidden, rng, Act::kGelu),
        early2_(h.hidden, h.hidden, rng, Act::kGelu),
        join_(h.hidden + d.config_features, h.hidden, rng),
        head_(h.hidden + d.config_features, h.hidden, rng),
        node_norm_(node_norm(d)),
        config_norm_(config_norm(d)) {
    const int64_t H = h.hidden, heads = h.heads;
    GNN_CHECK(H % heads == 0, "--hidden ", H, " must be a multiple of --heads ", heads,
              " (the heads are concatenated)");
    emb_.max_norm = h.op_max_norm;
    add_child("op_embedding", &emb_);
    add_child("early.0", &early1_);
    add_child("early.1", &early2_);
    if (early_join_) add_child("join", &join_);
    for (int64_t l = 0; l < h.layers; ++l) {
      layers_.push_back(std::make_unique<ConsumerGat>(H, heads, H / heads, rng));
      add_child("layers." + std::to_string(l), layers_.back().get());
    }
    add_child("head", &head_);
    if (node_norm_) add_child("node_norm", node_norm_.get());
    if (config_norm_) add_child("config_norm", config_norm_.get());
  }

  bool replayable() const override { return true; }

  BatchNeeds needs() const override { return {.consumers_looped = true}; }

  ag::Var forward(const Batch& b) override {
    const int64_t C = early_join_ ? b.configs : 1;  // late join: the graph part runs once for every config
    ag::Var x = early1_.forward(node_input(emb_, b, node_norm_.get()), 1, b.graph_ptr);
    x = early2_.forward(x, 1, b.graph_ptr);
    const ag::Var config = config_norm_ ? config_norm_->forward(ag::Var(b.config_feat)) : ag::Var(b.config_feat);
    if (early_join_) {  // [N, C*(hidden + B)] -> GELU(Linear) per node and config, no norm
      x = ag::join_configs(x, tile_configs_on_nodes(b, config), C);
      x = node_major(ag::gelu(join_.forward(per_config(x, C))), C);
    }
    for (const auto& l : layers_) x = node_norm_act(b, l->forward(b, x, C), x, Act::kGelu);
    ag::Var pooled = ag::add(ag::pool(x, b.graph_ptr, Reduce::kMean), ag::pool(x, b.graph_ptr, Reduce::kMax));
    pooled = early_join_ ? per_config(pooled, C) : repeat_configs(b, pooled);  // [G*C, hidden]
    return head_.forward(b, ag::concat_cols({config, pooled}));
  }

 private:
  bool early_join_;
  nn::Embedding emb_;
  LinearNormAct early1_, early2_;
  nn::Linear join_;  // --join early only (built either way so the two share their other weights' draws)
  std::vector<std::unique_ptr<ConsumerGat>> layers_;
  SlateHead head_;
  std::unique_ptr<nn::Standardize> node_norm_, config_norm_;  // --node-/--config-transform trainable
};

}  // namespace

Recipe tile_gat_6th_recipe() {
  Recipe r;
  r.name = "tile-gat-6th";
  r.kind = "tile";
  r.summary =
      "6th place tile model (Kaggle): configs joined on every node, 4 residual GAT layers with instance "
      "norm, mean + max pool, slate-normalised head, ListMLE";
  r.hparams = concat_specs(common_hparams(false, {{"temperature", "1"},
                                                  {"mse-weight", "0"},
                                                  {"lr", "0.0005"},
                                                  {"weight-decay", "0.01"},
                                                  {"batch-graphs", "32"},
                                                  {"configs", "64"},
                                                  {"eval-chunk", "100"},
                                                  {"node-transform", "standardize"},
                                                  {"config-transform", "standardize"}}),
                           params().specs());
  offer_trainable(r.hparams, "node-transform");
  offer_trainable(r.hparams, "config-transform");
  r.configs_interact = [](const HParams&) { return true; };  // the late norm over the configs of the slate
  r.build = build_with<TileGat6th>(params());
  return r;
}

}  // namespace gnn::train
