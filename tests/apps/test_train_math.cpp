// What a training step computes: config batching and config sharing are exact, segments cut gradients,
// each recipe's layers do what the original's do (recomputed by hand where it is short), features as read.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <tuple>

#include "apps/checkpoint.h"
#include "apps/scoring.h"
#include "apps/train/blocks.h"
#include "apps/train/run_state.h"
#include "apps/train/segment_pass.h"
#include "apps/train/step_graph.h"
#include "apps/train/trainer.h"
#include "io/json.h"
#include "io/npz.h"
#include "io/synth.h"
#include "kernels/gemm.h"
#include "kernels/graph_cases.h"
#include "kernels/squeeze_excite.h"
#include "nn/loss.h"
#include "runtime/cuda.h"
#include "testing.h"
#include "train_fixtures.h"

using namespace gnn;
using testing::last_line;
using namespace gnn::train;
using testing::checkpoint_weights;
using testing::run_gnn;
using testing::same_bits;
using testing::TempDir;
using testing::tile_and_layout;
using namespace train_fixtures;

TEST_CASE("train: every recipe scores a config the same in a batch of C configs and G graphs as alone") {
  for (const Recipe& r : recipes()) {
    CAPTURE(r.name);
    const bool layout = r.kind == "layout";
    const auto files = kind_files(dataset(), r.kind, "train");
    REQUIRE(files.size() >= 2);
    const Preprocessing prep = fit_preprocessing(files, layout, FeatureTransform::kOfficial,
                                                 layout ? FeatureTransform::kNone : FeatureTransform::kLog1p, -1);
    Rng rng(5);
    auto model = r.build(r.defaults(), {prep.node_features(), prep.config_features()}, rng);
    const ModelGraph g0 = prepare_graph(files[0], prep, false, model->needs().features),
                     g1 = prepare_graph(files[1], prep, false, model->needs().features);
    model->eval();
    ag::NoGrad ng;
    // (generated tile kernels hold as many configs as they have distinct tiles: 2 or more)
    std::vector<int64_t> c0 = {3, 0, 7, 1}, c1 = {2, 5, 4, 6};
    for (int64_t& c : c0) c %= g0.num_configs();
    for (int64_t& c : c1) c %= g1.num_configs();
    const Tensor both = model->forward(make_batch({&g0, &g1}, {c0, c1}).prepared(model->needs())).value();
    REQUIRE(both.numel() == 8);
    for (int g = 0; g < 2; ++g) {
      const ModelGraph& m = g ? g1 : g0;
      // A recipe whose configs interact scores a graph's 4 configs alone as in the two-graph batch.
      const Tensor graph_alone = model->forward(make_batch({&m}, {g ? c1 : c0}).prepared(model->needs())).value();
      for (int k = 0; k < 4; ++k) {
        const int64_t c = (g ? c1 : c0)[size_t(k)];
        const float alone = r.configs_interact(r.defaults())
                                ? graph_alone.f32()[k]
                                : model->forward(make_batch({&m}, {{c}}).prepared(model->needs())).value().f32()[0];
        CHECK(both.f32()[g * 4 + k] == doctest::Approx(alone).epsilon(1e-5));
      }
    }
    // predict_configs in chunks of at most 3 equals one batch, or for interacting configs the batches of
    // the chunks: 7 configs in 3 near-equal chunks, [0, 2), [2, 4), [4, 7).
    std::vector<int64_t> seven;
    for (int64_t k = 0; k < 7; ++k) seven.push_back((k * 3) % g0.num_configs());
    const std::vector<double> chunked = predict_configs(*model, g0, seven, 3);
    REQUIRE(chunked.size() == 7);
    const std::vector<int64_t> bounds =
        r.configs_interact(r.defaults()) ? std::vector<int64_t>{0, 2, 4, 7} : std::vector<int64_t>{0, 7};
    for (size_t p = 0; p + 1 < bounds.size(); ++p) {
      const std::vector<int64_t> part(seven.begin() + bounds[p], seven.begin() + bounds[p + 1]);
      const Tensor whole = model->forward(make_batch({&g0}, {part}).prepared(model->needs())).value();
      for (int64_t k = 0; k < whole.numel(); ++k)
        CHECK(chunked[size_t(bounds[p] + k)] == doctest::Approx(whole.f32()[k]).epsilon(1e-5));
    }
  }
}

TEST_CASE("train: --tta averages passes over the configs in fixed random orders, un-permuted") {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const ModelGraph g = prepare_graph(files[0], prep);
  std::vector<int64_t> configs;
  for (int64_t k = 0; k < 11; ++k) configs.push_back((k * 7) % g.num_configs());
  const int64_t n = int64_t(configs.size());
  std::vector<int64_t> identity(static_cast<size_t>(n));
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(tta_order(n, 0) == identity);
  std::vector<int64_t> sorted = tta_order(n, 1);
  CHECK(sorted != identity);
  CHECK(tta_order(n, 1) == sorted);  // fixed: eval is deterministic
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == identity);  // a permutation
  for (const char* name : {"layout-sage-6th", "layout-resmodel"}) {
    CAPTURE(name);
    const Recipe& r = find_recipe(name);
    HParams h = r.defaults();
    h.values["hidden"] = "16";
    Rng rng(3);
    auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
    model->eval();
    const std::vector<double> one = predict_configs(*model, g, configs, 4),
                              three = predict_configs(*model, g, configs, 4, 3);
    std::vector<double> want(size_t(n), 0.0);
    for (int64_t t = 0; t < 3; ++t) {
      const std::vector<int64_t> order = tta_order(n, t);
      std::vector<int64_t> permuted;
      for (int64_t i : order) permuted.push_back(configs[size_t(i)]);
      const std::vector<double> p = predict_configs(*model, g, permuted, 4);
      for (int64_t i = 0; i < n; ++i) want[size_t(order[size_t(i)])] += p[size_t(i)] / 3;
    }
    bool differs = false;
    for (int64_t i = 0; i < n; ++i) {
      CHECK(three[size_t(i)] == doctest::Approx(want[size_t(i)]).epsilon(1e-6));
      differs = differs || std::fabs(three[size_t(i)] - one[size_t(i)]) > 1e-4 * (std::fabs(one[size_t(i)]) + 1e-3);
    }
    // Only a model whose configs interact scores a config differently in other company.
    CHECK(differs == r.configs_interact(r.defaults()));
  }
}

TEST_CASE("train: layout-gin-6th --layer4-input second feeds the fourth layer the second's output") {
  // With the published x3 = gconv[3](x1), layers 2 and 3 both read layer 1's output and the readout sums
  // their pools, so swapping their weights leaves every score; with each layer reading the previous
  // one's output (third, the default) it does not.
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kStandardize, FeatureTransform::kNone, 5,
                                               HopDirection::kConsumers);
  const ModelGraph g = prepare_graph(files[0], prep);
  const Recipe& r = find_recipe("layout-gin-6th");
  for (const char* input : {"second", "third"}) {
    CAPTURE(input);
    HParams h = r.defaults();
    h.values["hidden"] = "16", h.values["op-embed"] = "4", h.values["layer4-input"] = input;
    REQUIRE(check_hparams(r.hparams, h, r.name).empty());
    Rng rng(7);
    auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
    model->eval();
    const std::vector<int64_t> configs = {0, 1, 2, 3, 4, 5};
    const std::vector<double> before = predict_configs(*model, g, configs, 64);
    std::map<std::string, ag::Var> p;
    for (const nn::NamedParam& np : model->parameters()) p.emplace(np.name, np.var);
    for (const auto& [name, var] : p) {
      if (name.rfind("layers.2.", 0) != 0) continue;
      ag::Var other = p.at("layers.3." + name.substr(9));
      const Tensor v2 = var.value().clone();
      Tensor(var.value()).copy_from(other.value());
      Tensor(other.value()).copy_from(v2);
    }
    const std::vector<double> after = predict_configs(*model, g, configs, 64);
    double most = 0;
    for (size_t k = 0; k < configs.size(); ++k) {
      if (std::string(input) == "second") CHECK(after[k] == doctest::Approx(before[k]).epsilon(1e-5));
      most = std::max(most, std::fabs(after[k] - before[k]));
    }
    if (std::string(input) == "third") CHECK(most > 1e-3);
  }
  HParams three = r.defaults();
  three.values["layers"] = "3", three.values["layer4-input"] = "second";
  Rng rng(1);
  CHECK_THROWS_WITH_AS(r.build(three, {prep.node_features(), prep.config_features()}, rng),
                       doctest::Contains("--layer4-input second: needs --layers 4, got 3"), Error);
}

TEST_CASE("train: layout-tgraph --node-layout embedded reads the node's own layout through the embedding alone") {
  // node_feat[134:140] reach the model twice by default: embedded, and as standardised features. With
  // --node-layout embedded (the original) the feature columns are not read: changing them changes no score.
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep =
      fit_preprocessing(files, true, FeatureTransform::kStandardize, FeatureTransform::kNone, 1, HopDirection::kBoth);
  ModelGraph g = prepare_graph(files[0], prep, false, {&kNodeLayout});
  const Recipe& r = find_recipe("layout-tgraph");
  for (const char* layout : {"embedded", "both"}) {
    CAPTURE(layout);
    HParams h = r.defaults();
    h.values["hidden"] = "16", h.values["node-layout"] = layout;
    REQUIRE(check_hparams(r.hparams, h, r.name).empty());
    Rng rng(5);
    auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
    model->eval();
    const std::vector<int64_t> configs = {0, 1, 2, 3};
    const std::vector<double> before = predict_configs(*model, g, configs, 64);
    ModelGraph moved = g;
    moved.x = g.x.clone();
    for (int64_t v = 0; v < moved.num_nodes(); ++v)
      for (int64_t j = 134; j < 140; ++j)
        moved.x.f32()[v * 140 + j] += 0.5f * float(v % 3);  // (the norm removes a shift)
    const std::vector<double> after = predict_configs(*model, moved, configs, 64);
    double most = 0;
    for (size_t k = 0; k < configs.size(); ++k) most = std::max(most, std::fabs(after[k] - before[k]));
    if (std::string(layout) == "embedded") CHECK(most == 0);
    else CHECK(most > 1e-4);
  }
  HParams h = r.defaults();
  h.values["node-layout"] = "embedded";
  Rng rng(5);
  CHECK_THROWS_WITH_AS(r.build(h, {prep.node_features() - 3, prep.config_features()}, rng),
                       doctest::Contains("--node-layout embedded: drops node_feat[134:140]"), Error);
}

TEST_CASE("train: config sharing gives the plain path's loss, gradients and predictions") {
  check_config_sharing(Device::cpu(), "layout-resmodel", {{{"layers", "1"}}, {{"layers", "2"}}, {{"layers", "4"}}});
  // (the 2nd place's SAGE stack over the consumers graph: 6 layers, and 8 with residuals)
  check_config_sharing(Device::cpu(), "layout-sage-2nd", {{{"stack", "xla"}}, {{"stack", "nlp"}}});
  // (the seed report's GNNs: the official SAGE over A + A^T with its l2 norm, and the plain GCN)
  check_config_sharing(Device::cpu(), "layout-seed-sage", {{{"conv", "sage"}}, {{"conv", "gcn"}, {"layers", "4"}}});
  check_config_sharing(Device::cpu(), "layout-gnn-selfattn", {{{"layers", "2"}}});
  // (the attention in front of the GNN reads node rows only; windows of 100 cut the 300-node graphs)
  check_config_sharing(
      Device::cpu(), "layout-attn-violation",
      {{{"heads", "2"}, {"head-dim", "8"}, {"attn-window", "100"}}, {{"violation", "off"}, {"layers", "1"}}});
  // (GST: the 300-node graphs whole, and cut into 4 segments, some without a configurable node; its max
  // pool is the larger of the dependent and the shared rows' maxima; no dropout, whose masks differ. The
  // opcode embedding's scale w_op has one gradient, a sum over every node, config and channel that cancels
  // to 6e-6 here, where the two paths' summation orders differ by 1.2e-10: 2e-5 of it.)
  check_config_sharing(Device::cpu(), "layout-gst",
                       {{{"dropout", "0"}, {"hidden", "32"}},
                        {{"dropout", "0"}, {"hidden", "32"}, {"segment-nodes", "100"}, {"layers", "1"}}},
                       5e-5);
}

TEST_CASE("train: segment training through the segment's rows gives the masked whole batch's gradient") {
  for (const std::string share : {"on", "off"}) {
    CAPTURE(share);
    // The seed report's GNNs: the official SAGE (sum over A + A^T, l2 norm) and the vanilla GCN.
    check_segment_rows(Device::cpu(), "layout-seed-sage", {{"share", share}, {"conv", "sage"}});
    check_segment_rows(Device::cpu(), "layout-seed-sage", {{"share", share}, {"conv", "gcn"}, {"layers", "2"}});
    for (const std::string layers : {"1", "2", "4"}) {
      CAPTURE(layers);
      const double ratio = check_segment_rows(Device::cpu(), "layout-resmodel", {{"share", share}, {"layers", layers}});
      // Plain: 90 rows of each 300-node graph, their neighbours and the whole 80-node graph, 45% of the
      // batch's rows, hold 0.66-0.68 of the masked path's bytes after the forward (with the view's copy of
      // its rows' inputs, and each layer's rows put in place). Shared, at this size that copy outweighs the
      // few shared activations; on a 40k-node program the rows path holds half the masked one's peak
      // (docs/benchmarks.md).
      if (share == "off") CHECK(ratio < 0.75);
    }
  }
}

TEST_CASE("train: GST cuts graphs as the published code, and a graph's score is the sum of its segments'") {
  CHECK(gst_segments(2500, 1000) == std::vector<int64_t>{0, 834, 1668, 2500});
  CHECK(gst_segments(300, 100) == std::vector<int64_t>{0, 76, 152, 228, 300});
  CHECK(gst_segments(999, 1000) == std::vector<int64_t>{0, 999});
  CHECK(gst_segments(1000, 1000) == std::vector<int64_t>{0, 501, 1000});
  CHECK(gst_segments(10, 3) == std::vector<int64_t>{0, 3, 6, 9, 10});
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep =
      fit_preprocessing(files, true, FeatureTransform::kStandardize, FeatureTransform::kNone, -1);
  const ModelGraph g0 = prepare_graph(files[0], prep), g1 = prepare_graph(files[1], prep);
  const Recipe& r = find_recipe("layout-gst");
  HParams h = r.defaults();
  h.values["hidden"] = "32", h.values["segment-nodes"] = "100", h.values["dropout"] = "0";
  Rng rng(3);
  auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
  const std::vector<int64_t> configs = {0, 5, 2, 7};
  const std::vector<int64_t> cut = gst_segments(g0.num_nodes(), 100);
  REQUIRE(cut.size() == 5u);
  std::vector<ModelGraph> segs;
  int64_t config_nodes = 0;
  for (size_t k = 0; k + 1 < cut.size(); ++k) {
    segs.push_back(node_range(g0, cut[k], cut[k + 1]));
    config_nodes += segs.back().config_nodes.numel();
    CHECK(segs.back().num_nodes() == cut[k + 1] - cut[k]);
    CHECK(segs.back().config.size(1) == segs.back().config_nodes.numel());
  }
  CHECK(config_nodes == g0.config_nodes.numel());  // each configurable node in one segment, its columns with it
  {
    model->eval();
    ag::NoGrad ng;
    const Tensor whole = model->forward(make_batch({&g1, &g0}, {configs, configs}).prepared(model->needs())).value();
    std::vector<double> sum(4, 0.0);
    for (const ModelGraph& sg : segs) {
      const Tensor s = model->forward(make_batch({&sg}, {configs}).prepared(model->needs())).value();
      for (int k = 0; k < 4; ++k) sum[size_t(k)] += s.f32()[k];
    }
    for (int k = 0; k < 4; ++k) CHECK(whole.f32()[4 + k] == doctest::Approx(sum[size_t(k)]).epsilon(1e-5));
  }
  // Training on segment 1 of 4, then segment 2: the first step has no history (its score is the fresh one
  // times 1 + 3p), the second adds each of segment 1's stored scores where its draw keeps it.
  h.values["stale-dropout"] = "0";
  Rng rng2(3);
  auto trained = r.build(h, {prep.node_features(), prep.config_features()}, rng2);
  trained->train();
  auto part_batch = [&](int64_t k) {
    Batch b = make_batch({&segs[size_t(k)]}, {configs});
    b.ids = {g0.file.id()}, b.part = {k}, b.parts = {4};
    return b.prepared(trained->needs());
  };
  ag::NoGrad ng;
  const Tensor fresh1 = trained->forward(part_batch(1)).value().clone();
  trained->eval();
  const Tensor alone1 = trained->forward(make_batch({&segs[1]}, {configs}).prepared(trained->needs())).value();
  const Tensor alone2 = trained->forward(make_batch({&segs[2]}, {configs}).prepared(trained->needs())).value();
  trained->train();
  const Tensor second = trained->forward(part_batch(2)).value();
  for (int k = 0; k < 4; ++k) {
    CHECK(fresh1.f32()[k] == doctest::Approx(alone1.f32()[k]).epsilon(1e-6));
    CHECK(second.f32()[k] == doctest::Approx(alone2.f32()[k] + alone1.f32()[k]).epsilon(1e-5));
  }
  // With p = 0.5: 2.5 times the fresh score, plus segment 1's score or not, per config.
  h.values["stale-dropout"] = "0.5";
  Rng rng3(3);
  auto half = r.build(h, {prep.node_features(), prep.config_features()}, rng3);
  half->forward(part_batch(1));
  int kept = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    Batch b = part_batch(2);
    b.noise_seed = seed;
    const Tensor p = half->forward(b).value();
    for (int k = 0; k < 4; ++k) {
      const double rest = p.f32()[k] - 2.5 * alone2.f32()[k];
      const bool with = std::fabs(rest - alone1.f32()[k]) < 1e-4 * (1 + std::fabs(alone1.f32()[k]));
      CHECK((with || std::fabs(rest) < 1e-4 * (1 + std::fabs(alone2.f32()[k]))));
      kept += with;
    }
  }
  CHECK(kept > 4);  // of 32 draws of p = 0.5
  CHECK(kept < 28);
  // The table travels with the checkpoint: saved, loaded into a fresh model, saved again, the same.
  std::vector<std::pair<std::string, Tensor>> state, again;
  half->save_state(state);
  std::map<std::string, Tensor> arrays(state.begin(), state.end());
  Rng rng4(3);
  auto loaded = r.build(h, {prep.node_features(), prep.config_features()}, rng4);
  loaded->load_state(arrays, "test");
  loaded->save_state(again);
  REQUIRE(again.size() == state.size());
  for (size_t i = 0; i < state.size(); ++i) CHECK(same_bits({{"a", state[i].second}}, {{"a", again[i].second}}));
  CHECK(state[1].second.numel() == 1);  // one graph
  CHECK(state[2].second.numel() >= 8 * 4);  // its configs up to 7, 4 segments each
}

TEST_CASE("train: edge dropout drops each edge with its probability, both directions, the same for a seed") {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const ModelGraph g0 = prepare_graph(files[0], prep), g1 = prepare_graph(files[1], prep);
  const Batch whole = make_batch({&g0, &g1}, {{0, 1}, {0, 1}});
  const int64_t E = whole.edges.size(0);
  REQUIRE(E > 200);
  auto dropped = [&](double p, uint64_t seed) {
    Batch b = make_batch({&g0, &g1}, {{0, 1}, {0, 1}});
    b.drop_edges(p, seed);
    return b;
  };
  const Batch none = dropped(0, 1), half = dropped(0.5, 1), again = dropped(0.5, 1), other = dropped(0.5, 2);
  CHECK(none.edges.to_vector<int64_t>() == whole.edges.to_vector<int64_t>());
  CHECK(none.graph.num_edges == whole.graph.num_edges);
  // About half kept (binomial sd sqrt(E/4)); the same seed the same edges, another seed others.
  CHECK(std::abs(double(half.edges.size(0)) - 0.5 * double(E)) < 4 * std::sqrt(0.25 * double(E)));
  CHECK(half.edges.to_vector<int64_t>() == again.edges.to_vector<int64_t>());
  CHECK(half.edges.to_vector<int64_t>() != other.edges.to_vector<int64_t>());
  // Every kept edge is one of the batch's, and the graph carries it both ways and nothing else.
  std::set<std::pair<int64_t, int64_t>> all;
  for (int64_t i = 0; i < E; ++i) all.insert({whole.edges.i64()[2 * i], whole.edges.i64()[2 * i + 1]});
  for (int64_t i = 0; i < half.edges.size(0); ++i)
    CHECK(all.count({half.edges.i64()[2 * i], half.edges.i64()[2 * i + 1]}) == 1);
  CHECK(half.graph.num_edges == 2 * half.edges.size(0));
  // Graphs already built from the old edges would go stale: refused.
  Batch built = make_batch({&g0, &g1}, {{0, 1}, {0, 1}}).prepared({.gcn = true});
  CHECK_THROWS_WITH_AS(built.drop_edges(0.5, 1), doctest::Contains("not prepared yet"), Error);
  CHECK_THROWS_WITH_AS(built.drop_edges(1.0, 1), doctest::Contains("[0, 1)"), Error);
}

TEST_CASE("train: a config-shared dropout mask drops the same nodes and channels in every config") {
  const int64_t N = 60, C = 4, F = 8;
  const double p = 0.25;
  Batch b;
  b.noise_seed = 11;
  Tensor xv = Tensor::empty(Shape{N, C * F}, DType::F32);
  for (int64_t i = 0; i < xv.numel(); ++i) xv.f32()[i] = 0.5f + 0.1f * float(i % 7);  // none zero
  const ag::Var x(xv, true);
  auto mask_of = [&](const ag::Var& y) {  // y / x per element
    const Tensor yv = y.value(), xv = x.value();
    std::vector<double> m(size_t(N * C * F));
    for (int64_t i = 0; i < N * C * F; ++i) m[size_t(i)] = double(yv.f32()[i]) / double(xv.f32()[i]);
    return m;
  };
  const ag::Var y = config_shared_dropout(b, x, C, p, true, 1);
  const std::vector<double> m = mask_of(y);
  int64_t dropped = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double first = m[size_t(n * C * F + f)];
      CHECK((std::abs(first) < 1e-6 || std::abs(first - 1 / (1 - p)) < 1e-5));
      dropped += std::abs(first) < 1e-6 ? 1 : 0;
      for (int64_t c = 1; c < C; ++c) CHECK(std::abs(m[size_t(n * C * F + c * F + f)] - first) < 1e-5);
    }
  // About p of the N*F (node, channel) pairs dropped (binomial sd sqrt(N F p (1 - p))).
  CHECK(std::abs(double(dropped) - p * double(N * F)) < 4 * std::sqrt(double(N * F) * p * (1 - p)));
  // The gradient passes where the mask keeps, scaled as the forward.
  ag::backward(ag::sum(y));
  const Tensor dx = x.grad().to(Device::cpu());
  for (int64_t i = 0; i < N * C * F; ++i) CHECK(std::abs(double(dx.f32()[i]) - m[size_t(i)]) < 1e-5);
  // The batch's seed and the site's salt draw the mask; evaluation and p = 0 leave x alone.
  ag::NoGrad no_tape;
  Batch other = b;
  other.noise_seed = 12;
  CHECK(mask_of(config_shared_dropout(b, x, C, p, true, 1)) == m);
  CHECK(mask_of(config_shared_dropout(b, x, C, p, true, 2)) != m);
  CHECK(mask_of(config_shared_dropout(other, x, C, p, true, 1)) != m);
  CHECK(config_shared_dropout(b, x, C, p, false, 1).value().data() == x.value().data());
  CHECK(config_shared_dropout(b, x, C, 0, true, 1).value().data() == x.value().data());
  CHECK_THROWS_WITH_AS(config_shared_dropout(b, x, 3, p, true, 1), doctest::Contains("not 3 configs"), Error);
}

TEST_CASE("train: batches share structure and hold the right targets, segments cut gradients outside them") {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const ModelGraph a = prepare_graph(files[0], prep), b = prepare_graph(files[1], prep);
  Rng rng(1);
  const Batch batch =
      make_batch({&a, &b}, {{1, 2}, {0, 3}}, 100, &rng).prepared({.consumers = true, .producers = true});
  CHECK(batch.nodes == a.num_nodes() + b.num_nodes());
  CHECK(batch.graph.num_edges == 2 * (a.edges.size(0) + b.edges.size(0)));
  CHECK(batch.target.f64()[0] == a.target[1]);
  CHECK(batch.target.f64()[3] == b.target[3]);
  // Configurable node k of graph b under config 3 carries its 18 features at columns [1*18, 2*18).
  const int64_t v = a.num_nodes() + b.config_nodes.i64()[0];
  CHECK(batch.node_config.f32()[v * 36 + 18 + 5] == b.config.f32()[(3 * b.config_nodes.numel() + 0) * 18 + 5]);
  // One contiguous segment of 100 nodes per graph.
  REQUIRE(batch.keep_grad.defined());
  int64_t kept = 0;
  for (int64_t i = 0; i < batch.nodes; ++i) kept += batch.keep_grad.u8()[i];
  CHECK(kept == 200);
  // With a segment as large as every graph, nothing is cut.
  CHECK_FALSE(make_batch({&a}, {{0, 1}}, a.num_nodes(), &rng).keep_grad.defined());
  // consumers(): row v lists the nodes u of the rows [u, v] of its own graph's edges, in batch numbering.
  const Graph& users = batch.consumers();
  CHECK(users.num_edges == a.edges.size(0) + b.edges.size(0));
  std::multiset<std::pair<int64_t, int64_t>> want, got;
  for (const ModelGraph* m : {&a, &b})
    for (int64_t i = 0; i < m->edges.size(0); ++i) {
      const int64_t off = m == &a ? 0 : a.num_nodes();
      want.insert({off + m->edges.i64()[2 * i + 1], off + m->edges.i64()[2 * i]});  // (row v, neighbour u)
    }
  for (int64_t v = 0; v < batch.nodes; ++v)
    for (int32_t p = users.csr_indptr.i32()[v]; p < users.csr_indptr.i32()[v + 1]; ++p)
      got.insert({v, int64_t(users.csr_indices.i32()[p])});
  CHECK(got == want);
  // producers(): the other way, row u lists the nodes v of the rows [u, v].
  const Graph& operands = batch.producers();
  std::multiset<std::pair<int64_t, int64_t>> reversed, ops;
  for (const auto& [v, u] : want) reversed.insert({u, v});
  for (int64_t u = 0; u < batch.nodes; ++u)
    for (int32_t p = operands.csr_indptr.i32()[u]; p < operands.csr_indptr.i32()[u + 1]; ++p)
      ops.insert({u, int64_t(operands.csr_indices.i32()[p])});
  CHECK(ops == reversed);
  // What the batch was not prepared with, it refuses, naming what the model must ask for.
  CHECK_THROWS_WITH_AS(batch.gcn(), doctest::Contains("needs() must ask for gcn"), Error);
  CHECK_THROWS_WITH_AS(batch.consumers_looped(), doctest::Contains("ask for consumers_looped"), Error);
  CHECK_THROWS_WITH_AS(batch.share_plan(2), doctest::Contains("ask for share_plan"), Error);
  const Batch planned = make_batch({&a, &b}, {{1, 2}, {0, 3}}).prepared({.share_plan = 2});
  CHECK(planned.share_plan(2).steps() == 2);
  CHECK_THROWS_WITH_AS(planned.share_plan(3), doctest::Contains("prepared for 2 layers, asked for 3"), Error);
  CHECK_THROWS_WITH_AS(planned.gcn(), doctest::Contains("ask for gcn"), Error);  // (the plan's graph is not kept)
}

TEST_CASE("train: cross-config attention weighs each node and channel by a softmax over the configs") {
  // x [R = 2, C = 3 configs x D = 2]: y = [x | x * softmax_c(beta x)] per config, [R, C*4].
  const int64_t R = 2, C = 3, D = 2;
  std::vector<float> v = {0.5f, -1.0f, 2.0f, 0.25f, -0.5f, 1.5f, 3.0f, 0.0f, -2.0f, 1.0f, 0.75f, -0.25f};
  Tensor x = Tensor::empty({R, C * D}, DType::F32);
  std::copy(v.begin(), v.end(), x.f32());
  CrossConfigAttention cross(1.5);
  const Tensor y = cross.forward(ag::Var(x), C).value();
  REQUIRE(y.size(0) == R);
  REQUIRE(y.size(1) == C * 2 * D);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) {
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += std::exp(1.5 * v[size_t(r * C * D + c * D + d)]);
      for (int64_t c = 0; c < C; ++c) {
        const double xv = v[size_t(r * C * D + c * D + d)];
        CHECK(y.f32()[r * C * 2 * D + c * 2 * D + d] == doctest::Approx(xv));
        CHECK(y.f32()[r * C * 2 * D + c * 2 * D + D + d] == doctest::Approx(xv * std::exp(1.5 * xv) / z).epsilon(1e-5));
      }
    }
  // More configs than rows: the softmax still spans the C configs of the one row.
  const Tensor one = cross.forward(ag::Var(Tensor::full(Shape{1, 4}, 0.5, DType::F32)), 4).value();
  for (int64_t c = 0; c < 4; ++c) CHECK(one.f32()[c * 2 + 1] == doctest::Approx(0.5 * 0.25));
}

TEST_CASE("train: the SE block gates each (node, config) row by its own squeeze, at either precision") {
  // 128 channels squeezed to 16 (the model's width with --cross-attn on): one op on an AVX-512 host, the
  // composed ops elsewhere; either way x * sigmoid(relu(x W1 + b1) W2 + b2) over the [N*C, 128] rows
  Rng rng(5);
  ChannelAttention se(128, 8, rng);
  const int64_t N = 37, C = 5, D = 128;
  const std::vector<float> xv = testing::random_values<float>(size_t(N * C * D), 81);
  const ag::Var x(Tensor::from_vector(xv, Shape{N, C * D}));
  std::vector<ag::Var> p;  // squeeze.weight, squeeze.bias, excite.weight, excite.bias
  for (const auto& np : se.parameters()) p.push_back(np.var);
  REQUIRE(p.size() == 4);
  const testing::PrecisionRestored f32(GemmPrecision::kF32);
  const std::vector<float> y = se.forward(x, C).value().to_vector<float>();
  const ag::Var rows = ag::reshape(x, N * C, D);
  const std::vector<float> want = ag::squeeze_excite_composed(rows, p[0], p[1], p[2], p[3]).value().to_vector<float>();
  REQUIRE(y.size() == want.size());
  for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0));
  // under bf16 products the one op's products are bf16 (on AMX tiles, or VDPBF16PS where the bf16 GEMM runs
  // there): they round as the composed ops' bf16 products do
  if (squeeze_excite_vectorised(D, 16) && gemm_bf16_supported()) {
    const testing::PrecisionRestored bf16(GemmPrecision::kBf16);
    CHECK((squeeze_excite_amx(D) || squeeze_excite_dpbf16(D)));
    const std::vector<float> yb = se.forward(x, C).value().to_vector<float>();
    CHECK(yb != y);
    const std::vector<float> wb = ag::squeeze_excite_composed(rows, p[0], p[1], p[2], p[3]).value().to_vector<float>();
    for (size_t i = 0; i < yb.size(); ++i) CHECK(yb[i] == doctest::Approx(wb[i]).epsilon(1e-4).scale(1.0));
  }
}

TEST_CASE("train: the 6th place tile GAT attends per config and head over each node's consumers and itself") {
  // C = 2 configs x H = 2 heads of D = 3 on a generated kernel, against a scalar GAT in f64 per config:
  // z = x W, s = leaky_relu(<a_src_h, z_u> + <a_dst_h, z_v>, 0.2) over u in v's row of the looped
  // consumers graph, y_v = sum softmax(s) z_u + b.
  const auto files = kind_files(dataset(), "tile", "train");
  const Preprocessing prep =
      fit_preprocessing(files, false, FeatureTransform::kStandardize, FeatureTransform::kStandardize, -1);
  const ModelGraph mg = prepare_graph(files[0], prep);
  const Batch b = make_batch({&mg}, {{0, 1}}).prepared({.consumers = true, .consumers_looped = true});
  const int64_t N = b.nodes, C = 2, H = 2, D = 3, in = 4;
  const Graph& g = b.consumers_looped();
  CHECK(g.num_edges == b.consumers().num_edges + N);  // generated kernels have no self-loops of their own
  Rng rng(11);
  ConsumerGat gat(in, H, D, rng);
  Tensor x = Tensor::empty({N, C * in}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(rng.uniform() * 2 - 1);
  const Tensor y = gat.forward(b, ag::Var(x), C).value();
  REQUIRE(y.size(0) == N);
  REQUIRE(y.size(1) == C * H * D);
  std::map<std::string, Tensor> p;
  for (const nn::NamedParam& np : gat.parameters()) p[np.name] = np.var.value();
  const float *W = p.at("weight").f32(), *as = p.at("att_src").f32(), *ad = p.at("att_dst").f32(),
              *bias = p.at("bias").f32();
  const int32_t *rp = g.csr_indptr.i32(), *col = g.csr_indices.i32();
  for (int64_t c = 0; c < C; ++c) {
    std::vector<double> z(size_t(N * H * D), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < H * D; ++o)
        for (int64_t k = 0; k < in; ++k)
          z[size_t(n * H * D + o)] += double(x.f32()[n * C * in + c * in + k]) * W[k * H * D + o];
    auto score = [&](int64_t n, const float* a, int64_t h) {
      double t = 0;
      for (int64_t d = 0; d < D; ++d) t += z[size_t(n * H * D + h * D + d)] * a[h * D + d];
      return t;
    };
    for (int64_t v = 0; v < N; ++v)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> s;
        for (int32_t q = rp[v]; q < rp[v + 1]; ++q) {
          const double e = score(col[q], as, h) + score(v, ad, h);
          s.push_back(e > 0 ? e : 0.2 * e);
        }
        const double top = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - top));
        for (int64_t d = 0; d < D; ++d) {
          double want = bias[h * D + d];
          for (int32_t q = rp[v]; q < rp[v + 1]; ++q)
            want += s[size_t(q - rp[v])] / sum * z[size_t(col[q] * H * D + h * D + d)];
          CHECK(y.f32()[v * C * H * D + c * H * D + h * D + d] == doctest::Approx(want).epsilon(1e-4));
        }
      }
  }
}

TEST_CASE("train: a node's own layout columns become categories, re-padded past its rank") {
  Tensor f = Tensor::zeros({3, 140}, DType::F32);
  float* a = f.f32();
  a[21] = 4, a[22] = 8, a[134] = 1, a[135] = 0;  // rank 2, minor-to-major {1, 0}
  a[140 + 21] = 2, a[140 + 22] = 3, a[140 + 23] = 5, a[140 + 134] = 2, a[140 + 135] = 7.5f, a[140 + 136] = 0;  // rank 3
  // node 2: a scalar (rank 0): every column is padding
  const Tensor c = layout_dim_categories(f);
  REQUIRE(c.size(1) == kNodeLayoutDims);
  const std::vector<int32_t> want = {2, 1, 0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(std::vector<int32_t>(c.i32(), c.i32() + c.numel()) == want);
  CHECK_THROWS_WITH_AS(layout_dim_categories(Tensor::zeros({3, 24}, DType::F32)), doctest::Contains("[N, 140]"), Error);
}

TEST_CASE("train: the violation ratio counts configurable nodes whose largest dimension is not minor-most") {
  Tensor f = Tensor::zeros({4, 140}, DType::F32);
  float* a = f.f32();
  a[21] = 4, a[22] = 8, a[134] = 0, a[135] = 1;  // node 0: dims {4, 8}, own layout minor-most 0 (not 1)
  a[140 + 21] = 6, a[140 + 22] = 6, a[140 + 134] = 1;  // node 1: a tie, either dimension is the largest
  a[280 + 21] = 9, a[280 + 134] = 0;  // node 2: rank 1, never a violation
  // node 3: a scalar (rank 0), not configurable
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  Tensor cf = Tensor::full(Shape{3, 3, 18}, -1.0, DType::F32);  // config 0: the compiler's layouts
  cf.f32()[(1 * 3 + 0) * 18] = 1;  // config 1: node 0 minor-most 1 (its largest)
  cf.f32()[(2 * 3 + 0) * 18] = 0, cf.f32()[(2 * 3 + 1) * 18] = 0;  // config 2: node 0 on 0; node 1 either way
  // The ratios are layout-attn-violation's own input (a GraphFeature its file defines).
  const GraphFeature& violation = recipe_feature("layout-attn-violation", "violation");
  CHECK(violation.rows == GraphFeature::Rows::kPerConfig);
  TpuGraph raw;
  raw.layout = true, raw.node_feat = f, raw.node_config_ids = ids, raw.node_config_feat = cf;
  const Tensor v = violation.compute(raw);
  REQUIRE(v.numel() == 3);
  CHECK(v.f32()[0] == doctest::Approx(1.0 / 3));  // node 0's own layout puts the 4 minor-most
  CHECK(v.f32()[1] == 0.f);
  CHECK(v.f32()[2] == doctest::Approx(1.0 / 3));
  raw.node_config_feat = Tensor::zeros({3, 2, 18}, DType::F32);
  CHECK_THROWS_WITH_AS(violation.compute(raw), doctest::Contains("[C, 3, 18]"), Error);
  // A graph prepared with it carries one ratio per config, in [0, 1], and batches hand them out per
  // (graph, config); one prepared without it has none, and a batch of such graphs names it.
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const ModelGraph g = prepare_graph(files[0], prep, false, {&violation});
  const Tensor& gv = g.feature(violation);
  REQUIRE(gv.numel() == g.num_configs());
  for (int64_t c = 0; c < g.num_configs(); ++c) CHECK((gv.f32()[c] >= 0 && gv.f32()[c] <= 1));
  const Batch b = make_batch({&g, &g}, {{2, 0}, {1, 2}});
  const Tensor& bv = b.feature(violation);
  REQUIRE(bv.shape() == Shape{4, 1});
  CHECK(bv.f32()[0] == gv.f32()[2]);
  CHECK(bv.f32()[3] == gv.f32()[2]);
  const ModelGraph bare = prepare_graph(files[0], prep);
  CHECK(bare.features.values.empty());
  CHECK_THROWS_WITH_AS(bare.feature(violation), doctest::Contains("no feature 'violation'"), Error);
  const Batch nb = make_batch({&bare}, {{0, 1}});
  CHECK_THROWS_WITH_AS(nb.prepared({.features = {&violation}}), doctest::Contains("no 'violation'"), Error);
}

TEST_CASE("train: sample_nodes keeps every configurable node and the edges among the kept nodes") {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  ModelGraph g = prepare_graph(files[0], prep);
  const int64_t F = g.x.size(1), K = g.config_nodes.numel(), k = K + 20;
  g.x = g.x.clone();
  for (int64_t v = 0; v < g.num_nodes(); ++v) g.x.f32()[v * F] = float(v);  // each row names its node
  REQUIRE(g.num_nodes() > k);
  Rng rng(7), again(7);
  const ModelGraph s = sample_nodes(g, k, rng);
  CHECK(s.num_nodes() == k);
  const ModelGraph s2 = sample_nodes(g, k, again);  // the generator decides
  CHECK(std::memcmp(s.x.data(), s2.x.data(), size_t(s.x.nbytes())) == 0);
  CHECK(s.num_configs() == g.num_configs());
  CHECK(s.target == g.target);
  // Kept nodes in their order, each row and opcode its source node's; then the edges.
  std::vector<int64_t> src;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t v = int64_t(s.x.f32()[i * F]);
    CHECK((src.empty() || v > src.back()));
    CHECK(std::memcmp(g.x.f32() + v * F, s.x.f32() + i * F, size_t(F) * 4) == 0);
    CHECK(s.opcode.i32()[i] == g.opcode.i32()[v]);
    src.push_back(v);
  }
  for (int64_t j = 0; j < K; ++j) CHECK(src[size_t(s.config_nodes.i64()[j])] == g.config_nodes.i64()[j]);
  std::set<std::pair<int64_t, int64_t>> want, got;
  for (int64_t e = 0; e < g.edges.size(0); ++e) want.emplace(g.edges.i64()[2 * e], g.edges.i64()[2 * e + 1]);
  for (int64_t e = 0; e < s.edges.size(0); ++e) {
    const auto edge = std::pair{src[size_t(s.edges.i64()[2 * e])], src[size_t(s.edges.i64()[2 * e + 1])]};
    CHECK(want.count(edge) == 1);
    got.insert(edge);
  }
  int64_t among = 0;  // every edge between kept nodes survives
  std::set<int64_t> kept(src.begin(), src.end());
  for (const auto& [u, v] : want) among += kept.count(u) && kept.count(v);
  CHECK(int64_t(got.size()) == among);
  CHECK(sample_nodes(g, g.num_nodes(), rng).num_nodes() == g.num_nodes());
}

TEST_CASE("train: producer features scale the output shape into [0, 1] and keep the element type") {
  Tensor f = Tensor::zeros({2, 140}, DType::F32);
  f.f32()[21] = 8, f.f32()[22] = 128, f.f32()[27] = 136, f.f32()[28] = 1024, f.f32()[2 + 11] = 1;  // f32 [8, 128]
  f.f32()[140 + 28] = 1e30f;  // past the bound: clamped
  // dnnperf-anee's own input (a GraphFeature its file defines), per node.
  const GraphFeature& producer = recipe_feature("dnnperf-anee", "producer");
  CHECK(producer.rows == GraphFeature::Rows::kPerNode);
  TpuGraph raw;
  raw.node_feat = f;
  const Tensor p = producer.compute(raw);
  const int64_t P = 27;
  REQUIRE(p.shape() == Shape{2, P});
  CHECK(p.f32()[0] == doctest::Approx(std::log1p(8.0) / 24));
  CHECK(p.f32()[7] == doctest::Approx(std::log1p(1024.0) / 24));
  CHECK(p.f32()[8 + 11] == 1.f);
  CHECK(p.f32()[P + 7] == 1.f);
  raw.node_feat = Tensor::zeros({2, 20}, DType::F32);
  CHECK_THROWS_WITH_AS(producer.compute(raw), doctest::Contains("[N, 140]"), Error);
}

TEST_CASE("train: layout-tgraph compares the configs of a batch only with --cross-attn on") {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kStandardize, FeatureTransform::kNone, 1);
  const ModelGraph g = prepare_graph(files[0], prep, false, {&kNodeLayout});
  REQUIRE(g.num_configs() >= 4);
  for (const char* cross : {"on", "off"}) {
    CAPTURE(cross);
    const Recipe& r = find_recipe("layout-tgraph");
    HParams h = r.defaults();
    h.values["hidden"] = "16", h.values["cross-attn"] = cross;
    Rng rng(7);
    auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
    model->eval();
    ag::NoGrad ng;
    // Config 0 scored beside 1 and 2, then beside 3 and 2: only the cross-config attention lets the
    // neighbours change its score.
    const float a = model->forward(make_batch({&g}, {{0, 1, 2}}).prepared(model->needs())).value().f32()[0];
    const float b = model->forward(make_batch({&g}, {{0, 3, 2}}).prepared(model->needs())).value().f32()[0];
    if (std::string(cross) == "on") CHECK(std::fabs(a - b) > 1e-6);
    else CHECK(a == doctest::Approx(b).epsilon(1e-6));
  }
  // An odd width cannot hold the attention's two halves.
  const Recipe& r = find_recipe("layout-tgraph");
  HParams h = r.defaults();
  h.values["hidden"] = "15";
  Rng rng(7);
  CHECK_THROWS_WITH_AS(r.build(h, {prep.node_features(), prep.config_features()}, rng),
                       doctest::Contains("--hidden: must be even"), Error);
}

TEST_CASE("train: layout-tgraph --sage-order product-first gives aggregate-first's scores and gradients") {
  // Each SAGE block narrows 2 x 16 -> 8 with the attention on, so product-first takes ag::sage_combine; the two
  // orders are one function summed in another order: equal within rounding, scores and every gradient.
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kStandardize, FeatureTransform::kNone, 1);
  const ModelGraph g = prepare_graph(files[0], prep, false, {&kNodeLayout});
  REQUIRE(g.num_configs() >= 4);
  struct Out {
    std::vector<float> scores;
    std::vector<std::vector<float>> grads;
  };
  auto run = [&](const char* order) {
    const Recipe& r = find_recipe("layout-tgraph");
    HParams h = r.defaults();
    h.values["hidden"] = "16", h.values["sage-order"] = order;
    Rng rng(7);
    auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
    model->eval();  // no dropout; gradients still flow
    const ag::Var y = model->forward(make_batch({&g}, {{0, 1, 2, 3}}).prepared(model->needs()));
    const Tensor w = Tensor::from_vector(testing::random_values<float>(size_t(y.value().numel()), 5), y.shape());
    ag::backward(ag::sum(ag::mul(y, ag::Var(w))));
    Out o{y.value().to_vector<float>(), {}};
    for (const nn::NamedParam& p : model->parameters()) {
      CAPTURE(p.name);
      REQUIRE(p.var.has_grad());
      o.grads.push_back(p.var.grad().to_vector<float>());
    }
    return o;
  };
  const Out a = run("aggregate-first"), p = run("product-first");
  GNN_CHECK_CLOSE(p.scores, a.scores, 1e-5, 1e-4);
  REQUIRE(p.grads.size() == a.grads.size());
  CHECK((p.scores != a.scores || p.grads != a.grads));  // the other order did run (its sums round otherwise)
  for (size_t i = 0; i < a.grads.size(); ++i) {
    CAPTURE(i);
    double scale = 1e-3;  // the gradient's largest value sets its tolerance
    for (float v : a.grads[i]) scale = std::max(scale, double(std::fabs(v)));
    GNN_CHECK_CLOSE(p.grads[i], a.grads[i], 1e-4 * scale, 1e-3);
  }
}

TEST_CASE("train: layout-sage-5th is the 5th place's GNN, SAGE over consumers and operands, recomputed by hand") {
  const Recipe& r = find_recipe("layout-sage-5th");
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const ModelGraph g = prepare_graph(files[0], prep, false, {&kNodeLayout});
  HParams h = r.defaults();
  h.values["hidden"] = "6", h.values["op-embed"] = "3", h.values["layers"] = "2";
  REQUIRE(check_hparams(r.hparams, h, r.name).empty());
  Rng rng(11);
  auto model = r.build(h, {prep.node_features(), prep.config_features()}, rng);
  model->eval();
  ag::NoGrad ng;
  const Batch b = make_batch({&g}, {{1, 4, 0}}).prepared(model->needs());
  const Tensor got = model->forward(b).value();
  REQUIRE(got.numel() == 3);

  std::map<std::string, Tensor> w;
  for (const nn::NamedParam& p : model->parameters()) w[p.name] = p.var.value();
  REQUIRE(w.size() == 1 + 2 + 2 * 2 * 3 + 2);  // embedding, pre_linear, 2 x 2 SAGEs (lin_l weight + bias, lin_r), head
  const int64_t N = b.nodes, F = b.x.size(1), C = 3, D = kLayoutConfigFeatures, H = 6;
  // y = x W + b (W [in, out]) on double rows.
  auto dense = [&](const std::string& name, const std::vector<double>& x, bool bias) {
    const Tensor& W = w.at(name + ".weight");
    const int64_t in = W.size(0), out = W.size(1);
    REQUIRE(int64_t(x.size()) == in);
    std::vector<double> y(size_t(out), 0);
    for (int64_t o = 0; o < out; ++o) {
      if (bias) y[size_t(o)] = w.at(name + ".bias").f32()[o];
      for (int64_t i = 0; i < in; ++i) y[size_t(o)] += x[size_t(i)] * W.f32()[i * out + o];
    }
    return y;
  };
  std::set<int64_t> configurable;
  for (int64_t k = 0; k < b.config_nodes.numel(); ++k) configurable.insert(b.config_nodes.i32()[k]);
  REQUIRE(!configurable.empty());
  REQUIRE(int64_t(configurable.size()) < N);  // both kinds of rows are exercised
  const int64_t* e = b.edges.i64();  // [u, v]: u consumes v
  // Its defaults read the original's inputs: the element-wise unary opcodes on abs's row (1), and every
  // 0 of a node's own layout as -1.
  const std::set<int32_t> unary = {15, 30, 91, 37, 38, 40, 49, 50, 51, 107, 53, 60, 118, 80, 94, 81, 103, 90, 120, 96};
  for (int64_t c = 0; c < C; ++c) {
    std::vector<std::vector<double>> x(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
      const int32_t op = unary.count(b.opcode.i32()[n]) ? 1 : b.opcode.i32()[n];
      const float* emb = w.at("opcode_embed.weight").f32() + op * 3;
      std::vector<double> in(emb, emb + 3);  // [opcode embedding | node features | 18 layout values]
      in.insert(in.end(), b.x.f32() + n * F, b.x.f32() + (n + 1) * F);
      for (int64_t j = 0; j < D; ++j) {
        const double own = double(b.feature(kNodeLayout).i32()[n * kNodeLayoutDims + j % 6] - 1);
        in.push_back(configurable.count(n) ? b.node_config.f32()[n * C * D + c * D + j] : (own == 0 ? -1 : own));
      }
      x[size_t(n)] = dense("pre_linear", in, true);
      for (double& v : x[size_t(n)]) v = std::max(v, 0.0);
    }
    for (int l = 0; l < 2; ++l) {
      std::vector<std::vector<double>> next(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> consumers(size_t(H), 0), operands(size_t(H), 0);
        int64_t nc = 0, np = 0;
        for (int64_t i = 0; i < b.edges.size(0); ++i) {
          const int64_t u = e[2 * i], v = e[2 * i + 1];
          if (v == n) nc += 1;
          if (u == n) np += 1;
          for (int64_t k = 0; k < H; ++k) {
            if (v == n) consumers[size_t(k)] += x[size_t(u)][size_t(k)];
            if (u == n) operands[size_t(k)] += x[size_t(v)][size_t(k)];
          }
        }
        for (int64_t k = 0; k < H; ++k) {
          consumers[size_t(k)] /= double(std::max<int64_t>(nc, 1));
          operands[size_t(k)] /= double(std::max<int64_t>(np, 1));
        }
        auto lin = [l](std::string conv, const char* side) {  // "convs.0.lin_l" (append: GCC 12's -Wrestrict)
          return conv.append(".").append(std::to_string(l)).append(".").append(side);
        };
        std::vector<double> a = dense(lin("convs", "lin_l"), consumers, true),
                            ar = dense(lin("convs", "lin_r"), x[size_t(n)], false),
                            p = dense(lin("rev_convs", "lin_l"), operands, true),
                            pr = dense(lin("rev_convs", "lin_r"), x[size_t(n)], false);
        for (size_t k = 0; k < a.size(); ++k) next[size_t(n)].push_back(std::max(a[k] + ar[k], 0.0));
        for (size_t k = 0; k < p.size(); ++k) next[size_t(n)].push_back(std::max(p[k] + pr[k], 0.0));
      }
      x = next;
    }
    std::vector<double> pooled(size_t(H), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < H; ++k) pooled[size_t(k)] += x[size_t(n)][size_t(k)];
    CHECK(got.f32()[c] == doctest::Approx(dense("head", pooled, true)[0]).epsilon(1e-4));
  }
  // Each direction has its weights: an odd --hidden has no even split.
  h.values["hidden"] = "7";
  CHECK_THROWS_WITH(r.build(h, {prep.node_features(), prep.config_features()}, rng),
                    doctest::Contains("--hidden: must be even"));
}
