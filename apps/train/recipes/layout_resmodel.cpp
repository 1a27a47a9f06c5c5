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
// nodes is kept for the backward; the other nodes pass no gradient (every layer's output is cut there).
// By default (--segment-backward rows) the tape holds only the segment's rows and their neighbours:
// one untaped pass over the whole batch keeps what the segment reads, then the segment alone is taped
// (apps/train/segment_pass.h); --segment-backward mask runs forward and backward on every row, the
// gradient masked, as tpu_graphs does. The same gradient either way.
#include <vector>

#include "apps/train/blocks.h"
#include "apps/train/segment_pass.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  int64_t op_embed = 0, hidden = 0, layers = 0;
  bool share = false, segment_rows = false;
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::op_embed, integer_hp("op-embed", "32", 1, 4096, "opcode embedding width"))
          .add(&P::hidden, integer_hp("hidden", "32", 1, 65536, "width of every layer"))
          .add(&P::layers, integer_hp("layers", "2", 1, 64, "residual GCN layers"))
          .add(&P::share, share_hp(), "on")
          .add(&P::segment_rows, segment_backward_hp(), "rows");
  return t;
}

class LayoutResModel : public RankModel {
 public:
  LayoutResModel(const Params& h, const ModelDims& d, Rng& rng)
      : share_(h.share),
        rows_(h.segment_rows),
        emb_(kOpcodes, h.op_embed, rng),
        prenet_({h.op_embed + d.node_features + d.config_features, h.hidden, h.hidden}, Act::kLeakyRelu, rng),
        postnet_({3 * h.hidden, h.hidden, 1}, Act::kLeakyRelu, rng) {
    add_child("op_embedding", &emb_);
    add_child("prenet", &prenet_);
    for (int64_t l = 0; l < h.layers; ++l) {
      layers_.push_back(std::make_unique<ResGcnLayer>(h.hidden, rng, Act::kLeakyRelu));
      add_child("layers." + std::to_string(l), layers_.back().get());
    }
    add_child("postnet", &postnet_);
  }

  bool replayable() const override { return true; }

  BatchNeeds needs() const override { return {.gcn = true, .share_plan = share_ ? int64_t(layers_.size()) : 0}; }

  ag::Var forward(const Batch& b) override {
    return forward_segment_rows(b, rows_, [&](const Batch& on, SegmentPass* seg) { return run(on, seg); });
  }

 private:
  // The model on b, config-shared when it can be; with a SegmentPass, the pass's layer outputs and readout
  // sums stand in for the cuts and pools of segment training (segment_pass.h).
  ag::Var run(const Batch& b, SegmentPass* seg) {
    if (share_ && b.config_nodes.numel() > 0) return run(SharedPath{b, b.share_plan(int64_t(layers_.size())), seg});
    return run(PlainPath{b, seg});
  }

  template <class Path>
  ag::Var run(const Path& p) {
    auto x = p.cut(p.input(node_input(emb_, p.b), [&](const ag::Var& v) { return prenet(v); }));
    for (const auto& l : layers_) x = p.cut(p.layer(*l, x));
    if (p.seg) {
      const ag::Var sum = p.sum(x);
      return readout(p.seg->mean(sum), sum, p.configurable_sum(x));
    }
    return readout(p.pool(x, Reduce::kMean), p.pool(x, Reduce::kSum), p.configurable_sum(x));
  }

  ag::Var prenet(const ag::Var& x) { return prenet_.forward(x, Act::kLeakyRelu); }

  // [mean | l2norm(sum) | l2norm(sum over the configurable nodes)] per (graph, config) -> postnet
  ag::Var readout(const ag::Var& mean, const ag::Var& sum, const ag::Var& configurable) {
    return postnet_.forward(ag::concat_cols({mean, ag::l2_normalize(sum), ag::l2_normalize(configurable)}));
  }

  bool share_, rows_;
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
  r.summary =
      "official layout baseline ResModel: residual GCN, mean + sum + configurable-node readout, ListMLE, "
      "segment training (tpu_graphs)";
  r.hparams = concat_specs(common_hparams(true), params().specs());
  r.build = build_with<LayoutResModel>(params());
  return r;
}

}  // namespace gnn::train
