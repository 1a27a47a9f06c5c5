// The training tests' shared fixtures (train_fixtures.h).
#include "train_fixtures.h"

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
#include "nn/loss.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;
using testing::last_line;
using namespace gnn::train;
using testing::checkpoint_weights;
using testing::run_gnn;
using testing::same_bits;
using testing::TempDir;
using testing::tile_and_layout;

namespace train_fixtures {

// A small tile and layout dataset in the official tree, written once per test binary run.
const std::string& dataset() {
  static TempDir dir;
  static const std::string root = tile_and_layout(dir.file("data"), {6, 0, 40, 3}, {3, 300, 24, 4});
  return root;
}

// metrics.jsonl lines without the timing and host memory fields.
std::vector<std::string> metric_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    Json k = Json::object();
    for (const auto& [key, v] : j.items())
      if (key.find("seconds") == std::string::npos && key != "configs_per_s" && key.rfind("host_", 0) != 0 &&
          key != "peak_tensor_mb")  // (timings and the process's memory: not the run's to repeat)
        k.set(key, v);
    out.push_back(k.dump());
  }
  return out;
}

Pass pass(const RankModel& model_in, const Batch& b) {
  RankModel& model = const_cast<RankModel&>(model_in);
  model.zero_grad();
  const ag::Var pred = model.forward(b);
  const ag::Var loss = ag::add(nn::list_mle_loss(pred, b.target, b.group_ptr, 10.0), ag::scale(ag::sum(pred), 0.1));
  ag::backward(loss);
  Pass p;
  p.pred = pred.value().to_vector<float>();
  p.loss = loss.value().item();
  for (const nn::NamedParam& np : model.parameters())
    p.grads[np.name] = np.var.has_grad() ? np.var.grad().to(Device::cpu()) : Tensor();
  return p;
}

void check_same_pass(const Pass& a, const Pass& b, double tol) {
  CHECK(a.loss == doctest::Approx(b.loss).epsilon(tol));
  REQUIRE(a.pred.size() == b.pred.size());
  for (size_t i = 0; i < a.pred.size(); ++i) CHECK(a.pred[i] == doctest::Approx(b.pred[i]).epsilon(tol));
  REQUIRE(a.grads.size() == b.grads.size());
  for (const auto& [name, ga] : a.grads) {
    CAPTURE(name);
    const Tensor& gb = b.grads.at(name);
    REQUIRE(ga.defined() == gb.defined());
    if (!ga.defined()) continue;
    double scale = 0, diff = 0;  // relative to the gradient's largest entry
    for (int64_t i = 0; i < ga.numel(); ++i)
      scale = std::max(scale, double(std::fabs(ga.f32()[i]))),
      diff = std::max(diff, double(std::fabs(ga.f32()[i] - gb.f32()[i])));
    CHECK(diff <= tol * std::max(scale, 1e-6));
  }
}

std::vector<const GraphFeature*> recipe_features(const std::string& recipe,
                                                 const std::map<std::string, std::string>& flags) {
  const Recipe& r = find_recipe(recipe);
  HParams h = r.defaults();
  for (const auto& [name, value] : flags) h.values[name] = value;
  Rng rng(1);
  const bool layout = r.kind == "layout";
  return r.build(h, {kNodeFeatures, layout ? kLayoutConfigFeatures : kTileConfigFeatures}, rng)->needs().features;
}

const GraphFeature& recipe_feature(const std::string& recipe, const std::string& name) {
  for (const GraphFeature* f : recipe_features(recipe))
    if (f->name == name) return *f;
  FAIL(recipe, " declares no feature ", name);
  throw std::logic_error("unreachable");
}

// A recipe with --share on and off on `device`, on the same batches, for each variant of its
// hyper-parameters: the same loss, predictions and gradients (relative tol, 1e-5 unless told).
void check_config_sharing(Device device, const std::string& recipe,
                          const std::vector<std::map<std::string, std::string>>& variants, double tol) {
  const auto files = kind_files(dataset(), "layout", "train");
  REQUIRE(files.size() >= 2);
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  std::vector<const GraphFeature*> features;  // what any variant reads
  for (const auto& variant : variants)
    for (const GraphFeature* f : recipe_features(recipe, variant))
      if (std::find(features.begin(), features.end(), f) == features.end()) features.push_back(f);
  const ModelGraph g0 = prepare_graph(files[0], prep, false, features),
                   g1 = prepare_graph(files[1], prep, false, features);
  // Two edge cases: no edges (only the configurable nodes depend on the config), and every node one
  // hop from a configurable node (every row depends on it after one layer).
  ModelGraph isolated = g0, star = g1;
  isolated.edges = Tensor::zeros({0, 2}, DType::I64);
  {
    const int64_t n = star.num_nodes(), hub = star.config_nodes.i64()[0];
    std::vector<int64_t> e = star.edges.to_vector<int64_t>();
    for (int64_t v = 0; v < n; ++v)
      if (v != hub) e.push_back(v), e.push_back(hub);
    star.edges = Tensor::from_vector(e, Shape{int64_t(e.size() / 2), 2});
  }
  const Recipe& r = find_recipe(recipe);
  CAPTURE(recipe);
  for (const auto& variant : variants) {
    HParams on = r.defaults(), off = r.defaults();
    std::string settings;
    for (const auto& [name, value] : variant)
      on.values[name] = off.values[name] = value, settings += name + "=" + value + " ";
    CAPTURE(settings);
    off.values["share"] = "off";
    Rng r1(7), r2(7);
    auto shared = r.build(on, {prep.node_features(), prep.config_features()}, r1);
    auto plain = r.build(off, {prep.node_features(), prep.config_features()}, r2);
    nn::move_parameters(*shared, device);
    nn::move_parameters(*plain, device);
    struct Case {
      const char* what;
      std::vector<const ModelGraph*> graphs;
      int64_t configs, segment;
    };
    for (const Case& c : {Case{"two graphs, 16 configs", {&g0, &g1}, 16, 0}, Case{"one graph, 1 config", {&g0}, 1, 0},
                          Case{"segments of 90 nodes", {&g0, &g1}, 16, 90}, Case{"no edges", {&isolated, &g1}, 16, 0},
                          Case{"every node one hop away", {&star}, 16, 0}}) {
      const std::string what = c.what;
      CAPTURE(what);
      std::vector<std::vector<int64_t>> configs;
      for (size_t g = 0; g < c.graphs.size(); ++g) {
        configs.emplace_back();
        for (int64_t k = 0; k < c.configs; ++k)
          configs.back().push_back((k * 5 + int64_t(g)) % c.graphs[g]->num_configs());
      }
      Rng seg(3);
      const Batch b = make_batch(c.graphs, configs, c.segment, &seg).prepared(shared->needs()).to(device);
      REQUIRE(b.config_nodes.numel() > 0);
      check_same_pass(pass(*shared, b), pass(*plain, b), tol);
      if (recipe != "layout-resmodel") continue;
      const int64_t layers = std::stoll(variant.at("layers"));
      const nn::SharePlan& plan = b.share_plan(layers);
      if (what == "every node one hop away") CHECK(plan.dependent_share(1) == 1.0);
      if (what == "no edges") CHECK(plan.dependent_rows(layers) < b.nodes);
    }
  }
}

// A recipe's segment training through the segment's rows alone (two passes, segment_pass.h) against the
// masked whole batch, with `flags` (share on or off among them), on `device`: the same loss, predictions
// and gradients. Returns the tensor bytes the rows path holds after its forward over the masked path's.
double check_segment_rows(Device device, const std::string& recipe, const std::map<std::string, std::string>& flags) {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const std::vector<const GraphFeature*> features = recipe_features(recipe, flags);
  const ModelGraph g0 = prepare_graph(files[0], prep, false, features),
                   g1 = prepare_graph(files[1], prep, false, features),
                   g2 = prepare_graph(files[2], prep, false, features);
  ModelGraph small = node_range(g2, 0, 80);  // under the segment: every row of it trains
  const Recipe& r = find_recipe(recipe);
  HParams rows = r.defaults();
  for (const auto& [name, value] : flags) rows.values[name] = value;
  HParams mask = rows;
  mask.values["segment-backward"] = "mask";
  Rng r1(11), r2(11);
  auto a = r.build(rows, {prep.node_features(), prep.config_features()}, r1);
  auto m = r.build(mask, {prep.node_features(), prep.config_features()}, r2);
  nn::move_parameters(*a, device);
  nn::move_parameters(*m, device);
  std::vector<std::vector<int64_t>> configs(3);
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t k = 0; k < 16; ++k) configs[size_t(g)].push_back((k * 3 + g) % 24);
  Rng seg(4);
  const Batch b = make_batch({&g0, &small, &g1}, configs, 90, &seg).prepared(a->needs()).to(device);
  REQUIRE(b.keep_grad.defined());
  check_same_pass(pass(*a, b), pass(*m, b));
  // What each holds on the tape after its forward, over what was live before.
  auto held = [&](RankModel& model) {
    ag::clear_tape();
    const int64_t before = host_memory_stats().current_bytes;
    const ag::Var p = model.forward(b);
    const int64_t after = host_memory_stats().current_bytes;
    ag::clear_tape();
    return double(after - before);
  };
  CHECK(SegmentPass(b).view().nodes * 2 < b.nodes);  // 304 of 680 rows
  if (device.is_cuda()) {  // the untaped pass and the view add no wait for the device to the step
    auto waits = [&](RankModel& model) {
      const int64_t before = cuda_host_waits();
      model.forward(b);
      ag::clear_tape();
      return cuda_host_waits() - before;
    };
    CHECK(waits(*a) == waits(*m));
    return 0.0;
  }
  return held(*a) / held(*m);
}

}  // namespace train_fixtures
