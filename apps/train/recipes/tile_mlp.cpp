// tile-mlp: the official tile MLP baseline (tpu_graphs, tpu_graphs/baselines/tiles/models.py, class MLP;
// TPUGRAPHS.md section 5 reports 1 - slowdown@5 = 0.29 on the real validation split). No message
// passing: [opcode embedding (32) | node features] pooled over the kernel, joined with each config's
// features, into an MLP [64, 64, 1] with leaky ReLU.
//
// --pool sum is the original's readout (its `reduction` default): the sum over the kernel's nodes, so the
// pooled input grows with the kernel's size. --pool mean-max (mean and max side by side) is a stronger
// variant that this recipe used as its only readout until 2026-11-26; a checkpoint from before the flag
// resumes with it.
#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  int64_t op_embed = 0, hidden = 0;
  bool pool_sum = false;
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::op_embed, integer_hp("op-embed", "32", 1, 4096, "opcode embedding width"))
          .add(&P::hidden, integer_hp("hidden", "64", 1, 65536, "MLP width"))
          .add(&P::pool_sum,
               choice_hp("pool", "sum", "sum|mean-max",
                         "readout over the kernel's nodes: sum (the original's) or mean and max side by side"),
               "sum");
  return t;
}

class TileMlp : public RankModel {
 public:
  TileMlp(const Params& h, const ModelDims& d, Rng& rng)
      : sum_(h.pool_sum),
        emb_(kOpcodes, h.op_embed, rng),
        mlp_({(sum_ ? 1 : 2) * (h.op_embed + d.node_features) + d.config_features, h.hidden, h.hidden, 1},
             Act::kLeakyRelu, rng) {
    add_child("op_embedding", &emb_);
    add_child("mlp", &mlp_);
  }
  bool replayable() const override { return true; }

  ag::Var forward(const Batch& b) override {
    const ag::Var h = node_input(emb_, b);
    const ag::Var pooled =
        sum_ ? ag::pool(h, b.graph_ptr, Reduce::kSum)
             : ag::concat_cols({ag::pool(h, b.graph_ptr, Reduce::kMean), ag::pool(h, b.graph_ptr, Reduce::kMax)});
    return mlp_.forward(ag::concat_cols({repeat_configs(b, pooled), ag::Var(b.config_feat)}));
  }

 private:
  bool sum_;
  nn::Embedding emb_;
  nn::MLP mlp_;
};

}  // namespace

Recipe tile_mlp_recipe() {
  Recipe r;
  r.name = "tile-mlp";
  r.kind = "tile";
  r.summary =
      "official tile MLP baseline: node features summed over the kernel + config features -> MLP [64,64,1] "
      "(tpu_graphs)";
  r.hparams = concat_specs(
      common_hparams(false, {{"temperature", "10"}, {"mse-weight", "0.02"}, {"batch-graphs", "10"}, {"configs", "10"}}),
      params().specs());
  r.build = build_with<TileMlp>(params());
  r.reads_edges = false;  // node features pooled: no message passing
  return r;
}

}  // namespace gnn::train
