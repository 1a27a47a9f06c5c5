// gnn score: the competition score of a submission CSV against files whose runtimes are known.
#include <cstdio>
#include <set>

#include "apps/commands.h"
#include "apps/scoring.h"
#include "base/parse.h"
#include "io/atomic_file.h"

namespace gnn::cli {

Command score_command() {
  Command c;
  c.name = "score";
  c.summary = "score a submission CSV against a split whose runtimes are known (the competition metrics)";
  c.flags = {{"submission", "FILE", "CSV with header ID,TopConfigs (the competition's format)"},
             {"runtimes", "FILE",
              "instead of --submission: predicted runtimes, header ID,Config,Runtime (gnn predict --runtimes; "
              "plain decimal numbers), scored as their ranking and by the mean relative error"},
             {"data", "DIR", "the dataset (release root, npz/, or a collection folder)", "", true},
             {"split", "NAME", "which split's files to score", "valid"},
             {"eval-indices", "DIR",
              "folder of the official eval_indices JSON files (xla_default.json, ...): "
              "layout metrics on those config subsets (each scored layout collection's file must be there and "
              "list each of its graphs scored)"},
             {"per-graph", "FILE", "also write one JSON line per graph there"}};
  c.details =
      "Tile: slowdown@K = best runtime among the first K listed / best runtime - 1, reported as 1 - slowdown\n"
      "(the Kaggle convention); a tile row lists at most 5 configs (a longer one is refused), so @10 counts\n"
      "those 5. score = slowdown@5.\n"
      "Layout: Kendall tau-b (as scipy) between the listed order and the runtimes, OPA, slowdown@1/10/100;\n"
      "score = Kendall tau; a graph whose runtimes all tie has none, and is left out of the means (counted\n"
      "as \"unscored\"). Every graph of the split must have a row. The last line of stdout is one JSON\n"
      "object; with several collections it holds each one's means and their mean score.\n"
      "With --runtimes every config of a graph is ranked by its predicted runtime, and \"mre\" is the mean\n"
      "relative error |predicted - measured| / measured (DNNPerf's MRE; tile runtimes over their normalisers).";
  c.run = [](const Args& a) {
    const std::string eval_dir = eval_indices_flag(a);
    if (a.has("submission") == a.has("runtimes"))
      throw UsageError("gnn score: give one of --submission FILE or --runtimes FILE");
    const std::string split = split_flag(a);
    const bool by_runtime = a.has("runtimes");
    const std::string input = a.str(by_runtime ? "runtimes" : "submission");
    std::map<std::string, std::vector<int64_t>> rows;  // --submission: id -> configs, fastest first
    std::map<std::string, std::map<int64_t, double>> predicted;  // --runtimes: id -> config -> runtime
    std::map<std::string, int64_t> lines;  // --submission: id -> its line
    if (by_runtime) predicted = read_runtimes(input);
    else rows = read_submission(input, &lines);
    WalkOptions wo;
    wo.splits = {split};
    const auto files = walk_dataset(a.str("data"), wo);
    GNN_CHECK(!files.empty(), a.str("data"), ": no ", split, " files to score");
    if (a.has("per-graph")) {  // not the submission, nor a graph it is scored on
      std::vector<std::string> inputs = {input};
      for (const DatasetFile& f : files) inputs.push_back(f.path);
      check_output("per-graph", a.str("per-graph"), inputs);
    }
    EvalIndices eval(eval_dir);
    eval.check(files);
    std::vector<std::pair<std::string, GraphScore>> scores;
    std::string per;
    for (const DatasetFile& f : files) {
      const bool found = by_runtime ? predicted.count(f.id()) > 0 : rows.count(f.id()) > 0;
      GNN_CHECK(found, input, ": no row for ", f.id());
      const std::vector<double> runtime = scored_runtimes(f);
      const std::vector<int64_t> subset = eval.configs(f, int64_t(runtime.size()));
      const bool layout = f.collection.is_layout();
      const std::string where =
          by_runtime ? "" : input + ": line " + std::to_string(lines.at(f.id())) + " (" + f.id() + ")";
      const GraphScore s = by_runtime ? score_runtimes(f.id(), layout, predicted.at(f.id()), runtime, subset, input)
                                      : score_ranking(f.id(), layout, rows.at(f.id()), runtime, subset, where);
      per += graph_score_json(s) + "\n";
      scores.emplace_back(f.collection.str(), s);
    }
    // A row that names no graph of the split is a mistake (a wrong split, a renamed file, a typo):
    // refused when its collection is scored here. Rows of collections that --data does not hold at all
    // (a whole-competition submission scored on one collection) are said and left out.
    std::set<std::string> ids, collections;
    for (const DatasetFile& f : files) ids.insert(f.id()), collections.insert(f.collection.str());
    std::vector<std::string> stray, elsewhere;
    auto sort_row = [&](const std::string& id) {
      if (ids.count(id)) return;
      const size_t colon = id.rfind(':');
      (colon != std::string::npos && collections.count(id.substr(0, colon)) ? stray : elsewhere).push_back(id);
    };
    for (const auto& row : rows) sort_row(row.first);
    for (const auto& row : predicted) sort_row(row.first);
    GNN_CHECK(stray.empty(), input, ": ", stray.size(), " row(s) name no ", split, " graph of ", a.str("data"),
              ", the first '", shown_field(stray[0]), "' (a row of another split, or a misspelt ID?)");
    if (!elsewhere.empty())
      std::fprintf(stderr,
                   "gnn score: %zu row(s) of collections with no %s files in %s are not scored (the first: %s)\n",
                   elsewhere.size(), split.c_str(), a.str("data").c_str(), shown_field(elsewhere[0]).c_str());
    if (a.has("per-graph")) write_file_atomic(a.str("per-graph"), per);
    std::printf("scored %zu graphs of split %s\n", scores.size(), split.c_str());
    std::printf("%s\n", summary_json(scores).c_str());
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
