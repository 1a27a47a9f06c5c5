#include <cmath>

#include "io/npz.h"
#include "io/preprocess.h"
#include "io/synth.h"
#include "testing.h"

using namespace gnn;

namespace {

// A hand-checkable layout graph: the chain 4 -> 3 -> 2 -> 1 -> 0 (row [u, v]: u consumes v, so
// rows are [1,0], [2,1], [3,2], [4,3]) plus 5 -> 0; node 2 is the configurable one.
TpuGraph chain() {
  TpuGraph g;
  g.path = "chain.npz", g.stem = "chain", g.layout = true;
  g.node_feat = Tensor::zeros({6, kNodeFeatures}, DType::F32);
  for (int v = 0; v < 6; ++v) g.node_feat.f32()[v * kNodeFeatures] = float(v);  // feature 0 = node id
  g.node_opcode = Tensor::from_vector<int32_t>({63, 2, 34, 2, 2, 63});
  g.edge_index = Tensor::from_vector<int64_t>({1, 0, 2, 1, 3, 2, 4, 3, 5, 0}, Shape{5, 2});
  g.node_config_ids = Tensor::from_vector<int64_t>({2});
  // 4 configs; 0 and 2 are identical, 1 and 3 are identical.
  g.node_config_feat = Tensor::full({4, 1, 18}, -1, DType::F32);
  g.node_config_feat.f32()[18] = 1, g.node_config_feat.f32()[3 * 18] = 1;
  g.node_splits = Tensor::from_vector<int64_t>({0, 3, 6}, Shape{1, 3});
  g.config_runtime = Tensor::from_vector<double>({50, 40, 30, 45});
  return g;
}

std::vector<float> column(const Tensor& t, int64_t j) {
  std::vector<float> out;
  for (int64_t r = 0; r < t.size(0); ++r) out.push_back(t.f32()[r * t.size(1) + j]);
  return out;
}

}  // namespace

TEST_CASE("feature transforms: fitted on train, applied to anything, saved and restored") {
  // columns: constant 7 | 0..3 | heavy-tailed
  const Tensor train = Tensor::from_vector<float>({7, 0, 1, 7, 1, 10, 7, 2, 100, 7, 3, 1000}, Shape{4, 3});
  const Tensor other = Tensor::from_vector<float>({5, 6, -1}, Shape{1, 3});
  ColumnStats stats;
  stats.add(train.slice(0, 2));
  stats.add(train.slice(2, 4));  // streaming over graphs
  CHECK(stats.rows() == 4);

  const ColumnTransform official(FeatureTransform::kOfficial, stats);
  CHECK(official.out_features() == 2);  // the constant column is dropped
  const Tensor y = official.apply(train);
  CHECK(column(y, 0) == std::vector<float>{0, 1.f / 3, 2.f / 3, 1});
  CHECK(official.apply(other).f32()[0] == doctest::Approx(2.0));  // train statistics, not other's
  CHECK(official.apply(other).f32()[1] == doctest::Approx(-2.0 / 999));

  const ColumnTransform log(FeatureTransform::kLog1p, stats);
  CHECK(log.out_features() == 3);
  CHECK(log.apply(other).f32()[2] == doctest::Approx(-std::log1p(1.0)));
  CHECK(log.apply(train).f32()[11] == doctest::Approx(std::log1p(1000.0)));

  const ColumnTransform standard(FeatureTransform::kStandardize, stats);
  const Tensor z = standard.apply(train);
  CHECK(column(z, 0) == std::vector<float>{0, 0, 0, 0});  // constant: 0
  double mean = 0, sq = 0;
  for (float v : column(z, 1)) mean += v, sq += double(v) * v;
  CHECK(mean == doctest::Approx(0).epsilon(1e-6));
  CHECK(sq / 4 == doctest::Approx(1));

  std::vector<std::pair<std::string, Tensor>> saved;
  official.save("node_transform.", saved);
  std::map<std::string, Tensor> arrays(saved.begin(), saved.end());
  const ColumnTransform back = ColumnTransform::load("node_transform.", arrays);
  CHECK(testing::same_bytes(back.apply(other), official.apply(other)));
  CHECK_THROWS_WITH_AS(official.apply(Tensor::zeros({2, 4}, DType::F32)), doctest::Contains("fitted on 3 columns"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_feature_transform("zscore"), doctest::Contains("unknown feature transform 'zscore'"),
                       Error);
  CHECK(ColumnTransform().apply(other).size(1) == 3);  // identity

  // trainable: the features pass unchanged; shift and scale hold the mean and the population std.
  const ColumnTransform trainable(FeatureTransform::kTrainable, stats);
  CHECK(parse_feature_transform("trainable") == FeatureTransform::kTrainable);
  CHECK(testing::same_bytes(trainable.apply(train), train));
  CHECK(trainable.shift() == std::vector<double>{7, 1.5, 277.75});
  CHECK(trainable.scale()[0] == 0);
  CHECK(trainable.scale()[1] == doctest::Approx(std::sqrt(1.25)));
  CHECK_THROWS_WITH_AS(trainable.apply(Tensor::zeros({2, 4}, DType::F32)), doctest::Contains("fitted on 3 columns"),
                       Error);
  saved.clear();
  trainable.save("t.", saved);
  arrays = std::map<std::string, Tensor>(saved.begin(), saved.end());
  const ColumnTransform tback = ColumnTransform::load("t.", arrays);
  CHECK(tback.kind() == FeatureTransform::kTrainable);
  CHECK(tback.shift() == trainable.shift());
  CHECK(tback.scale() == trainable.scale());
  arrays["t.keep"] = Tensor::from_vector<int32_t>({0, 2, 1});  // a damaged checkpoint: not the identity
  CHECK_THROWS_WITH_AS(ColumnTransform::load("t.", arrays), doctest::Contains("does not keep every column in order"),
                       Error);
}

TEST_CASE("feature transforms: the 5th place's reader, fixed ranges, logs and one-hot dimension numbers") {
  // Output order (io/preprocess.cpp): the 53 whole-node columns, plain ones first (0, 3, 6, 7, 10, 13, 15,
  // 18, 20, 30, ...: 18 of them) then logged (27, 28, ...); then six rows of 23, each nine per-dimension
  // values (the 36 plain ones 31-36, 45-50, ... first, then the logged 21-26, 37-42, 53-58) and the 14
  // dimension numbers 93-106 one-hot on the row's index.
  CHECK(parse_feature_transform("5th") == FeatureTransform::kFifthPlace);
  Tensor x = Tensor::zeros({2, kNodeFeatures}, DType::F32);
  auto at = [&](int64_t r, int64_t c) -> float& { return x.f32()[r * kNodeFeatures + c]; };
  at(0, 0) = 1;  // is_root, [0, 1]: onto [-1, 1]
  at(0, 30) = 7;  // parameter number, [0, 35]
  at(0, 28) = 1e6f, at(1, 28) = 1;  // dimensions product, logged, lo 1: log(x + 1 - 1)
  at(0, 67) = -2, at(1, 67) = -5;  // window padding high sum, logged, lo -2; -5 is below the table's range
  at(0, 31) = 5;  // dimensions_0, [0, 5]
  at(0, 21) = 127;  // shape dimension 0, logged, lo 0
  at(0, 93) = 3, at(1, 93) = 0;  // input batch dimension: 3, and 0 (never set)
  at(0, 106) = 2.7f;  // output feature dimension 2.7: the original's int cast reads 2
  ColumnStats stats;
  stats.add(x);
  const ColumnTransform t(FeatureTransform::kFifthPlace, stats);
  REQUIRE(t.out_features() == 191);
  const Tensor y = t.apply(x);
  auto out = [&](int64_t r, int64_t j) { return y.f32()[r * 191 + j]; };
  CHECK(out(0, 0) == 1.0f);
  CHECK(out(1, 0) == -1.0f);
  CHECK(out(0, 9) == doctest::Approx(7.0 / 35 * 2 - 1));
  CHECK(out(0, 19) == doctest::Approx(std::log(1e6)));
  CHECK(out(1, 19) == 0.0f);
  const int64_t pad_high = 18 + 9;  // col 67: the tenth logged whole-node column
  CHECK(out(0, pad_high) == 0.0f);
  CHECK(out(1, pad_high) == 0.0f);  // read as lo
  CHECK(out(0, 53) == 1.0f);  // dimensions_0 at its hi
  CHECK(out(1, 53) == -1.0f);
  CHECK(out(0, 53 + 4 * 23) == doctest::Approx(std::log(128.0)));  // the logged dims start row 4
  for (int64_t d = 0; d < 6; ++d) {
    CAPTURE(d);
    CHECK(out(0, 53 + 23 * d + 9) == (d == 3 ? 1.0f : 0.0f));
    CHECK(out(1, 53 + 23 * d + 9) == 0.0f);
    CHECK(out(0, 53 + 23 * d + 9 + 13) == (d == 2 ? 1.0f : 0.0f));
  }
  double ones = 0;
  for (int64_t d = 0; d < 6; ++d)
    for (int64_t j = 0; j < 14; ++j) ones += out(0, 53 + 23 * d + 9 + j) + out(1, 53 + 23 * d + 9 + j);
  CHECK(ones == 2);

  std::vector<std::pair<std::string, Tensor>> saved;
  t.save("n.", saved);
  std::map<std::string, Tensor> arrays(saved.begin(), saved.end());
  CHECK(testing::same_bytes(ColumnTransform::load("n.", arrays).apply(x), y));
  arrays["n.shift"].f64()[0] = 0.25;  // a damaged checkpoint
  CHECK_THROWS_WITH_AS(ColumnTransform::load("n.", arrays), doctest::Contains("not its columns and ranges"), Error);

  at(1, 95) = 6;
  CHECK_THROWS_WITH_AS(t.apply(x), doctest::Contains("column 95 (a convolution dimension number) is 6 in row 1"),
                       Error);
  ColumnStats narrow;
  narrow.add(Tensor::zeros({2, 139}, DType::F32));
  CHECK_THROWS_WITH_AS(ColumnTransform(FeatureTransform::kFifthPlace, narrow),
                       doctest::Contains("reads TpuGraphs' 140 node feature columns; these rows have 139"), Error);
}

TEST_CASE("pruning: k hops around the configurable nodes, both directions") {
  const TpuGraph g = chain();
  std::vector<int64_t> kept;
  const TpuGraph p0 = prune_to_configurable(g, 0, &kept);
  CHECK(kept == std::vector<int64_t>{2});
  CHECK(p0.num_edges() == 0);
  CHECK(p0.node_config_ids.i64()[0] == 0);

  const TpuGraph p1 = prune_to_configurable(g, 1, &kept);
  CHECK(kept == std::vector<int64_t>{1, 2, 3});  // its input 1 and its consumer 3
  CHECK(p1.edge_index.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2, 1});
  CHECK(p1.node_config_ids.i64()[0] == 1);
  CHECK(p1.node_feat.f32()[2 * kNodeFeatures] == 3);  // features follow their nodes
  CHECK(p1.node_opcode.to_vector<int32_t>() == std::vector<int32_t>{2, 34, 2});
  CHECK(p1.node_splits.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 3});

  const TpuGraph p2 = prune_to_configurable(g, 2, &kept);
  CHECK(kept == std::vector<int64_t>{0, 1, 2, 3, 4});  // 5 is 3 hops away (5 -> 0 -> 1 -> 2)
  CHECK(prune_to_configurable(g, 3).num_nodes() == 6);
  CHECK(prune_to_configurable(g, -1).num_nodes() == 6);
}

TEST_CASE("pruning: k hops downstream only, from a node to its consumers") {
  const TpuGraph g = chain();  // 2 is configurable; 3 consumes 2, 4 consumes 3; 1 and 0 are upstream
  std::vector<int64_t> kept;
  const TpuGraph p1 = prune_to_configurable(g, 1, &kept, HopDirection::kConsumers);
  CHECK(kept == std::vector<int64_t>{2, 3});
  CHECK(p1.edge_index.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(p1.node_config_ids.i64()[0] == 0);
  prune_to_configurable(g, 5, &kept, HopDirection::kConsumers);
  CHECK(kept == std::vector<int64_t>{2, 3, 4});  // nothing consumes 4
  CHECK(parse_hop_direction("consumers") == HopDirection::kConsumers);
  CHECK(parse_hop_direction("both") == HopDirection::kBoth);
  CHECK_THROWS_AS(parse_hop_direction("up"), Error);
}

TEST_CASE("pruning: the region's edges, all or only those with a configurable end") {
  const TpuGraph g = chain();  // 2 is configurable; edges 1->0, 2->1, 3->2, 4->3 (u consumes v), 5->0
  std::vector<int64_t> kept;
  const TpuGraph all = prune_to_configurable(g, 2, &kept, HopDirection::kBoth, RegionEdges::kAll);
  CHECK(kept == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(all.edge_index.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2, 1, 3, 2, 4, 3});
  const TpuGraph touching = prune_to_configurable(g, 2, &kept, HopDirection::kBoth, RegionEdges::kConfigurable);
  CHECK(kept == std::vector<int64_t>{0, 1, 2, 3, 4});  // the same nodes
  CHECK(touching.edge_index.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 3, 2});
  // One hop in this chain keeps nodes 1, 2, 3, and both their edges touch node 2. Not so in general: two
  // neighbours of a configurable node joined by an edge keep that edge only under kAll.
  CHECK(prune_to_configurable(g, 1, nullptr, HopDirection::kBoth, RegionEdges::kConfigurable).edge_index.to_vector<int64_t>() ==
        prune_to_configurable(g, 1).edge_index.to_vector<int64_t>());
  CHECK(parse_region_edges("configurable") == RegionEdges::kConfigurable);
  CHECK(parse_region_edges("all") == RegionEdges::kAll);
  CHECK_THROWS_WITH_AS(parse_region_edges("some"), doctest::Contains("unknown region edges 'some'"), Error);
}

TEST_CASE("duplicate configs: one per distinct row, the fastest") {
  const TpuGraph g = chain();
  CHECK(distinct_configs(g) == std::vector<int64_t>{1, 2});  // 30 < 50 for {0, 2}; 40 < 45 for {1, 3}
  const TpuGraph s = select_configs(g, {1, 2});
  CHECK(s.num_configs() == 2);
  CHECK(s.config_runtime.to_vector<double>() == std::vector<double>{40, 30});
  CHECK(s.node_config_feat.f32()[0] == 1);
}

TEST_CASE("preprocess: pruning, dedup, transform and CSR together, cached per graph") {
  TpuGraph g = chain();
  ColumnStats stats;
  stats.add(g.node_feat);
  PreprocessOptions o{ColumnTransform(FeatureTransform::kOfficial, stats), 1, true};
  const PreprocessedGraph p = preprocess(g, o);
  CHECK(p.original_node == std::vector<int64_t>{1, 2, 3});
  CHECK(p.original_config == std::vector<int64_t>{1, 2});
  CHECK(p.features.shape() == Shape{3, 1});  // only feature 0 varies on train
  CHECK(p.features.f32()[0] == doctest::Approx(0.2));  // node 1 of 0..5
  CHECK(p.csr.num_edges == 2);
  CHECK(p.csr.in_degree(1) == 1);  // node 2 (now 1) consumes node 1 (now 0): the message flows 0 -> 1
  CHECK(p.csr.in_degree(0) == 0);  // node 1 consumed node 0, which was pruned

  testing::TempDir tmp;
  save_npz(tmp.file("a.npz"), synth::make_graph(true, 200, 10, 1));
  PreprocessCache cache(PreprocessOptions{{}, 2, true}, uint64_t(1) << 30);
  auto first = cache.get(tmp.file("a.npz"));
  CHECK(cache.get(tmp.file("a.npz")) == first);
  CHECK(cache.builds() == 1);
  CHECK(first->graph.num_nodes() <= 201);
}
