// The official tile GNN family (tpu_graphs tiles_train.py; TPUGRAPHS.md section 6): four recipes,
// one model with two switches.
//
//   input per node        h0 = [opcode embedding (64) | node features]
//   early join            x = [h0 | config features] on every node and config: [N, C*(64+F+B)]
//   late join             x = h0 (the GNN runs once per graph; configs join after the pooling)
//   SAGE layer            x = l2norm(leaky_relu(Dense([(A + A^T) x ; x])))          (EarlyJoinSAGE)
//   ResGCN layer          x = x + leaky_relu(D^-1/2 (A + A^T + I) D^-1/2 x W + b)   (after a Dense to 64)
//   readout               sum over the kernel's nodes, then [| config features] for late join
//   head                  MLP [64, 64, 1] -> one score per config (lower = faster)
// Loss ListMLE (temperature 10) + 0.02 MSE; 10 graphs x 10 configs per step; Adam 1e-3.
#include <vector>

#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  int64_t op_embed = 0, hidden = 0, layers = 0;
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::op_embed, integer_hp("op-embed", "64", 1, 4096, "opcode embedding width"))
          .add(&P::hidden, integer_hp("hidden", "64", 1, 65536, "GNN and head width"))
          .add(&P::layers, integer_hp("layers", "3", 1, 64, "GNN layers"));
  return t;
}

enum class Conv { kSage, kResGcn };

class TileGnn : public RankModel {
 public:
  TileGnn(const Params& h, const ModelDims& d, Rng& rng, Conv conv, bool early)
      : conv_(conv),
        early_(early),
        emb_(kOpcodes, h.op_embed, rng),
        head_({h.hidden + (early ? 0 : d.config_features), h.hidden, h.hidden, 1}, Act::kLeakyRelu, rng) {
    const int64_t H = h.hidden, layers = h.layers;
    const int64_t in = h.op_embed + d.node_features + (early ? d.config_features : 0);
    add_child("op_embedding", &emb_);
    if (conv == Conv::kResGcn) {
      prenet_ = std::make_unique<nn::Linear>(in, H, rng);
      add_child("prenet", prenet_.get());
    }
    for (int64_t l = 0; l < layers; ++l) {
      if (conv == Conv::kSage)
        sage_.push_back(std::make_unique<ConfigSage>(l == 0 ? in : H, H, rng, Act::kLeakyRelu, true));
      else gcn_.push_back(std::make_unique<ResGcnLayer>(H, rng, Act::kLeakyRelu));
      add_child("layers." + std::to_string(l), conv == Conv::kSage ? static_cast<nn::Module*>(sage_.back().get())
                                                                   : static_cast<nn::Module*>(gcn_.back().get()));
    }
    add_child("head", &head_);
  }

  bool replayable() const override { return true; }

  BatchNeeds needs() const override { return {.gcn = !gcn_.empty()}; }

  ag::Var forward(const Batch& b) override {
    const int64_t C = early_ ? b.configs : 1;  // late join: the graph part runs once for all configs
    ag::Var x = node_input(emb_, b);
    if (early_) x = ag::join_configs(x, tile_configs_on_nodes(b), C);
    if (prenet_) x = node_major(prenet_->forward(per_config(x, C), Act::kLeakyRelu), C);
    const PlainPath p{b, nullptr, C};
    for (const auto& l : sage_) x = l->forward(p, x);
    for (const auto& l : gcn_) x = l->forward(p, x);
    ag::Var pooled = ag::pool(x, b.graph_ptr, Reduce::kSum);  // [G, C*H]
    pooled = early_ ? per_config(pooled, C) : ag::concat_cols({repeat_configs(b, pooled), ag::Var(b.config_feat)});
    return head_.forward(pooled);
  }

 private:
  Conv conv_;
  bool early_;
  nn::Embedding emb_;
  std::unique_ptr<nn::Linear> prenet_;
  std::vector<std::unique_ptr<ConfigSage>> sage_;
  std::vector<std::unique_ptr<ResGcnLayer>> gcn_;
  nn::MLP head_;
};

Recipe tile_gnn(const char* name, const char* summary, Conv conv, bool early) {
  Recipe r;
  r.name = name;
  r.kind = "tile";
  r.summary = summary;
  r.hparams = concat_specs(
      common_hparams(false, {{"temperature", "10"}, {"mse-weight", "0.02"}, {"batch-graphs", "10"}, {"configs", "10"}}),
      params().specs());
  r.build = [conv, early](const HParams& h, const ModelDims& d, Rng& rng) -> std::unique_ptr<RankModel> {
    return std::make_unique<TileGnn>(params().read(h), d, rng, conv, early);
  };
  return r;
}

}  // namespace

Recipe tile_earlyjoin_sage_recipe() {
  return tile_gnn("tile-earlyjoin-sage",
                  "official tile baseline EarlyJoinSAGE: config features on every node, 3 SAGE (A+A^T) layers, sum "
                  "pool, MLP; ListMLE + 0.02 MSE (tpu_graphs)",
                  Conv::kSage, true);
}
Recipe tile_latejoin_sage_recipe() {
  return tile_gnn("tile-latejoin-sage",
                  "official tile variant LateJoinSAGE: 3 SAGE layers on the graph alone, configs joined after the "
                  "sum pool (tpu_graphs)",
                  Conv::kSage, false);
}
Recipe tile_earlyjoin_resgcn_recipe() {
  return tile_gnn("tile-earlyjoin-resgcn",
                  "official tile variant EarlyJoinResGCN: config features on every node, residual GCN layers "
                  "(tpu_graphs)",
                  Conv::kResGcn, true);
}
Recipe tile_latejoin_resgcn_recipe() {
  return tile_gnn("tile-latejoin-resgcn",
                  "official tile variant LateJoinResGCN: residual GCN on the graph alone, configs joined after the "
                  "pool (tpu_graphs)",
                  Conv::kResGcn, false);
}

}  // namespace gnn::train
