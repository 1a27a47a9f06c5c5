// Recipes: a model, its loss and its training hyper-parameters under one name (`gnn models` lists
// them). Each lives in one readable file (apps/train/recipes/<name>.cpp) and is registered by one line
// of recipe.cpp's list. Defaults follow ../shared/TPUGRAPHS.md section 6.
#pragma once
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "apps/train/data.h"
#include "autograd/ops.h"
#include "base/error.h"
#include "nn/module.h"
#include "nn/optim.h"

namespace gnn::train {

// A model maps a batch to one score per (graph, config), [G*C, 1] graph-major; lower = faster.
class RankModel : public nn::Module {
 public:
  virtual ag::Var forward(const Batch& b) = 0;
  // What forward reads from a batch beyond its tensors (graphs, config-sharing plans): whoever makes a
  // batch for this model builds them once with Batch::prepared(needs()). None by default.
  virtual BatchNeeds needs() const { return {}; }
  // Whether a training forward may be captured as a CUDA graph and replayed (apps/train/step_graph.h):
  // it reads the batch only through its sizes, index arrays and float inputs, never through what
  // changes from step to step without changing those (config_ids, node_config_host(), noise_seed,
  // target), and draws nothing. False unless a recipe says so.
  virtual bool replayable() const { return false; }
  // What a resumed run needs beyond the parameters (layout-gst's table of segment scores): arrays under
  // "state/" in model.npz, written with every checkpoint and read back on --resume. None by default.
  virtual void save_state(std::vector<std::pair<std::string, Tensor>>& out) const { (void)out; }
  virtual void load_state(const std::map<std::string, Tensor>& arrays, const std::string& file) {
    (void)arrays, (void)file;
  }
};

// The part of a training graph a step trains on (Graph Segment Training: one segment per graph and step):
// nodes [begin, end), segment `index` of `count`.
struct GraphPart {
  int64_t index = 0, count = 1, begin = 0, end = 0;
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

// One hyper-parameter flag: its default, what it means and the values it accepts. A number is finite
// and in [min, max] (min excluded when min_open); an integer likewise; a choice is one of `choices`
// ("constant|cosine"). check_hparams applies these before a run creates anything on disk.
struct HParamSpec {
  enum class Type { kNumber, kInteger, kChoice };
  std::string name, default_value, help;
  Type type = Type::kNumber;
  double min = -HUGE_VAL, max = HUGE_VAL;  // unbounded: any finite number
  bool min_open = false;
  bool zero_ok = false;  // an integer or number that may also be 0 (off) below its range
  // Non-empty: a resumed run may take a new value (how often to validate, not what), and this says what
  // follows from it in the resume's note ("validation follows the new value from here").
  std::string resume_change;
  std::string choices;
  std::string valid() const;  // "a number > 0", "an integer in [1, 4096]", "one of constant|cosine"
};
std::vector<std::string> choice_values(const std::string& choices);  // "a|b" -> {"a", "b"}
// The spec named `name` in `specs` (a vector of HParamSpec, const or not), or nullptr.
template <class Specs>
auto find_spec(Specs& specs, const std::string& name) -> decltype(&*specs.begin()) {
  for (auto& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}
// Whether two texts are the same value of the flag `s`: the same text, or numbers its own parser reads
// (an integer flag: integers) that are equal ("0.001" and "1e-3").
bool same_hparam_value(const HParamSpec& s, const std::string& a, const std::string& b);
HParamSpec number_hp(std::string name, std::string def, double min, double max, std::string help,
                     bool min_open = false);
HParamSpec integer_hp(std::string name, std::string def, int64_t min, int64_t max, std::string help);
HParamSpec choice_hp(std::string name, std::string def, std::string choices, std::string help);

// A struct of hyper-parameters P, described once: each row is a flag's spec (name, default, range, help)
// and the field of P it fills. specs() is what check_hparams, `gnn train --help`, model.npz and a resumed
// run's defaults work from; read() fills a P from checked HParams, so a model reads fields, never names.
// A row's field type must match its spec (an integer spec fills an int64_t, a number a double, a choice a
// string, a bool that is true for one of its values, or an enum through a parse function): a table that
// does not is refused when it is built.
//   struct Dims { int64_t hidden = 0; bool shared = false; };
//   HParamTable<Dims> t;
//   t.add(&Dims::hidden, integer_hp("hidden", "256", 2, 65536, "width"))
//       .add(&Dims::shared, dropout_mask_hp("shared"), "shared");
template <class P>
class HParamTable {
 public:
  HParamTable& add(int64_t P::*field, HParamSpec s) {
    return row(std::move(s), HParamSpec::Type::kInteger,
               [field](P& p, const HParams& h, const std::string& n) { p.*field = h.integer(n); });
  }
  HParamTable& add(double P::*field, HParamSpec s) {
    return row(std::move(s), HParamSpec::Type::kNumber,
               [field](P& p, const HParams& h, const std::string& n) { p.*field = h.num(n); });
  }
  HParamTable& add(std::string P::*field, HParamSpec s) {
    return row(std::move(s), HParamSpec::Type::kChoice,
               [field](P& p, const HParams& h, const std::string& n) { p.*field = h.str(n); });
  }
  // A choice as a bool: true when the value is `when` ("on", "shared", "early").
  HParamTable& add(bool P::*field, HParamSpec s, std::string when) {
    GNN_CHECK(("|" + s.choices + "|").find("|" + when + "|") != std::string::npos, "HParamTable: --", s.name,
              " has no value '", when, "'");
    return row(std::move(s), HParamSpec::Type::kChoice,
               [field, when](P& p, const HParams& h, const std::string& n) { p.*field = h.str(n) == when; });
  }
  // A choice read into an enum (or any type) by `parse`, which fails naming the flag on a value it lacks.
  template <class E>
  HParamTable& add(E P::*field, HParamSpec s, E (*parse)(const std::string&)) {
    return row(std::move(s), HParamSpec::Type::kChoice,
               [field, parse](P& p, const HParams& h, const std::string& n) { p.*field = parse(h.str(n)); });
  }

  // Every row of a base struct's table, for a P derived from B: a recipe that adds flags to another's.
  template <class B>
  HParamTable& extend(const HParamTable<B>& base) {
    static_assert(std::is_base_of_v<B, P>, "HParamTable::extend: P must derive from the base table's struct");
    for (size_t i = 0; i < base.specs_.size(); ++i) {
      specs_.push_back(base.specs_[i]);
      fill_.push_back([f = base.fill_[i]](P& p, const HParams& h, const std::string& n) { f(p, h, n); });
    }
    return *this;
  }

  const std::vector<HParamSpec>& specs() const { return specs_; }
  P read(const HParams& h) const {
    P p{};
    for (size_t i = 0; i < specs_.size(); ++i) fill_[i](p, h, specs_[i].name);
    return p;
  }

 private:
  template <class>
  friend class HParamTable;
  using Fill = std::function<void(P&, const HParams&, const std::string&)>;
  HParamTable& row(HParamSpec s, HParamSpec::Type type, Fill fill) {
    GNN_CHECK(s.type == type, "HParamTable: --", s.name, "'s spec and field are of different types");
    specs_.push_back(std::move(s)), fill_.push_back(std::move(fill));
    return *this;
  }
  std::vector<HParamSpec> specs_;
  std::vector<Fill> fill_;
};

// The specs of `a` followed by those of `b`: a recipe's common training flags and its model's own.
std::vector<HParamSpec> concat_specs(std::vector<HParamSpec> a, const std::vector<HParamSpec>& b);

// "" when every value of `h` parses and lies in its spec's range, else one line naming the flag:
// "--lr: expected a number > 0, got '-1'". Names in `h` without a spec are refused too.
std::string check_hparams(const std::vector<HParamSpec>& specs, const HParams& h, const std::string& recipe);

// The training hyper-parameters every recipe has (common_hparams), typed, from one HParamTable (recipe.cpp).
// Read once from the checked HParams (check_hparams first), so the trainer, eval and predict read fields,
// not names; a recipe's own model hyper-parameters are its own struct and table, read by its build function.
struct TrainHParams {
  enum class Loss { kListMle, kHinge, kLogistic, kMse, kMape };
  Loss loss = Loss::kListMle;
  double lr = 1e-3, weight_decay = 0, clip = 0;  // clip 0: none
  nn::LrSchedule::Kind schedule = nn::LrSchedule::Kind::kConstant;
  int64_t warmup = 0;
  double temperature = 1, margin = 0.1, mse_weight = 0;  // listmle, hinge, the added MSE term
  double mape_weight = 0;  // layout only: the added MAPE term on the prediction read as seconds
  double batch_pairs_weight = 0;  // the added ranking term over every pair of a step's configs, graphs mixed
  int64_t batch_graphs = 8, configs = 16, accumulate = 1, eval_chunk = 100, tta = 1;
  int64_t graph_repeats = 1;  // each training graph's entries in an epoch's list
  int64_t swa = 0, patience = 0;  // 0: off
  int64_t val_every = 0, val_configs = 0;  // 0: validate every epoch, on every config
  bool dedup = false;
  bool draw_with_replacement = false;  // --draw with: a slate's configs drawn with replacement
  bool listmle_slowest_first = false;  // --listmle-order slowest
  double edge_dropout = 0;
  int64_t sample_nodes = 0;  // 0: whole graphs
  FeatureTransform node_transform = FeatureTransform::kOfficial;
  FeatureTransform config_transform = FeatureTransform::kNone;  // tile only; kNone for layout
  int64_t khops = -1, segment = 0;  // layout only: -1 every node, 0 no segment
  HopDirection khops_direction = HopDirection::kBoth;
  RegionEdges khops_edges = RegionEdges::kAll;
  bool matmul_bf16 = false;  // --matmul-precision bf16: the CPU's products from bf16 inputs (kernels/gemm.h)

  // --loss mse | mape: the model predicts log runtimes (its output plus Preprocessing::log_offset).
  bool regression() const { return loss == Loss::kMse || loss == Loss::kMape; }
  static TrainHParams read(const HParams& h, bool layout);
};

struct ModelDims {
  int64_t node_features = 0, config_features = 0;
  // --node-transform / --config-transform trainable: each column's mean and std on the training graphs,
  // which the model's own standardisation (nn::Standardize) starts from; empty otherwise.
  std::vector<double> node_mean, node_std, config_mean, config_std;
};

struct Recipe {
  std::string name;  // tile-earlyjoin-sage
  std::string kind;  // tile | layout
  std::string summary;  // one line: what it is and where it comes from
  std::vector<HParamSpec> hparams;  // the training ones (common_hparams) plus the model's own
  // Whether a config's score depends on the configs scored beside it in a batch (a norm or an attention
  // across the config axis), given the hyper-parameters; graphs never affect each other.
  std::function<bool(const HParams&)> configs_interact = [](const HParams&) { return false; };
  // Why --tta is refused for a recipe whose configs do not interact, after the recipe's name.
  static constexpr const char* kTtaMoot = " scores each config alone (every pass gives the same scores)";
  // What the model never reads, so that the flags acting on it are refused rather than ignored: the graph's
  // edges (an MLP passes no messages: --edge-dropout, --khops-edges) and a segment's gradient cut (--segment).
  bool reads_edges = true, takes_segment = true;
  std::function<std::unique_ptr<RankModel>(const HParams&, const ModelDims&, Rng&)> build;
  // Set for a recipe that trains on parts of graphs: the part of an n-node training graph a step takes,
  // drawn from rng. The trainer then builds each training graph of a batch as that part alone (node_range)
  // and records which part it is (Batch::part, Batch::parts); evaluation still sees whole graphs.
  std::function<GraphPart(const HParams&, int64_t nodes, Rng&)> train_part;
  HParams defaults() const;
};

// Training hyper-parameters every recipe has, with the defaults a recipe overrides by name, and its model's:
//   r.hparams = concat_specs(common_hparams(true, {{"loss", "listmle"}}), params().specs());
std::vector<HParamSpec> common_hparams(bool layout, const std::map<std::string, std::string>& defaults = {});
// --share on|off (default on) for a recipe with a config-shared path (nn/config_share.h).
HParamSpec share_hp();
// --dropout-mask shared|config (default `def`) for a layout recipe whose dropout acts on config-batched
// rows: one mask per node and channel for every config of a graph, or one per config
// (config_shared_dropout in blocks.h says why the shared one suits ranking losses).
HParamSpec dropout_mask_hp(const char* def);
// --op-max-norm X (default 0, off) for a recipe whose original's opcode embedding has torch's max_norm:
// the looked-up rows renormalised in place to an l2 norm of at most X (nn::Embedding::max_norm).
HParamSpec op_max_norm_hp();
// --segment-backward rows|mask (default rows) for a recipe whose segment training can tape the
// segment's rows alone (apps/train/segment_pass.h).
HParamSpec segment_backward_hp();

// A recipe's build function for a model made from its Params (read from `table`), ModelDims and Rng&:
//   r.build = build_with<LayoutSage5th>(params());
template <class Model, class P>
auto build_with(const HParamTable<P>& table) {
  return [&table](const HParams& h, const ModelDims& d, Rng& rng) -> std::unique_ptr<RankModel> {
    return std::make_unique<Model>(table.read(h), d, rng);
  };
}

const std::vector<Recipe>& recipes();
const Recipe* lookup_recipe(const std::string& name);  // nullptr when unknown
const Recipe& find_recipe(const std::string& name);  // gnn::Error (--model) listing the names when unknown

}  // namespace gnn::train
