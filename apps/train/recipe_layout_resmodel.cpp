// layout-resmodel: the official layout baseline (tpu_graphs layout_train.py, ResModel; TPUGRAPHS.md
// section 6; mean validation tau about 0.30 over the four real collections).
//
//   input per node and config   [opcode embedding (32) | node features | layout config (18, zeros on
//                               nodes that are not configurable)]: [N, C*(32+F+18)]
//   prenet                      MLP [32, 32] with leaky_relu
//   layers (2)                  x = x + leaky_relu(D^-1/2 (A + A^T + I) D^-1/2 x W + b)
//   readout per config          [mean pool | l2norm(sum pool) | l2norm(sum over configurable nodes)]
//   postnet                     MLP [32, 1]
// ListMLE over the configs of each graph; 8 graphs x 16 configs; Adam 1e-3.
// Config sharing (--share on, the default; nn/config_share.h): the prenet and every layer run once on
// the rows no config reaches within that many hops and per config only on the rest; the same model,
// the same numbers as --share off, which runs every row per config.
// Segment training: in each graph larger than --segment nodes a random contiguous range of that many
// nodes is kept for the backward; the forward runs on the whole graph and the other nodes pass no
// gradient (every layer's output is cut there).
#include <vector>

#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

class LayoutResModel : public RankModel {
 public:
  LayoutResModel(const HParams& h, const ModelDims& d, Rng& rng)
      : share_(h.str("share") == "on"),
        emb_(kOpcodes, h.integer("op-embed"), rng),
        prenet_({h.integer("op-embed") + d.node_features + d.config_features, h.integer("hidden"), h.integer("hidden")},
                Act::kLeakyRelu, rng),
        postnet_({3 * h.integer("hidden"), h.integer("hidden"), 1}, Act::kLeakyRelu, rng) {
    add_child("op_embedding", &emb_);
    add_child("prenet", &prenet_);
    for (int64_t l = 0; l < h.integer("layers"); ++l) {
      layers_.push_back(std::make_unique<ResGcnLayer>(h.integer("hidden"), rng, Act::kLeakyRelu));
      add_child("layers." + std::to_string(l), layers_.back().get());
    }
    add_child("postnet", &postnet_);
  }

  ag::Var forward(const Batch& b) override {
    if (share_ && b.config_nodes.numel() > 0) return forward_shared(b);
    const int64_t C = b.configs;
    ag::Var x = ag::join_configs(node_input(emb_, b), ag::Var(b.node_config), C);
    x = segment(b, node_major(prenet_.forward(per_config(x, C), Act::kLeakyRelu), C));
    for (const auto& l : layers_) x = segment(b, l->forward(b, x, C));
    const ag::Var mean = per_config(ag::pool(x, b.graph_ptr, Reduce::kMean), C);
    const ag::Var sum = ag::l2_normalize(per_config(ag::pool(x, b.graph_ptr, Reduce::kSum), C));
    const ag::Var configurable =
        ag::l2_normalize(per_config(ag::pool(ag::gather_rows(x, b.config_nodes), b.config_ptr, Reduce::kSum), C));
    return postnet_.forward(ag::concat_cols({mean, sum, configurable}));
  }

 private:
  ag::Var forward_shared(const Batch& b) {
    const int64_t C = b.configs;
    const nn::SharePlan& plan = b.share_plan(int64_t(layers_.size()));
    nn::SharedRows x = nn::map_rows(layout_input_shared(emb_, b),
                                    [&](const ag::Var& v) { return prenet_.forward(v, Act::kLeakyRelu); });
    x = segment(b, plan, x);
    for (const auto& l : layers_) x = segment(b, plan, l->forward(b, plan, x));
    const ag::Var mean = nn::pool(plan, x, Reduce::kMean);
    const ag::Var sum = ag::l2_normalize(nn::pool(plan, x, Reduce::kSum));
    const ag::Var configurable =
        ag::l2_normalize(per_config(ag::pool(configurable_rows(b, x), b.config_ptr, Reduce::kSum), C));
    return postnet_.forward(ag::concat_cols({mean, sum, configurable}));
  }

  bool share_;
  nn::Embedding emb_;
  nn::MLP prenet_;
  std::vector<std::unique_ptr<ResGcnLayer>> layers_;
  nn::MLP postnet_;
};

}  // namespace

Recipe layout_resmodel_recipe() {
  Recipe r;
  r.name = "layout-resmodel";
  r.kind = "layout";
  r.summary = "official layout baseline ResModel: residual GCN, mean + sum + configurable-node readout, ListMLE, "
              "segment training (tpu_graphs)";
  r.hparams = common_hparams(true);
  r.hparams.push_back(integer_hp("op-embed", "32", 1, 4096, "opcode embedding width"));
  r.hparams.push_back(integer_hp("hidden", "32", 1, 65536, "width of every layer"));
  r.hparams.push_back(integer_hp("layers", "2", 1, 64, "residual GCN layers"));
  r.hparams.push_back(share_hp());
  r.build = [](const HParams& h, const ModelDims& d, Rng& rng) -> std::unique_ptr<RankModel> {
    return std::make_unique<LayoutResModel>(h, d, rng);
  };
  return r;
}

}  // namespace gnn::train
