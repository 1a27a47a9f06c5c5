#include "apps/train/recipe.h"

#include <cmath>
#include <cstdlib>

#include "io/json.h"
#include "runtime/error.h"

namespace gnn::train {

const std::string& HParams::str(const std::string& name) const {
  auto it = values.find(name);
  GNN_CHECK(it != values.end(), "hyper-parameter '", name, "' is not set (not one of this recipe's flags)");
  return it->second;
}

double HParams::num(const std::string& name) const {
  const std::string& s = str(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  GNN_CHECK(!s.empty() && end && *end == '\0' && std::isfinite(v), "--", name, ": expected a number, got '", s, "'");
  return v;
}

int64_t HParams::integer(const std::string& name) const {
  const std::string& s = str(name);
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  GNN_CHECK(!s.empty() && end && *end == '\0', "--", name, ": expected an integer, got '", s, "'");
  return v;
}

std::string HParams::json() const {
  Json j = Json::object();
  for (const auto& [k, v] : values) j.set(k, v);
  return j.dump();
}

HParams HParams::from_json(const std::string& text, const std::string& what) {
  const Json j = Json::parse(text, what);
  GNN_CHECK(j.type() == Json::Type::Object, what, ": expected an object of hyper-parameters");
  HParams h;
  for (const auto& [k, v] : j.items()) {
    GNN_CHECK(v.type() == Json::Type::String, what, ": hyper-parameter '", k, "' is not a string");
    h.values[k] = v.as_string();
  }
  return h;
}

HParams Recipe::defaults() const {
  HParams h;
  for (const HParamSpec& s : hparams) h.values[s.name] = s.default_value;
  return h;
}

std::vector<HParamSpec> common_hparams(bool layout, const std::string& loss, double temperature, double mse_weight,
                                       int64_t batch_graphs, int64_t configs, double lr) {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::vector<HParamSpec> h = {
      {"lr", num(lr), "Adam learning rate"},
      {"weight-decay", "0", "AdamW decoupled weight decay"},
      {"schedule", "constant", "learning-rate schedule: constant | cosine (to 0 over the run, after --warmup)"},
      {"warmup", "0", "linear warm-up steps"},
      {"clip", "0", "clip the gradient's l2 norm to this (0: no clipping)"},
      {"batch-graphs", std::to_string(batch_graphs), "graphs per optimiser step"},
      {"configs", std::to_string(configs), "configs sampled per graph and step (fewer when a graph has fewer)"},
      {"loss", loss, "listmle | hinge | logistic | mse (ranking losses over the configs of each graph)"},
      {"temperature", num(temperature), "ListMLE temperature"},
      {"margin", "0.1", "pairwise hinge margin"},
      {"mse-weight", num(mse_weight), "weight of an added MSE term between the prediction and log(target)"},
      {"node-transform", "official", "node features: official (drop constant, min-max) | log1p | standardize | none"},
      {"eval-chunk", layout ? "100" : "1000", "configs per forward pass when scoring every config of a graph"},
  };
  if (layout) {
    h.push_back({"khops", "-1", "keep nodes within k hops of a configurable node (-1: every node)"});
    h.push_back({"segment", "5000", "segment training: gradients through a random contiguous range of this many "
                                     "nodes per graph (0: all)"});
  } else {
    h.push_back({"config-transform", "official", "tile config features: official | log1p | standardize | none"});
  }
  return h;
}

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = {tile_mlp_recipe(),           tile_earlyjoin_sage_recipe(),
                                          tile_latejoin_sage_recipe(), tile_earlyjoin_resgcn_recipe(),
                                          tile_latejoin_resgcn_recipe(), layout_resmodel_recipe(),
                                          layout_mlp_recipe()};
  return all;
}

const Recipe& find_recipe(const std::string& name) {
  std::string names;
  for (const Recipe& r : recipes()) {
    if (r.name == name) return r;
    names += (names.empty() ? "" : ", ") + r.name;
  }
  GNN_FAIL("--model: unknown recipe '", name, "' (recipes: ", names, ")");
}

}  // namespace gnn::train
