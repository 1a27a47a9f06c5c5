// tile-mlp: the official tile MLP baseline (tpu_graphs, "MLP on pooled features"; TPUGRAPHS.md
// section 5 reports 1 - slowdown@5 = 0.29 on the real validation split). No message passing: the
// mean and max of [opcode embedding | node features] over the kernel, joined with each config's
// features, into an MLP.
#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

class TileMlp : public RankModel {
 public:
  TileMlp(const HParams& h, const ModelDims& d, Rng& rng)
      : emb_(kOpcodes, h.integer("op-embed"), rng),
        mlp_({2 * (h.integer("op-embed") + d.node_features) + d.config_features, h.integer("hidden"),
              h.integer("hidden"), 1},
             Act::kLeakyRelu, rng) {
    add_child("op_embedding", &emb_);
    add_child("mlp", &mlp_);
  }
  ag::Var forward(const Batch& b) override {
    const ag::Var h = node_input(emb_, b);
    const ag::Var pooled =
        ag::concat_cols({ag::pool(h, b.graph_ptr, Reduce::kMean), ag::pool(h, b.graph_ptr, Reduce::kMax)});
    return mlp_.forward(ag::concat_cols({repeat_configs(b, pooled), ag::Var(b.config_feat)}));
  }

 private:
  nn::Embedding emb_;
  nn::MLP mlp_;
};

}  // namespace

Recipe tile_mlp_recipe() {
  Recipe r;
  r.name = "tile-mlp";
  r.kind = "tile";
  r.summary = "official tile MLP baseline: pooled node features + config features -> MLP [64,64,1] (tpu_graphs)";
  r.hparams =
      common_hparams(false, {{"temperature", "10"}, {"mse-weight", "0.02"}, {"batch-graphs", "10"}, {"configs", "10"}});
  r.hparams.push_back(integer_hp("op-embed", "64", 1, 4096, "opcode embedding width"));
  r.hparams.push_back(integer_hp("hidden", "64", 1, 65536, "MLP width"));
  r.build = [](const HParams& h, const ModelDims& d, Rng& rng) -> std::unique_ptr<RankModel> {
    return std::make_unique<TileMlp>(h, d, rng);
  };
  return r;
}

}  // namespace gnn::train
