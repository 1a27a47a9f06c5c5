// Scoring rankings with the competition metrics (nn/metrics.h): a submission CSV read back, and the
// per-collection summary that `gnn score` and `gnn eval` print.
//
// Submission: header `ID,TopConfigs`; one row per graph `<collection>:<stem>,i1;i2;...` with config
// indices predicted fastest first: 5 for tile (the competition's rule), every config for layout.
#pragma once
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "io/tpugraphs.h"

namespace gnn {

// id -> configs as listed; `lines`, when given, gets each row's line number (for errors that name it).
std::map<std::string, std::vector<int64_t>> read_submission(const std::string& path,
                                                            std::map<std::string, int64_t>* lines = nullptr);

// The official config subsets of a folder of eval_indices JSON files (--eval-indices DIR: xla_default.json,
// nlp_random.json, ...), each file read when a graph of its collection first asks. configs(f, n): the
// configs to score a layout graph of n configs on (each checked < n, the file named); empty (every config)
// for a tile graph or no folder. A layout collection whose file the folder lacks, or a graph its file does
// not list, is refused, naming them: scoring every config where the user asked for the subsets would be a
// quiet mistake. check(files) reads the files those graphs need and finds each graph in its file, so a
// missing one stops a command before its work, and refuses a folder when none of the graphs is a layout
// graph (the flag would do nothing).
class EvalIndices {
 public:
  explicit EvalIndices(std::string dir) : dir_(std::move(dir)) {}
  void check(const std::vector<DatasetFile>& files);
  std::vector<int64_t> configs(const DatasetFile& f, int64_t n);

 private:
  const std::map<std::string, std::vector<int64_t>>* file_of(const DatasetFile& f);  // null: no subsets
  const std::vector<int64_t>* listed(const DatasetFile& f);  // f's subset; null: no subsets; unlisted: refused
  std::string path(const DatasetFile& f) const;
  std::string dir_;
  std::map<std::string, std::map<std::string, std::vector<int64_t>>> files_;  // "xla_default" -> stem -> configs
};

// One graph: its ranking (fastest first, a prefix of the configs for tile) against measured runtimes
// (tile: config_runtime / config_runtime_normalizers; layout: config_runtime).
struct GraphScore {
  std::string id;
  bool layout = false;
  double kendall_tau = 0, opa = 0;
  std::map<int64_t, double> slowdown;  // K -> slowdown@K (best of the top K / best - 1)
  // Mean relative error |exp(p) - y| / y of predictions read as log runtimes (a model trained with
  // --loss mse or mape); NaN when the predictions are scores only.
  double mre = std::numeric_limits<double>::quiet_NaN();
  // Predictions that were not finite (a diverged model's NaN or Inf; ranked last): gnn eval and training's
  // validation count them, and a validation with any does not pick best.npz.
  int64_t nonfinite = 0;
};
// The mean relative error of log-runtime predictions p against runtimes y (DNNPerf's MRE).
double mean_relative_error(const std::vector<double>& log_p, const std::vector<double>& y);
// ranking: config indices fastest first (each at most once; layout: all of them). eval_subset, when
// not empty, restricts the layout metrics to those configs (the official validation subsets). `where`
// names the ranking's source in errors about it (a submission's file and line; default the id).
GraphScore score_ranking(const std::string& id, bool layout, const std::vector<int64_t>& ranking,
                         const std::vector<double>& runtime, const std::vector<int64_t>& eval_subset = {},
                         const std::string& where = "");

// One graph from predicted scores p (lower = faster) and runtimes y over the same configs; slowdown@K
// counts at most the first `listed` configs of the predicted order (a tile submission lists 5).
GraphScore score_predictions(const std::string& id, bool layout, const std::vector<double>& p,
                             const std::vector<double>& y, int64_t listed);
// The positions of `configs` in the ranking gnn predict writes: fastest (lowest p) first, ties broken by
// config index, so eval scores exactly what a submission would. p[i] is the score of configs[i].
std::vector<int64_t> ranking_order(const std::vector<double>& p, const std::vector<int64_t>& configs);

// Predicted runtimes, as `gnn predict --runtimes` writes them: header `ID,Config,Runtime`, one row per
// (graph, config), the runtime a regression model predicts (trained with --loss mse or mape). Returns
// id -> config -> runtime; each runtime finite and > 0, each (id, config) once, or one error naming the
// file and line.
std::map<std::string, std::map<int64_t, double>> read_runtimes(const std::string& path);
// One graph from its predicted runtimes (every config of it, as read_runtimes returns them) against
// the measured ones y: the ranking a submission of them would list (fastest first, ties by config
// index; a tile kernel's first 5), scored as score_ranking does, and the mean relative error over the
// configs eval scores (eval_subset when not empty, else all). `file` names the CSV in errors.
GraphScore score_runtimes(const std::string& id, bool layout, const std::map<int64_t, double>& predicted,
                          const std::vector<double>& y, const std::vector<int64_t>& eval_subset,
                          const std::string& file);
// One line of JSON: id, kendall_tau and opa (layout), slowdown@K as 1 - slowdown.
std::string graph_score_json(const GraphScore& s);
// The mean over collections of each collection's mean score (tile 1 - slowdown@5, layout tau), each over
// the graphs where it is defined (a layout graph whose runtimes all tie has no tau); NaN when none is.
double mean_score(const std::vector<std::pair<std::string, GraphScore>>& per_collection);
// The measured runtimes of a file, as scored (reads only the runtime arrays).
std::vector<double> scored_runtimes(const DatasetFile& f);

// Means per collection, in the Kaggle convention: slowdown@K reported as 1 - slowdown; tile score =
// 1 - slowdown@5, layout score = Kendall tau; "mre" too when every graph has one. Each metric is the mean
// over the graphs where it is defined: a layout graph whose runtimes all tie, or with one config, has no
// tau or OPA; such graphs are counted as "unscored" (the key only when there are some), and a metric no
// graph defines is null. With several collections the top-level score is the mean of those that have one
// ("unscored_collections" counts the others, when there are some). Predictions that were not finite are
// counted as "nonfinite_predictions" (per collection, and in all, when there are some). Returns the JSON
// object (one line).
std::string summary_json(const std::vector<std::pair<std::string, GraphScore>>& per_collection);

}  // namespace gnn
