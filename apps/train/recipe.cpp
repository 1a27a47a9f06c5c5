#include "apps/train/recipe.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "base/parse.h"
#include "io/json.h"

namespace gnn::train {

const std::string& HParams::str(const std::string& name) const {
  auto it = values.find(name);
  GNN_CHECK(it != values.end(), "hyper-parameter '", name, "' is not set (not one of this recipe's flags)");
  return it->second;
}

double HParams::num(const std::string& name) const {
  const std::string& s = str(name);
  double v = 0;
  GNN_CHECK(parse_finite(s, &v), "--", name, ": expected a number, got '", s, "'");
  return v;
}

int64_t HParams::integer(const std::string& name) const {
  const std::string& s = str(name);
  int64_t v = 0;
  GNN_CHECK(parse_int64(s, &v), "--", name, ": expected an integer, got '", s, "'");
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

HParamSpec number_hp(std::string name, std::string def, double min, double max, std::string help, bool min_open) {
  HParamSpec s{std::move(name), std::move(def), std::move(help)};
  s.type = HParamSpec::Type::kNumber, s.min = min, s.max = max, s.min_open = min_open;
  return s;
}

HParamSpec integer_hp(std::string name, std::string def, int64_t min, int64_t max, std::string help) {
  HParamSpec s{std::move(name), std::move(def), std::move(help)};
  s.type = HParamSpec::Type::kInteger, s.min = double(min), s.max = double(max);
  return s;
}

HParamSpec choice_hp(std::string name, std::string def, std::string choices, std::string help) {
  HParamSpec s{std::move(name), std::move(def), std::move(help)};
  s.type = HParamSpec::Type::kChoice, s.choices = std::move(choices);
  return s;
}

std::string HParamSpec::valid() const {
  if (type == Type::kChoice) return "one of " + choices;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.15g", v);
    return std::string(buf);
  };
  const std::string what = (zero_ok ? "0 or " : "") + std::string(type == Type::kInteger ? "an integer" : "a number");
  const bool low = min > -1e300, high = max < 9e18;  // INT64_MAX and HUGE_VAL mean unbounded
  if (low && high) return what + " in " + (min_open ? "(" : "[") + num(min) + ", " + num(max) + "]";
  if (low) return what + (min_open ? " > " : " >= ") + num(min);
  if (high) return what + " <= " + num(max);
  return type == Type::kInteger ? what : "a finite number";
}

bool same_hparam_value(const HParamSpec& s, const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (s.type == HParamSpec::Type::kInteger) {
    int64_t x = 0, y = 0;
    return parse_int64(a, &x) && parse_int64(b, &y) && x == y;
  }
  double x = 0, y = 0;
  return s.type == HParamSpec::Type::kNumber && parse_finite(a, &x) && parse_finite(b, &y) && x == y;
}

std::vector<std::string> choice_values(const std::string& choices) {
  std::vector<std::string> v;
  for (size_t at = 0; at <= choices.size();) {
    const size_t bar = std::min(choices.find('|', at), choices.size());
    v.push_back(choices.substr(at, bar - at));
    at = bar + 1;
  }
  return v;
}

namespace {
bool is_choice(const HParamSpec& s, const std::string& value) {
  const std::vector<std::string> v = choice_values(s.choices);
  return std::find(v.begin(), v.end(), value) != v.end();
}
}  // namespace

std::string check_hparams(const std::vector<HParamSpec>& specs, const HParams& h, const std::string& recipe) {
  for (const auto& [name, value] : h.values) {
    const HParamSpec* it = find_spec(specs, name);
    if (!it)
      return "--" + name + ": not a hyper-parameter of " + recipe + " (gnn train --help lists each recipe's)";
    const HParamSpec& s = *it;
    bool ok = false;
    if (s.type == HParamSpec::Type::kChoice) {
      ok = is_choice(s, value);
      if (!ok) {  // a value other recipes take (--node-transform trainable: the 6th place's) says which
        std::string others;
        const Recipe* self = lookup_recipe(recipe);
        for (const Recipe& r : recipes())
          if (const HParamSpec* o = find_spec(r.hparams, name);
              o && o->type == s.type && is_choice(*o, value) && (!self || r.kind == self->kind))
            others += (others.empty() ? "" : ", ") + r.name;
        if (!others.empty())
          return "--" + name + ": " + recipe + " takes " + s.choices + ", got '" + value + "' (a value of " + others +
                 ")";
      }
    } else if (s.type == HParamSpec::Type::kInteger) {
      int64_t v = 0;
      ok = parse_int64(value, &v) && ((s.zero_ok && v == 0) || (double(v) >= s.min && double(v) <= s.max));
    } else {
      double v = 0;
      ok = parse_finite(value, &v) && ((s.zero_ok && v == 0) || ((s.min_open ? v > s.min : v >= s.min) && v <= s.max));
    }
    if (!ok) return "--" + name + ": expected " + s.valid() + ", got '" + value + "'";
  }
  return "";
}

namespace {

TrainHParams::Loss parse_loss(const std::string& loss) {
  using Loss = TrainHParams::Loss;
  if (loss == "listmle") return Loss::kListMle;
  if (loss == "hinge") return Loss::kHinge;
  if (loss == "logistic") return Loss::kLogistic;
  if (loss == "mse") return Loss::kMse;
  if (loss == "mape") return Loss::kMape;
  GNN_FAIL("--loss: unknown loss '", loss, "' (listmle, hinge, logistic, mse, mape)");
}

// How often and on how many configs to validate change no step: a resumed run may take new values.
HParamSpec validation_hp(HParamSpec s) {
  s.resume_change = "validation follows the new value from here";
  return s;
}

// Kendall tau needs two configs: 0 (every config) or at least 2.
HParamSpec val_configs_hp() {
  HParamSpec s = integer_hp("val-configs", "0", 2, INT64_MAX,
                            "validation scores each valid graph on at most this many configs, the same random "
                            "subset every time (0: all; an --eval-indices subset comes first); gnn eval scores "
                            "them all");
  s.zero_ok = true;
  return validation_hp(s);
}

// The training hyper-parameters every recipe has, in the order `gnn train --help` lists them.
HParamTable<TrainHParams> train_table(bool layout) {
  using T = TrainHParams;
  constexpr double kInf = HUGE_VAL;  // no upper bound: any finite number
  constexpr int64_t kMany = INT64_MAX;  // no upper bound
  HParamTable<T> t;
  t.add(&T::lr, number_hp("lr", "0.001", 0, kInf, "Adam learning rate", /*min_open=*/true))
      .add(&T::weight_decay, number_hp("weight-decay", "0", 0, kInf, "AdamW decoupled weight decay"))
      .add(&T::schedule,
           choice_hp("schedule", "constant", "constant|cosine|multistep",
                     "learning-rate schedule: constant | cosine (to 0 over the run, after --warmup) | multistep "
                     "(times 1/sqrt(10) at 60, 70, 80 and 90% of the run's steps, the 2nd place's)"),
           nn::parse_schedule)
      .add(&T::warmup, integer_hp("warmup", "0", 0, kMany, "linear warm-up steps"))
      .add(&T::clip, number_hp("clip", "0", 0, kInf, "clip the gradient's l2 norm to this (0: no clipping)"))
      .add(&T::batch_graphs, integer_hp("batch-graphs", "8", 1, 1 << 20, "graphs per optimiser step"))
      .add(&T::configs,
           integer_hp("configs", "16", 2, 1 << 20,
                      "configs sampled per graph and step (fewer when a graph has fewer, unless --draw with)"))
      .add(&T::graph_repeats,
           integer_hp("graph-repeats", "1", 1, 1 << 16,
                      "an epoch lists every training graph this many times, in random order, so a step may hold "
                      "a graph more than once, each copy with its own configs (the 2nd place's oversampling)"))
      .add(&T::dedup,
           choice_hp("dedup", "off", "off|on",
                     "train on one config per distinct config (the fastest of its copies); eval and predict keep all"),
           "on")
      .add(&T::draw_with_replacement,
           choice_hp("draw", "without", "without|with",
                     "a step's configs of each graph drawn without replacement (at most the graph's configs) | with "
                     "(--configs draws, a config possibly more than once, as the 2nd place's data.py draws: a "
                     "repeated config adds no pair to a pairwise loss and counts twice in ListMLE, and the "
                     "configs/s and state/configs count draws)"),
           "with")
      .add(&T::swa, integer_hp("swa", "0", 0, kMany,
                               "stochastic weight averaging of the last K epochs' weights: RUN/swa.npz, scored on "
                               "valid each epoch (0: off; gnn eval/predict --checkpoint swa)"))
      .add(&T::patience, integer_hp("patience", "0", 0, kMany,
                                    "stop after this many validations without a better score (every epoch validates "
                                    "unless --val-every; 0: never; needs a valid split)"))
      .add(&T::val_every,
           validation_hp(integer_hp("val-every", "0", 0, kMany,
                                    "validate only at the end of an epoch that reaches a multiple of this many steps, "
                                    "and after the last (0: every epoch); with a few large graphs an epoch is a step "
                                    "or two")))
      .add(&T::val_configs, val_configs_hp())
      .add(&T::accumulate,
           integer_hp("accumulate", "1", 1, 1 << 20,
                      "micro-batches per step: the step's graphs go through forward and backward in this many groups "
                      "and their gradients add up (the same step, up to rounding, in less memory)"))
      .add(&T::loss,
           choice_hp("loss", "listmle", "listmle|hinge|logistic|mse|mape",
                     "listmle | hinge | logistic (ranking losses over the configs of each graph) | mse | mape "
                     "(regressions of the prediction as log runtime; eval then reports the mean relative error)"),
           parse_loss)
      .add(&T::temperature, number_hp("temperature", "1", 0, kInf, "ListMLE temperature", /*min_open=*/true))
      .add(&T::listmle_slowest_first,
           choice_hp("listmle-order", "fastest", "fastest|slowest",
                     "the order whose likelihood ListMLE maximises: fastest config first (utilities -score) | "
                     "slowest first (utilities +score, allRank's listMLE with the runtime as relevance, as the 6th "
                     "place's tile model trained)"),
           "slowest")
      .add(&T::margin, number_hp("margin", "0.1", 0, kInf, "pairwise hinge margin"))
      .add(&T::mse_weight,
           number_hp("mse-weight", "0", 0, kInf, "weight of an added MSE term between the prediction and log(target)"))
      .add(&T::batch_pairs_weight,
           number_hp("batch-pairs-weight", "0", 0, kInf,
                     "weight of an added term: the pairwise loss (--loss hinge or logistic) over every pair of a "
                     "step's configs, graphs mixed, beside the loss within each graph (the 5th place's second half; "
                     "one process, no --accumulate; graphs with fewer configs than --configs form micro-batches of "
                     "their own, whose pairs with the rest it leaves out, and says so)"))
      .add(&T::edge_dropout, number_hp("edge-dropout", "0", 0, 0.95,
                                       "drop each edge of a training batch with this probability, per step"))
      .add(&T::sample_nodes,
           integer_hp("sample-nodes", "0", 0, kMany,
                      "train each step on a random induced subgraph of this many nodes per graph, every configurable "
                      "node kept (0: whole graphs); eval and predict take whole graphs"))
      .add(&T::node_transform,
           choice_hp("node-transform", "official", "official|log1p|standardize|none|5th",
                     "node features: official (drop constant, min-max) | log1p | standardize | none | 5th (the 5th "
                     "place's reader: fixed ranges, logs, dimension numbers one-hot)"),
           parse_feature_transform)
      .add(&T::eval_chunk, integer_hp("eval-chunk", layout ? "100" : "1000", 1, 1 << 20,
                                      "configs per forward pass when scoring every config of a graph (at least 3 "
                                      "where the configs interact: no config scored alone)"))
      .add(&T::tta, integer_hp("tta", "1", 1, 1000,
                               "eval and predict: each config's score averaged over this many passes, each over the "
                               "configs in a random order (for models whose configs interact in a batch); "
                               "validation in training takes one"))
      .add(&T::matmul_bf16,
           choice_hp(
               "matmul-precision", "f32", "f32|bf16",
               "the CPU's matrix products: f32 | bf16 (inputs rounded to bfloat16, products summed in f32: "
               "about twice the f32 rate on CPUs with AVX512-BF16, which it needs, more on AMX tiles where the CPU "
               "has them; the winners trained in "
               "bf16 or fp16 on GPUs). Eval and predict on the CPU compute as the run was trained; not with "
               "--device cuda (cuBLAS's products: GNN_TF32=1 for tensor cores)"),
           "bf16");
  if (layout) {
    t.add(&T::khops,
          integer_hp("khops", "-1", -1, kMany, "keep nodes within k hops of a configurable node (-1: every node)"))
        .add(&T::khops_direction,
             choice_hp("khops-direction", "both", "both|consumers",
                       "the edges a --khops hop follows: both directions, or from a node to its consumers"),
             parse_hop_direction)
        .add(&T::khops_edges,
             choice_hp("khops-edges", "all", "all|configurable",
                       "the edges a --khops region keeps: every edge between kept nodes, or only those with a "
                       "configurable end (the 1st place's pruning)"),
             parse_region_edges)
        .add(&T::mape_weight,
             number_hp("mape-weight", "0", 0, kInf,
                       "weight of an added MAPE term between the prediction read as seconds and the runtime in "
                       "seconds (the 2nd place's, beside its margin loss); with a ranking loss only"))
        .add(&T::segment, integer_hp("segment", "5000", 0, kMany,
                                     "segment training: gradients through a random contiguous range "
                                     "of this many nodes per graph (0: all)"));
  } else {
    t.add(&T::config_transform,
          choice_hp("config-transform", "official", "official|log1p|standardize|none",
                    "tile config features: official | log1p | standardize | none"),
          parse_feature_transform);
  }
  return t;
}

}  // namespace

TrainHParams TrainHParams::read(const HParams& h, bool layout) {
  static const HParamTable<TrainHParams> tile = train_table(false), layout_table = train_table(true);
  return (layout ? layout_table : tile).read(h);
}

std::vector<HParamSpec> concat_specs(std::vector<HParamSpec> a, const std::vector<HParamSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<HParamSpec> common_hparams(bool layout, const std::map<std::string, std::string>& defaults) {
  std::vector<HParamSpec> h = train_table(layout).specs();
  for (const auto& [name, value] : defaults) {
    HParamSpec* it = find_spec(h, name);
    GNN_CHECK(it, "common_hparams: no hyper-parameter '", name, "' to set a default for");
    it->default_value = value;
  }
  return h;
}

HParamSpec share_hp() {
  return choice_hp("share", "on", "on|off",
                   "config sharing: compute rows no config reaches once (on) or per config (off); same results "
                   "(layout-gst's dropout aside: see its recipe's header)");
}

HParamSpec dropout_mask_hp(const char* def) {
  return choice_hp("dropout-mask", def, "shared|config",
                   "shared: one dropout mask per node and channel for all the configs of a graph | config: a mask "
                   "per config");
}

HParamSpec op_max_norm_hp() {
  HParamSpec s = number_hp("op-max-norm", "0", 0, HUGE_VAL,
                           "the opcode embedding's max_norm, as torch.nn.Embedding's: each row a batch looks up is "
                           "first scaled in place to an l2 norm of at most this (the original's 1); 0: off",
                           true);
  s.zero_ok = true;
  return s;
}

HParamSpec segment_backward_hp() {
  return choice_hp("segment-backward", "rows", "rows|mask",
                   "with --segment: rows (the tape holds the segment and its neighbours alone) | mask (forward and "
                   "backward on every row, the gradient masked outside the segment); the same gradient");
}

// Every recipe, one line each, in the order `gnn models` lists them: X(name) is the function
// `Recipe name_recipe()` that a file of apps/train/recipes/ defines.
// (Not re-aligned by clang-format, so that a new recipe adds one line.)
// clang-format off
#define GNN_RECIPES(X) \
  X(tile_mlp) \
  X(tile_earlyjoin_sage) \
  X(tile_latejoin_sage) \
  X(tile_earlyjoin_resgcn) \
  X(tile_latejoin_resgcn) \
  X(tile_gat_6th) \
  X(layout_resmodel) \
  X(layout_mlp) \
  X(layout_sage_6th) \
  X(layout_gin_6th) \
  X(layout_sage_2nd) \
  X(layout_sage_5th) \
  X(layout_tgraph) \
  X(layout_seed_sage) \
  X(layout_gnn_selfattn) \
  X(layout_attn_violation) \
  X(dnnperf_anee) \
  X(layout_gst)
// clang-format on

#define GNN_DECLARE_RECIPE(name) Recipe name##_recipe();
GNN_RECIPES(GNN_DECLARE_RECIPE)
#undef GNN_DECLARE_RECIPE

const std::vector<Recipe>& recipes() {
#define GNN_LIST_RECIPE(name) name##_recipe(),
  static const std::vector<Recipe> all = {GNN_RECIPES(GNN_LIST_RECIPE)};
#undef GNN_LIST_RECIPE
  return all;
}

const Recipe* lookup_recipe(const std::string& name) {
  for (const Recipe& r : recipes())
    if (r.name == name) return &r;
  return nullptr;
}

const Recipe& find_recipe(const std::string& name) {
  if (const Recipe* r = lookup_recipe(name)) return *r;
  std::string names;
  for (const Recipe& r : recipes()) names += (names.empty() ? "" : ", ") + r.name;
  GNN_FAIL("--model: unknown recipe '", name, "' (recipes: ", names, ")");
}

}  // namespace gnn::train
