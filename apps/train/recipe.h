// Recipes: a model, its loss and its training hyper-parameters under one name (`gnn models` lists
// them). Each lives in one readable file (apps/train/recipe_<name>.cpp) and registers itself in
// recipes() (recipe.cpp). Defaults follow ../shared/TPUGRAPHS.md section 6.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/train/data.h"
#include "autograd/ops.h"
#include "nn/module.h"

namespace gnn::train {

// A model maps a batch to one score per (graph, config), [G*C, 1] graph-major; lower = faster.
class RankModel : public nn::Module {
 public:
  virtual ag::Var forward(const Batch& b) = 0;
};

// Hyper-parameters by flag name ("lr", "hidden"), as text: what `gnn train --NAME V` sets and what
// model.npz stores so eval and predict rebuild the same model.
class HParams {
 public:
  std::map<std::string, std::string> values;
  double num(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  const std::string& str(const std::string& name) const;
  std::string json() const;  // {"lr": "0.001", ...}
  static HParams from_json(const std::string& text, const std::string& what);
};

struct HParamSpec {
  std::string name, default_value, help;
};

struct ModelDims {
  int64_t node_features = 0, config_features = 0;
};

struct Recipe {
  std::string name;     // tile-earlyjoin-sage
  std::string kind;     // tile | layout
  std::string summary;  // one line: what it is and where it comes from
  std::vector<HParamSpec> hparams;  // the training ones (common_hparams) plus the model's own
  std::function<std::unique_ptr<RankModel>(const HParams&, const ModelDims&, Rng&)> build;
  HParams defaults() const;
};

// Training hyper-parameters every recipe has; the recipe passes its defaults.
std::vector<HParamSpec> common_hparams(bool layout, const std::string& loss, double temperature, double mse_weight,
                                       int64_t batch_graphs, int64_t configs, double lr);

const std::vector<Recipe>& recipes();
const Recipe& find_recipe(const std::string& name);  // gnn::Error listing the names when unknown

// Registration, one per recipe file.
Recipe tile_mlp_recipe();
Recipe tile_earlyjoin_sage_recipe();
Recipe tile_latejoin_sage_recipe();
Recipe tile_earlyjoin_resgcn_recipe();
Recipe tile_latejoin_resgcn_recipe();
Recipe layout_resmodel_recipe();
Recipe layout_mlp_recipe();

}  // namespace gnn::train
