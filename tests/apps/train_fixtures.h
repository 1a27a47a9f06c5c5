// What the training tests share (train_fixtures.cpp): the small generated dataset, metrics.jsonl without
// its timings, and the exactness checks of config sharing and segment training, host and GPU alike.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "apps/train/recipe.h"

namespace train_fixtures {
using namespace gnn;
using namespace gnn::train;

// A small tile and layout dataset in the official tree, written once per test binary run.
const std::string& dataset();
// The recipe-only inputs a recipe's model reads at its defaults with `flags` (its needs().features), and
// the one named `name` among them.
std::vector<const GraphFeature*> recipe_features(const std::string& recipe,
                                                 const std::map<std::string, std::string>& flags = {});
const GraphFeature& recipe_feature(const std::string& recipe, const std::string& name);
// metrics.jsonl lines without the timing and host memory fields.
std::vector<std::string> metric_lines(const std::string& path);

// The loss (ListMLE over each graph's configs, plus a weighted sum so every output matters) and every
// parameter's gradient of one forward and backward pass.
struct Pass {
  std::vector<float> pred;
  double loss = 0;
  std::map<std::string, Tensor> grads;
};
Pass pass(const RankModel& model_in, const Batch& b);
void check_same_pass(const Pass& a, const Pass& b, double tol = 1e-5);
// A config-shared recipe's plain and shared paths (--share off / on) on `device`, for each variant of
// its flags: the same loss, predictions and gradients.
void check_config_sharing(Device device, const std::string& recipe,
                          const std::vector<std::map<std::string, std::string>>& variants, double tol = 1e-5);
// A recipe's segment training through the segment's rows against the masked whole batch (segment_pass.h);
// returns the rows path's tensor bytes over the masked path's.
double check_segment_rows(Device device, const std::string& recipe, const std::map<std::string, std::string>& flags);

}  // namespace train_fixtures
