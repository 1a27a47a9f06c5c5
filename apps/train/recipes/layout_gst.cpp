// layout-gst: Graph Segment Training (Cao et al., "Learning Large Graph Property Prediction via Graph
// Segment Training", NeurIPS 2023), the large-graph method of the official TpuGraphs layout baselines,
// as its public code trains TpuGraphs layout (kaidic/GST: configs/tpugraphs.yaml, main_tpugraphs.py,
// graphgps/train/custom_tpu_train.py, graphgps/history.py, graphgps/loader/dataset/tpu_graphs.py;
// TPUGRAPHS.md section 6).
//
//   segments       each graph cut into P = n / 1000 + 1 contiguous node ranges (gst_segments, data.h); a
//                  segment is encoded alone, on its induced subgraph: the edges between segments are dropped
//   per segment    [node features (standardised) | opcode embedding (128, norm 1) * w_op | config (18) * w_cfg]
//   and config     -> Linear(128) -> Linear(256) -> dropout 0.1 -> PReLU
//                  -> 3 x SAGEConv(256, mean over the consumers of each node), nothing between them
//                  -> max pool + mean pool -> l2-normalise -> Linear(256) -> dropout -> PReLU -> Linear(1)
//   a graph        the sum of its segments' scores
// Training: 32 configs per graph; each step trains one random segment of each graph, and the other P - 1
// segments' scores come from a table of historical scores, one per (graph, config, segment), each kept
// with probability 1 - p (stale-embedding dropout, p = 0.5): score = fresh * (1 + (P - 1) p) + sum of the
// kept stale scores, which equals P times a segment's score in expectation when they agree. The trained
// segment's fresh scores then replace its table entries. Pairwise hinge, margin 0.1, over each graph's
// configs; Adam 1e-4. Evaluation and prediction score every segment afresh and sum.
//
// Where this departs from the published code, and why:
// - PReLU is leaky_relu with the fixed slope 0.25, PReLU's initial value: the engine has no learned slope.
// - The opcode embedding's max_norm=1 (torch renormalises a looked-up row to norm 1 in place when it is
//   longer) is by default an l2 normalisation of the looked-up rows: the same forward while a row's norm
//   is at least 1 (N(0, 1) rows of 128 start near 11), the gradient projected onto the sphere instead of
//   the weights'. --op-max-norm 1 is torch's own (nn::Embedding::max_norm), rows shorter than 1 kept.
// - The SAGE layers are the published ones: GraphGym's bare SAGEConv wrappers, which apply no activation,
//   although the config names PReLU (it is used in the pre- and post-layers only).
// - Defaults follow configs/tpugraphs.yaml (32 graphs x 32 configs, Adam 1e-4) except the length: the
//   published run asks for 20,000 epochs.
// - The table is kept in the training process and written into model.npz with every checkpoint, so a
//   resumed run reads what the unbroken one read; the published table is a torch buffer of 5e8 floats that
//   a restart loses. A job of several ranks is refused (each rank would hold its own table).
// Config sharing (--share on, the default; nn/config_share.h): only the aggregations and the pools mix a
// segment's rows, so the input layers and the convs run once on the rows no config reaches and per config
// on the rest, and the max pool is the larger of the two parts' maxima; the same numbers as --share off
// without dropout. With it (--dropout, 0.1 by default) its input layers' mask is drawn over the rows they
// run on: a row no config reaches takes one mask for every config under --share on, one per config under
// --share off (as the original's per-config graphs do): the same rate, another draw, not the same numbers.
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "apps/checkpoint.h"
#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  int64_t segment_nodes = 0, op_embed = 0, input_dim = 0, hidden = 0, layers = 0;
  double stale_dropout = 0, dropout = 0, op_max_norm = 0;
  bool share = false;
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::segment_nodes, integer_hp("segment-nodes", "1000", 1, INT64_MAX,
                                             "GST segment size: a graph of n nodes is cut "
                                             "into n / this + 1 contiguous segments"))
          .add(&P::stale_dropout,
               number_hp("stale-dropout", "0.5", 0, 0.95, "probability that a stale segment score is dropped"))
          .add(&P::op_embed, integer_hp("op-embed", "128", 1, 4096, "opcode embedding width"))
          .add(&P::input_dim, integer_hp("input-dim", "128", 1, 65536, "width of the input Linear"))
          .add(&P::hidden, integer_hp("hidden", "256", 1, 65536, "width of the SAGE layers and the head"))
          .add(&P::layers, integer_hp("layers", "3", 1, 64, "SAGE layers"))
          .add(&P::dropout, number_hp("dropout", "0.1", 0, 0.95, "dropout after the input and head Linear layers"))
          .add(&P::share, share_hp(), "on")
          .add(&P::op_max_norm, op_max_norm_hp());
  return t;
}

constexpr double kPreluSlope = 0.25;

class LayoutGst : public RankModel {
 public:
  LayoutGst(const Params& h, const ModelDims& d, Rng& rng)
      : share_(h.share),
        segment_nodes_(h.segment_nodes),
        stale_dropout_(h.stale_dropout),
        dropout_(h.dropout),
        emb_(kOpcodes, h.op_embed, rng),
        input_(d.node_features + h.op_embed + d.config_features, h.input_dim, rng),
        pre_(h.input_dim, h.hidden, rng),
        post_(h.hidden, h.hidden, rng),
        out_(h.hidden, 1, rng) {
    node_width_ = d.node_features + h.op_embed;
    op_weight_ = add_param("op_weight", Tensor::full(Shape{1}, 100.0, DType::F32));
    config_weight_ = add_param("config_weight", Tensor::full(Shape{d.config_features}, 100.0, DType::F32));
    emb_.max_norm = h.op_max_norm;  // 0: the l2 normalisation of the header
    add_child("op_embedding", &emb_);
    add_child("input", &input_);
    add_child("pre", &pre_);
    for (int64_t l = 0; l < h.layers; ++l) {
      layers_.push_back(std::make_unique<ConsumerSage>(h.hidden, h.hidden, rng));
      add_child("layers." + std::to_string(l), layers_.back().get());
    }
    add_child("post", &post_);
    add_child("out", &out_);
  }

  BatchNeeds needs() const override {
    return {.consumers = true, .consumers_plan = share_ ? int64_t(layers_.size()) : 0};
  }

  ag::Var forward(const Batch& b) override {
    if (!b.part.empty()) {
      const ag::Var fresh = segment_scores(b);
      return training() ? with_history(b, fresh) : fresh;
    }
    // Whole graphs: every segment scored on its own, the scores summed per graph and config.
    std::vector<int64_t> seg{0}, per_graph{0};
    for (int64_t g = 0; g < b.graphs; ++g) {
      const int64_t lo = b.graph_ptr.i64()[g], n = b.graph_ptr.i64()[g + 1] - lo;
      const std::vector<int64_t> cut = gst_segments(n, segment_nodes_);
      for (size_t k = 1; k < cut.size(); ++k) seg.push_back(lo + cut[k]);
      per_graph.push_back(int64_t(seg.size()) - 1);
    }
    if (int64_t(seg.size()) - 1 == b.graphs) return segment_scores(b);
    const int64_t C = b.configs, S = int64_t(seg.size()) - 1;
    const ag::Var scores = ag::reshape(segment_scores(b.split(seg)), S, C);  // row s: segment s's C configs
    return ag::reshape(ag::pool(scores, Tensor::from_vector(per_graph), Reduce::kSum), b.graphs * C, 1);
  }

  // The table: for each training graph (by id), its configs' scores per segment, [config * P + segment].
  void save_state(std::vector<std::pair<std::string, Tensor>>& out) const override {
    std::string ids;
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (const auto& [id, t] : table_) ids += id + "\n", sizes.push_back(int64_t(t.size())), total += int64_t(t.size());
    Tensor values = Tensor::empty({total}, DType::F32);
    int64_t at = 0;
    for (const auto& [id, t] : table_)
      std::memcpy(values.f32() + at, t.data(), t.size() * sizeof(float)), at += int64_t(t.size());
    out.emplace_back("state/gst/ids", text_tensor(ids));
    out.emplace_back("state/gst/sizes", Tensor::from_vector(sizes));
    out.emplace_back("state/gst/values", values);
  }

  void load_state(const std::map<std::string, Tensor>& arrays, const std::string& file) override {
    table_.clear();
    if (!arrays.count("state/gst/ids")) return;  // a checkpoint written before any step
    const std::string ids = tensor_text(arrays, "state/gst/ids", file);
    GNN_CHECK(arrays.count("state/gst/sizes") && arrays.count("state/gst/values"), file,
              ": state/gst/ids without state/gst/sizes and state/gst/values");
    const Tensor& sizes = arrays.at("state/gst/sizes");
    const Tensor& values = arrays.at("state/gst/values");
    GNN_CHECK(sizes.dtype() == DType::I64 && values.dtype() == DType::F32, file,
              ": state/gst/sizes must be i64 and state/gst/values f32");
    int64_t at = 0, k = 0;
    for (size_t begin = 0; begin < ids.size(); ++k) {
      const size_t end = ids.find('\n', begin);
      GNN_CHECK(
          end != std::string::npos && k < sizes.numel() && sizes.i64()[k] >= 0 && sizes.i64()[k] <= values.numel() - at,
          file, ": the segment table (state/gst/*) is inconsistent");
      std::vector<float>& t = table_[ids.substr(begin, end - begin)];
      t.assign(values.f32() + at, values.f32() + at + sizes.i64()[k]);
      at += sizes.i64()[k], begin = end + 1;
    }
    GNN_CHECK(k == sizes.numel() && at == values.numel(), file, ": the segment table (state/gst/*) is inconsistent");
  }

 private:
  // One score per (graph, config) of b, each graph scored as one segment: [G*C, 1].
  ag::Var segment_scores(const Batch& b) {
    const ag::Var op = emb_.max_norm > 0 ? emb_.forward(b.opcode)  // torch's max_norm, in place
                                         : ag::l2_normalize(emb_.forward(b.opcode));  // (header)
    const ag::Var rows = ag::concat_cols({ag::Var(b.x), ag::scale_by(op, op_weight_)});
    const ag::Var pooled = share_ && b.config_nodes.numel() > 0
                               ? pool(SharedPath{b, b.consumers_plan(int64_t(layers_.size()))}, rows)
                               : pool(PlainPath{b}, rows);
    const ag::Var h = ag::activation(batch_dropout(b, post_.forward(ag::l2_normalize(pooled)), dropout_, training(), 2),
                                     Act::kLeakyRelu, kPreluSlope);
    return out_.forward(h);
  }

  // The SAGE layers on [node rows | config], max + mean pooled: [G*C, hidden].
  template <class Path>
  ag::Var pool(const Path& p, const ag::Var& rows) {
    auto x = p.input(rows, [&](const ag::Var& v) { return input_layers(p.b, v); });
    for (const auto& l : layers_) x = p.layer(*l, x);
    return ag::add(p.pool(x, Reduce::kMax), p.pool(x, Reduce::kMean));
  }

  // [node rows | config] per row -> the scaled config columns -> Linear -> Linear -> dropout -> PReLU.
  ag::Var input_layers(const Batch& b, const ag::Var& v) const {
    const int64_t R = v.size(0), B = v.size(1) - node_width_;
    const ag::Var ones(Tensor::full(Shape{node_width_}, 1.0, DType::F32, v.device()));
    const ag::Var scale = ag::reshape(
        ag::concat_rows({ag::reshape(ones, node_width_, 1), ag::reshape(config_weight_, B, 1)}), 1, node_width_ + B);
    const ag::Var scaled = ag::mul(v, ag::gather_rows(scale, Tensor::zeros({R}, DType::I32)));
    const ag::Var h = pre_.forward(input_.forward(scaled));
    return ag::activation(batch_dropout(b, h, dropout_, training(), 1), Act::kLeakyRelu, kPreluSlope);
  }

  // A training batch of one segment per graph: the fresh scores of that segment, on the host, scaled and
  // joined with the other segments' stale scores from the table (each kept with probability 1 - p, drawn
  // from the batch's noise seed); the fresh scores then go into the table.
  ag::Var with_history(const Batch& b, const ag::Var& device_fresh) {
    const ag::Var fresh = ag::to_device(device_fresh, Device::cpu());
    const int64_t G = b.graphs, C = b.configs;
    GNN_CHECK(int64_t(b.part.size()) == G && int64_t(b.parts.size()) == G && b.config_ids.numel() == G * C,
              "layout-gst: a training batch without its segments and config ids");
    Tensor mult = Tensor::empty({G * C, 1}, DType::F32), stale = Tensor::zeros({G * C, 1}, DType::F32);
    const float* f = fresh.value().f32();
    Rng rng(b.noise_seed ^ 0x7374616c65ull);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t P = b.parts[size_t(g)], s = b.part[size_t(g)];
      std::vector<float>& t = table_[b.ids[size_t(g)]];
      for (int64_t c = 0; c < C; ++c) {
        const int64_t at = b.config_ids.i64()[g * C + c] * P;
        if (int64_t(t.size()) < at + P) t.resize(size_t(at + P), 0.0f);
        double sum = 0;
        for (int64_t k = 0; k < P; ++k)
          if (k != s && rng.uniform() >= stale_dropout_) sum += t[size_t(at + k)];
        stale.f32()[g * C + c] = float(sum);
        mult.f32()[g * C + c] = float(1 + double(P - 1) * stale_dropout_);
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      std::vector<float>& t = table_[b.ids[size_t(g)]];
      for (int64_t c = 0; c < C; ++c)  // (a non-finite score, of a batch --skip-nonfinite skips, is not kept)
        if (std::isfinite(f[g * C + c]))
          t[size_t(b.config_ids.i64()[g * C + c] * b.parts[size_t(g)] + b.part[size_t(g)])] = f[g * C + c];
    }
    return ag::add(ag::mul(fresh, ag::Var(mult)), ag::Var(stale));
  }

  bool share_;
  int64_t segment_nodes_, node_width_ = 0;
  double stale_dropout_, dropout_;
  nn::Embedding emb_;
  nn::Linear input_, pre_;
  std::vector<std::unique_ptr<ConsumerSage>> layers_;
  nn::Linear post_, out_;
  ag::Var op_weight_, config_weight_;
  std::map<std::string, std::vector<float>> table_;
};

}  // namespace

Recipe layout_gst_recipe() {
  Recipe r;
  r.name = "layout-gst";
  r.kind = "layout";
  r.summary =
      "Graph Segment Training (GST): 1000-node segments encoded alone, one trained per graph and step, "
      "the others' scores from a table with stale dropout; SAGE x3 (256), pairwise hinge; config sharing";
  r.hparams = concat_specs(common_hparams(true, {{"loss", "hinge"},
                                                 {"margin", "0.1"},
                                                 {"batch-graphs", "32"},
                                                 {"configs", "32"},
                                                 {"lr", "0.0001"},
                                                 {"node-transform", "standardize"},
                                                 {"segment", "0"}}),
                           params().specs());
  r.build = build_with<LayoutGst>(params());
  r.train_part = [](const HParams& h, int64_t nodes, Rng& rng) {
    const std::vector<int64_t> cut = gst_segments(nodes, params().read(h).segment_nodes);
    GraphPart p;
    p.count = int64_t(cut.size()) - 1;
    p.index = int64_t(rng.below(uint64_t(p.count)));
    p.begin = cut[size_t(p.index)], p.end = cut[size_t(p.index) + 1];
    return p;
  };
  r.takes_segment = false;  // its own segments (--segment-nodes), no gradient cut
  return r;
}

}  // namespace gnn::train
