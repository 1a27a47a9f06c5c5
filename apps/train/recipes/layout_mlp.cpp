// layout-mlp: the graph-free baseline of the layout papers ("vanilla MLP", TPUGRAPHS.md section 5):
// the mean and max of [opcode embedding | node features] over the program, joined with the mean of
// the layout features over the configurable nodes, into an MLP. It sees which layouts a config
// uses, not where: what a GNN adds is measured against it.
#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  int64_t op_embed = 0, hidden = 0;
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::op_embed, integer_hp("op-embed", "32", 1, 4096, "opcode embedding width"))
          .add(&P::hidden, integer_hp("hidden", "64", 1, 65536, "MLP width"));
  return t;
}

class LayoutMlp : public RankModel {
 public:
  LayoutMlp(const Params& h, const ModelDims& d, Rng& rng)
      : emb_(kOpcodes, h.op_embed, rng),
        mlp_({2 * (h.op_embed + d.node_features) + 2 * d.config_features, h.hidden, h.hidden, 1}, Act::kLeakyRelu,
             rng) {
    add_child("op_embedding", &emb_);
    add_child("mlp", &mlp_);
  }
  bool replayable() const override { return true; }

  ag::Var forward(const Batch& b) override {
    const int64_t C = b.configs;
    const ag::Var h = node_input(emb_, b);
    const ag::Var graph =
        ag::concat_cols({ag::pool(h, b.graph_ptr, Reduce::kMean), ag::pool(h, b.graph_ptr, Reduce::kMax)});
    const ag::Var cfg = ag::gather_rows(ag::Var(b.node_config), b.config_nodes);  // [K, C*18]
    const ag::Var layouts = ag::concat_cols({per_config(ag::pool(cfg, b.config_ptr, Reduce::kMean), C),
                                             per_config(ag::pool(cfg, b.config_ptr, Reduce::kMax), C)});
    return mlp_.forward(ag::concat_cols({repeat_configs(b, graph), layouts}));
  }

 private:
  nn::Embedding emb_;
  nn::MLP mlp_;
};

}  // namespace

Recipe layout_mlp_recipe() {
  Recipe r;
  r.name = "layout-mlp";
  r.kind = "layout";
  r.summary =
      "layout MLP baseline: pooled node features + pooled layout features -> MLP (no message passing; "
      "the seed papers' vanilla MLP)";
  r.hparams = concat_specs(common_hparams(true), params().specs());
  r.build = build_with<LayoutMlp>(params());
  r.reads_edges = false, r.takes_segment = false;  // node features pooled, no gradient cut
  return r;
}

}  // namespace gnn::train
