// layout-sage-2nd: the 2nd place layout model of the Kaggle "Fast or Slow" competition (Obs01ete,
// kaggle_latenciaga; TPUGRAPHS.md section 6; read from its public code, src/model.py, src/main.py,
// src/data.py).
//
//   graph          whole graphs; each node aggregates the nodes that consume its output (PyG's
//                  default flow on the files' edge_index)
//   input          [Linear(node features -> 20) | opcode embedding (12) | layout config (18, zeros off
//                  the configurable nodes)] -> Linear(in) -> ReLU
//   stack          SAGEConv (mean) layers, ReLU after each:
//                    xla (the default): in 32, widths 64, 64, 128, 128, 256, 256, no residual
//                    nlp:               in 64, widths 256 x 4, 512 x 4, residual where widths match
//   readout        Linear(1) per node, summed over the graph's nodes, times 1e-3 (per config)
// Pairwise margin loss over the pairs of a slate (the pairwise hinge here, margin 0.01 on the prediction
// read as seconds, as the original's DiffMat loss on xla); 10 slates x 4 configs per step, drawn from a
// list of the training graphs repeated 100 times (--graph-repeats 100: an epoch is 100 passes, as the
// original's epoch counter steps by its oversampling factor), so a step holds 10 slates even when there
// are fewer graphs, some of them the same graph with other configs; Adam 1e-3, times 1/sqrt(10) at 60,
// 70, 80 and 90% of the run (--schedule multistep, its MultiStepLR over the run's iterations: 400,000 in
// its write-up, whose snapshots came from the 400k-th; 200,000 by default and 100,000 in its layout job
// files at the commit the write-up describes, ca55746).
// An epoch here is 100 passes over the training graphs, so --epochs counts in those: on one program of
// 10 slates a step, an epoch is 10 steps; with 1,000 programs, 10,000 steps (--graph-repeats 1 for an
// epoch of one pass).
//
// Config sharing (--share on, the default; nn/config_share.h): nothing in the model mixes the nodes of
// a config but the aggregations and the final sum, so the input layer and every SAGE layer run once on
// the rows no config reaches within that many hops (over the consumers graph) and per config only on
// the rest; the same model and numbers as --share off. It also runs a step's copies of one graph
// (--graph-repeats) as one graph with their configs side by side, each copy's configs a slate of its own
// (BatchNeeds::merge_copies): on unet3d's 10 copies of 4 configs a step, 1.8x the configs/s.
//
// Where this departs from the original, and why:
// - Node features: the original takes log1p(relu(x)) (negatives dropped); here the trainer's log1p
//   transform, fitted on train (--node-transform log1p), feeds the same Linear(20).
// - Loss: the original adds a MAPE term on runtimes in seconds to its margin loss on the matrix of
//   prediction differences (margin 10 ms on xla, loss scaled by 1 / margin) so its predictions carry
//   seconds for its ensemble; a ranking needs only the order: --loss hinge --margin 0.01, and its MAPE
//   term off by default (--mape-weight 0.01 is it, at its weight beside the hinge: on unet3d's held-out
//   configs it cost 0.016 at 400 steps, while the scores climb towards 23 s). Until 2026-11-28 this
//   recipe trained with margin 1, read as the same loss in units of the margin; it is not the same
//   training: Adam moves each weight by about the learning rate whatever the loss's scale, so the
//   scores must grow 100 times as far. On unet3d's held-out configs (1 graph x 64 configs a step, 400
//   steps, seed 1) margin 1 reached tau 0.501, margin 0.01 0.659 (docs/benchmarks.md).
// - Until 2026-11-28 each step sampled one slate per graph, so on one training program a step held 4
//   configs, not the original's 40 (--graph-repeats 1 is that sampling), with a constant rate. With the
//   original's slates, margin and schedule the recipe ranks unet3d's held-out configs at 0.525 +- 0.016
//   (400 steps, 3 seeds, the build of 17bdd83; docs/benchmarks.md), where it stayed at 0.133 +- 0.007 before.
// - Duplicate configs: its main.py trains on one config per distinct layout, the fastest (579 of unet3d's
//   927 training configs); --dedup on is that, off by default. It draws a slate's configs with
//   replacement, we without by default (--draw with is its draw; a slate holding a config twice then has
//   a tied pair, which its mean counts, at the margin and with no gradient, and ours leaves out, so its
//   gradient is the smaller by the share of tied pairs: about 1 in 580 on unet3d). Its SAGEConv draws lin_l
//   and lin_r each U(+-1/sqrt(D)); our one [2D, out] Linear U(+-1/sqrt(2D)).
//
// Checked against the original's own Model (scripts/check_vs_original.py --model sage2, at its commit
// ca55746): our weights loaded into it, the same unet3d batch, each through its own preprocessing; scores,
// loss and every gradient within 9e-6 of the original in f64. Trained by its own code on unet3d's split
// (bench/peers/train_original.py --model sage2, 400 steps, 5 seeds) it ranks the held-out configs at 0.542
// +- 0.009; this recipe at 0.487 +- 0.012 (3 seeds), 0.520 +- 0.032 with --dedup on --mape-weight 0.01 (its
// function and data, 6 seeds), 0.484 +- 0.069 adding --draw with. The last two means are within the
// seeds' reach of the original's (Welch p 0.16 and 0.10); the spread is not (variance 13x and 60x the
// original's): some seeds of the recipe end at 0.37-0.46, none of the original's below 0.529. Neither its
// Adam epsilon, its draw nor its SAGE init closed that (each tried, then the three at once: 0.519 +- 0.048
// over 6 seeds); no other difference in training was found in its code; the order of f32 sums (--share
// off runs the original's) is untested.
// docs/benchmarks.md has the lines.
// Below gradient boosting on unet3d's held-out configs at any budget tried (0.787 +- 0.006 at 20,000 steps,
// against 0.821), and not from overfitting: on a split of its training configs it ranks them no better than
// the held-out ones (0.820 against 0.816), and none of slates, margin, rate, SWA, the nlp stack, one-hot
// config values, a pooled readout or a per-config instance norm lifted it past 0.83 there, where gradient
// boosting and layout-tgraph reach 0.84 (docs/benchmarks.md, fifty-third session; mostly one seed a change).
// --loss mse (log runtime) does not train this model: on unet3d's 1-hop region (168 nodes, 56 of them
// configurable) the sd of its log predictions over the configs is 3e-9 to 5e-6 after 5 to 400 steps at
// --lr 1e-4 to 1e-2 (of the true log runtimes: 0.24), and its loss stays the batch's variance. Likely
// because (not tested apart) every config's score is mostly the same sum, configs differing by about 1e-5
// of it at the start, so each weight's gradient is mostly the batch's mean error, which changes sign from
// step to step, and Adam's steps follow that; the ranking losses see only differences within a slate,
// where the mean cancels.
#include <vector>

#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// The model's own hyper-parameters (--help lists them with the training ones).
struct Params {
  bool share = false;
  std::string stack;
};

const HParamTable<Params>& params() {
  using P = Params;
  static const HParamTable<P> t =
      HParamTable<P>()
          .add(&P::stack,
               choice_hp("stack", "xla", "xla|nlp",
                         "SAGE stack: xla (6 layers, 64 to 256, no residual) | nlp (8 layers, 256 and 512, residual)"))
          .add(&P::share, share_hp(), "on");
  return t;
}

struct Stack {
  int64_t in;
  std::vector<int64_t> widths;
  bool residual;
};
Stack stack_of(const std::string& name) {
  if (name == "nlp") return {64, {256, 256, 256, 256, 512, 512, 512, 512}, true};
  return {32, {64, 64, 128, 128, 256, 256}, false};
}

class LayoutSage2nd : public RankModel {
 public:
  LayoutSage2nd(const Params& h, const ModelDims& d, Rng& rng)
      : share_(h.share),
        stack_(stack_of(h.stack)),
        feat_(d.node_features, 20, rng),
        emb_(kOpcodes, 12, rng),
        input_(20 + 12 + d.config_features, stack_.in, rng),
        out_(stack_.widths.back(), 1, rng) {
    add_child("node_feat_embedding", &feat_);
    add_child("op_embedding", &emb_);
    add_child("input", &input_);
    int64_t in = stack_.in;
    for (size_t l = 0; l < stack_.widths.size(); ++l) {
      convs_.push_back(std::make_unique<ConsumerSage>(in, stack_.widths[l], rng));
      add_child("convs." + std::to_string(l), convs_.back().get());
      in = stack_.widths[l];
    }
    add_child("out", &out_);
  }

  BatchNeeds needs() const override {
    const int64_t layers = share_ ? int64_t(convs_.size()) : 0;
    return {.consumers = true, .consumers_plan = layers, .merge_copies = share_};
  }

  ag::Var forward(const Batch& b) override {
    if (share_ && b.config_nodes.numel() > 0) return run(SharedPath{b, b.consumers_plan(int64_t(convs_.size()))});
    return run(PlainPath{b});
  }

 private:
  template <class Path>
  ag::Var run(const Path& p) {
    auto x = p.cut(p.input(node_rows(p.b), [&](const ag::Var& v) { return input_.forward(v, Act::kRelu); }));
    int64_t width = stack_.in;
    for (size_t l = 0; l < convs_.size(); ++l) {
      auto y = p.layer(*convs_[l], x);
      if (stack_.residual && stack_.widths[l] == width) y = p.residual(y, x);
      x = p.cut(p.each(y, [](const ag::Var& v) { return ag::relu(v); }));
      width = stack_.widths[l];
    }
    const auto per_node = p.map(x, [&](const ag::Var& v) { return out_.forward(v); });  // [N, C] plain
    return ag::scale(p.pool(per_node, Reduce::kSum), 1e-3);
  }

  ag::Var node_rows(const Batch& b) const {
    return ag::concat_cols({feat_.forward(ag::Var(b.x)), emb_.forward(b.opcode)});
  }

  bool share_;
  Stack stack_;
  nn::Linear feat_;
  nn::Embedding emb_;
  nn::Linear input_;
  std::vector<std::unique_ptr<ConsumerSage>> convs_;
  nn::Linear out_;
};

}  // namespace

Recipe layout_sage_2nd_recipe() {
  Recipe r;
  r.name = "layout-sage-2nd";
  r.kind = "layout";
  r.summary =
      "2nd place (Kaggle): whole graphs, deep SAGE stack (xla 6 layers to 256, nlp 8 to 512), per-node "
      "scalar summed, pairwise margin loss; config sharing";
  r.hparams = concat_specs(common_hparams(true, {{"loss", "hinge"},
                                                 {"margin", "0.01"},
                                                 {"schedule", "multistep"},
                                                 {"batch-graphs", "10"},
                                                 {"graph-repeats", "100"},
                                                 {"configs", "4"},
                                                 {"node-transform", "log1p"},
                                                 {"segment", "0"}}),
                           params().specs());
  r.build = build_with<LayoutSage2nd>(params());
  return r;
}

}  // namespace gnn::train
