// gnn train / eval / predict / models: the TpuGraphs pipeline (apps/train/).

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "apps/commands.h"
#include "apps/train/data_parallel.h"
#include "apps/train/trainer.h"
#include "base/parse.h"
#include "dist/comm.h"
#include "io/atomic_file.h"
#include "io/byte_source.h"
#include "io/json.h"
#include "io/npz.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"

namespace gnn::cli {

namespace {

// --comm-timeout, which every command that runs a model takes.
void set_timeout(const Args& a) {
  const double t = a.number("comm-timeout");
  if (!(t > 0)) throw UsageError("--comm-timeout must be a positive number of seconds, got " + a.str("comm-timeout"));
  dist::set_timeout(t);
}

const Flag kCommTimeout = {"comm-timeout", "S",
                           "under mpirun: how long a rank waits for the others in a collective "
                           "before it stops the job (a rank died or hangs)",
                           "300"};

// The runs of --run (repeatable) and of --runs FILE (one run directory per line, relative to the current
// folder; blank lines and lines starting with # skipped), in that order.
std::vector<std::string> run_dirs(const Args& a) {
  std::vector<std::string> dirs = a.all("run");
  if (a.has("runs")) {
    std::string text;
    try {  // (through FileSource, as every file: a FIFO or a folder is refused, not waited on)
      text = read_text_file(a.str("runs"), uint64_t(1) << 24);
    } catch (const Error& e) {
      throw UsageError("--runs " + e.message());
    }
    if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // (a UTF-8 byte order mark, as some editors write)
    std::istringstream f(text);
    int64_t n = 0;
    for (std::string line; std::getline(f, line);) {
      const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
      ++n;
      if (b == std::string::npos || line[b] == '#') continue;
      if (e - b + 1 > size_t(PATH_MAX))  // (not a list of runs: said by its start, not echoed whole)
        throw UsageError("--runs " + a.str("runs") + ": line " + std::to_string(n) + " (" + shown_field(line, 60) +
                         ") is longer than any path");
      dirs.push_back(line.substr(b, e - b + 1));
      std::error_code ec;  // (named by its line here; a run given by --run is read as such)
      if (!std::filesystem::is_directory(dirs.back(), ec))
        throw UsageError("--runs " + a.str("runs") + ": line " + std::to_string(n) + ": " + shown_field(dirs.back()) +
                         " is not a directory (a run folder; relative paths are from the current folder)");
    }
    if (dirs.size() == a.all("run").size()) throw UsageError("--runs " + a.str("runs") + ": lists no run");
  }
  if (dirs.empty()) throw UsageError("missing --run RUN (or --runs FILE)");
  // The same run twice weighs twice in the ensemble: allowed (a weight), and said.
  namespace fs = std::filesystem;
  for (size_t i = 0; i < dirs.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (dirs[i] == dirs[j] || fs::equivalent(dirs[i], dirs[j], ec)) {
        std::fprintf(stderr,
                     "gnn %s: note: --run %s%s: the same run given again; it weighs as many times in the "
                     "ensemble\n",
                     a.command().c_str(), dirs[i].c_str(), dirs[i] == dirs[j] ? "" : (" (as " + dirs[j] + ")").c_str());
        break;
      }
    }
  return dirs;
}

// --checkpoint, checked as a usage error before any run is read
std::string checkpoint_flag(const Args& a) {
  const std::string c = a.str("checkpoint");
  if (c != "auto" && c != "best" && c != "last" && c != "swa")
    throw UsageError("--checkpoint: expected auto, best, last or swa, got '" + c + "'");
  return c;
}

// The models of the runs (--checkpoint of each) and, per run, the --data files of --split its recipe's
// kind reads, preprocessed as that run was trained. Several runs are an ensemble: the same kind, scored
// per graph and combined (--ensemble).
struct RunOnSplit {
  std::string dir;
  train::LoadedModel model;
  std::unique_ptr<train::GraphSource> graphs;
  int64_t tta = 1;  // the passes over orders of the configs it scores with (--tta, else the run's own)
};
// Under mpirun every rank must score the same models on the same files (each scores its share of the graphs,
// rank 0 writes all): a rank that sees another checkpoint, split or data (RUN or --data not shared, a copy
// per node) stops the job, naming it, before anything is scored. `more`: the command's own such flags.
std::vector<RunOnSplit> open_runs(const Args& a, train::RankFields more = {}) {
  const Device device = parse_device(a);
  set_timeout(a);
  try {
    train::parse_combine(a.str("ensemble"));  // a typo fails before any loading, as a usage error
  } catch (const Error& e) {
    throw UsageError(e.message());
  }
  const int64_t tta = a.has("tta") ? a.integer("tta", 1, 1000) : 0;  // likewise
  const std::string split = split_flag(a);  // likewise
  const std::vector<std::string> dirs = run_dirs(a);
  if (a.on("ensemble") && dirs.size() == 1)  // (a flag nothing would read is refused, not ignored)
    throw UsageError("--ensemble " + a.str("ensemble") + ": combines the scores of several runs (--run A --run B, " +
                     "or --runs FILE), and one run is given");
  std::vector<RunOnSplit> runs;
  for (const std::string& dir : dirs) {
    RunOnSplit r;
    r.dir = dir;
    r.model = train::load_model(train::run_checkpoint(dir, checkpoint_flag(a)), device);
    // (a model that scores each config alone gives the same scores on every pass: one is enough)
    r.tta = !r.model.recipe->configs_interact(r.model.hparams) ? 1 : tta > 0 ? tta : r.model.train.tta;
    if (!runs.empty() && r.model.recipe->kind != runs[0].model.recipe->kind)
      throw UsageError("--run " + dir + ": a " + r.model.recipe->kind + " model (" + r.model.recipe->name +
                       ") cannot join an ensemble of " + runs[0].model.recipe->kind + " models (" + runs[0].dir + ")");
    // on the CPU, one setting per process
    if (!device.is_cuda() && !runs.empty() && r.model.train.matmul_bf16 != runs[0].model.train.matmul_bf16)
      throw UsageError("--run " + dir + ": trained with --matmul-precision " +
                       (r.model.train.matmul_bf16 ? "bf16" : "f32") + ", " + runs[0].dir + " with " +
                       (runs[0].model.train.matmul_bf16 ? "bf16" : "f32") + "; an ensemble's runs share one precision");
    nn::move_parameters(*r.model.model, device);
    auto files = train::kind_files(a.str("data"), r.model.recipe->kind, split);
    if (files.empty())
      throw UsageError("--data " + a.str("data") + ": no " + r.model.recipe->kind + " " + split + " files");
    // Eval and predict read each graph once: a member past the first keeps no more than the graph at hand.
    r.graphs = std::make_unique<train::GraphSource>(std::move(files), r.model.prep,
                                                    runs.empty() ? uint64_t(2) << 30 : uint64_t(0), false,
                                                    r.model.model->needs().features);
    runs.push_back(std::move(r));
  }
  std::string listed;  // (first: the fields after it follow from the runs)
  for (const std::string& dir : dirs) listed += (listed.empty() ? "" : ", ") + std::filesystem::absolute(dir).string();
  train::RankFields fields = {{"runs (--run, --runs)", listed},
                              {"--split", split},
                              {"--data", std::filesystem::absolute(a.str("data")).string()},
                              {split + " split", train::files_fingerprint(runs[0].graphs->files())},
                              {"--ensemble", a.str("ensemble")},
                              {"--tta", std::to_string(tta)},
                              {"--device", device.is_cuda() ? "cuda" : "cpu"}};
  for (const RunOnSplit& r : runs) {
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(r.model.path, ec);
    fields.push_back({"checkpoint of --run " + r.dir,
                      detail::str_cat(std::filesystem::absolute(r.model.path).string(), " (epoch ", r.model.epoch, ", ",
                                      ec ? std::string("size unknown") : std::to_string(bytes) + " bytes", ")")});
  }
  fields.insert(fields.end(), more.begin(), more.end());
  train::check_ranks_agree(
      fields, "the check that every rank scores the same models on the same files",
      "every rank needs the same flags, and every --run and --data on a filesystem every rank sees");
  if (tta > 1 && std::none_of(runs.begin(), runs.end(),
                              [](const RunOnSplit& r) { return r.model.recipe->configs_interact(r.model.hparams); }))
    throw UsageError("--tta " + a.str("tta") + ": averages over orders of the configs, and " +
                     runs[0].model.recipe->name + (runs.size() > 1 ? " (like every run given)" : "") +
                     train::Recipe::kTtaMoot);
  return runs;
}

// The ensemble's scores of file i's listed configs: each run's own prediction (its preprocessing of the
// graph, its --eval-chunk and --tta), combined; one run's scores as they are.
train::ConfigScorer ensemble_scorer(const Args& a, const std::vector<RunOnSplit>& runs) {
  const train::Combine how = runs.size() > 1 ? train::parse_combine(a.str("ensemble")) : train::Combine::kMeanZ;
  return [&runs, how](size_t i, const train::ModelGraph& g, const std::vector<int64_t>& configs, int64_t& nonfinite) {
    std::vector<std::vector<double>> members;
    for (size_t k = 0; k < runs.size(); ++k) {
      const train::LoadedModel& m = runs[k].model;
      const auto own = k ? runs[k].graphs->get(i) : nullptr;  // run 0's graph is g
      GNN_CHECK(!own || (own->file.path == g.file.path && own->num_configs() == g.num_configs()), "--run ", runs[k].dir,
                ": its graph ", i, " is ", own ? own->file.path : "", ", run ", runs[0].dir, "'s ", g.file.path);
      members.push_back(train::predict_configs(*m.model, own ? *own : g, configs, m.train.eval_chunk, runs[k].tta));
    }
    nonfinite = 0;  // (a member's such prediction takes a finite place under mean-z and mean-rank: counted here)
    for (size_t j = 0; j < configs.size(); ++j)
      nonfinite += std::any_of(members.begin(), members.end(),
                               [j](const std::vector<double>& p) { return p[j] == train::kNotFinitePrediction; });
    return train::combine_scores(members, how, configs);
  };
}

// What eval and predict read, which no output of theirs may name: the runs' files, the graphs and the
// eval_indices files.
std::vector<std::string> inputs_of(const Args& a, const std::vector<RunOnSplit>& runs) {
  std::vector<std::string> in;
  for (const RunOnSplit& r : runs) {
    for (std::string& f : train::run_files(r.dir)) in.push_back(std::move(f));
    for (const DatasetFile& f : r.graphs->files()) in.push_back(f.path);
  }
  if (a.has("runs")) in.push_back(a.str("runs"));
  std::error_code ec;
  if (a.has("eval-indices") && std::filesystem::is_directory(a.str("eval-indices"), ec))
    for (const auto& e : std::filesystem::directory_iterator(a.str("eval-indices"), ec))
      in.push_back(e.path().string());
  return in;
}

// --memory-limit: bytes with an optional K/M/G suffix (powers of 1024), 0 for none, or auto: 90% of the
// memory this process may use (usable_memory_bytes), so a batch that cannot fit stops with a message
// instead of the kernel's OOM kill or a failed allocation.
int64_t parse_memory_limit(const std::string& s) {
  if (s == "auto") {
    const int64_t bytes = usable_memory_bytes();
    // under mpirun the ranks of a node share it (at least a byte: 0 would mean no limit)
    return bytes > 0 ? std::max<int64_t>(1, bytes / 10 * 9 / std::max(1, dist::world().local_size)) : 0;
  }
  // plain decimal, as every number flag (no '+', space or hex), then the suffix
  double v = -1;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  const size_t end = r.ec == std::errc() ? size_t(r.ptr - s.data()) : 0;
  const std::string suffix = end ? s.substr(end) : "";
  const double scale = suffix.empty()  ? 1
                       : suffix == "K" ? 0x1p10
                       : suffix == "M" ? 0x1p20
                       : suffix == "G" ? 0x1p30
                                       : -1;
  if (end == 0 || scale < 0 || !(v >= 0) || std::isinf(v))
    throw UsageError("gnn train: --memory-limit: expected bytes (with an optional K, M or G), 0 or auto, got '" + s +
                     "'");
  if (v * scale > 9e18)  // (well formed, but past what a 64-bit count holds with room to add to it)
    throw UsageError("gnn train: --memory-limit " + s + ": more than the most it takes, 9e18 bytes (0: no limit)");
  if (v > 0 && v * scale < 1)
    throw UsageError("gnn train: --memory-limit " + s + ": less than one byte (0 turns the limit off)");
  return int64_t(v * scale);
}

}  // namespace

std::string split_flag(const Args& a) {
  const std::string s = a.str("split");
  if (s != "train" && s != "valid" && s != "test")
    throw UsageError("--split: expected train, valid or test, got '" + s + "'");
  return s;
}

std::string eval_indices_flag(const Args& a) {
  if (!a.has("eval-indices")) return "";
  const std::string dir = a.str("eval-indices");
  if (!std::filesystem::is_directory(dir)) throw UsageError("--eval-indices " + dir + ": not a directory");
  return dir;
}

namespace {

// Every recipe's flags, each once. A choice whose values differ between recipes (--node-transform trainable:
// the 6th place's) lists every value, with the help of the recipe that takes the most, and names the recipes
// that take each value not all of them do.
std::vector<train::HParamSpec> all_hparams() {
  std::vector<train::HParamSpec> out;
  std::set<std::string> seen;
  for (const train::Recipe& r : train::recipes())
    for (const train::HParamSpec& h : r.hparams)
      if (seen.insert(h.name).second) out.push_back(h);
  for (train::HParamSpec& h : out) {
    if (h.type != train::HParamSpec::Type::kChoice) continue;
    std::vector<std::string> all;  // every recipe's values, in the order first met
    std::map<std::string, std::pair<size_t, std::string>> takers;  // value -> how many recipes take it, which
    size_t offered = 0, most = 0;
    for (const train::Recipe& r : train::recipes()) {
      const train::HParamSpec* s = train::find_spec(r.hparams, h.name);
      if (!s) continue;
      ++offered;
      const std::vector<std::string> v = train::choice_values(s->choices);
      if (v.size() > most) most = v.size(), h.help = s->help;
      for (const std::string& x : v) {
        auto& [count, names] = takers[x];
        if (count++ == 0) all.push_back(x);
        names += (names.empty() ? "" : ", ") + r.name;
      }
    }
    std::string only, choices;
    for (const std::string& x : all) {
      choices += (choices.empty() ? "" : "|") + x;
      if (takers[x].first < offered) only += (only.empty() ? " (" : "; ") + x + ": " + takers[x].second + " only";
    }
    h.choices = choices;
    if (!only.empty()) h.help += only + ")";
  }
  return out;
}

}  // namespace

Command train_command() {
  Command c;
  c.name = "train";
  c.summary = "train a recipe (gnn models) on a TpuGraphs tree; resumable, with metrics.jsonl and model.npz in RUN";
  c.flags = {
      {"model", "NAME", "the recipe (gnn models lists them); on --resume, the run's own"},
      {"data", "DIR", "the dataset (release root, npz/, or a collection folder); on --resume, the run's own"},
      {"out", "RUN", "the run directory (created; refused if it holds a run, unless --resume)", "", true},
      {"epochs", "E", "epochs (see below for what one covers; default 10, on --resume the run's own)"},
      {"steps", "N",
       "stop after N optimiser steps in all (whichever of --epochs and --steps ends first; "
       "0: no limit)"},
      {"seed", "S", "seed for initialisation, graph order and config sampling (default 1)"},
      {"memory-limit", "BYTES",
       "stop with the step's graphs named when tensors would pass this many bytes "
       "(K/M/G suffixes; 0: no limit; auto: 90% of the memory this process may use)",
       "auto"},
      {"device", "cpu|cuda", "where to train", "cpu"},
      {"cuda-graphs", "N",
       "with --device cuda (and --batch-graphs 1 on several graphs): capture the forward and backward of up to "
       "N graphs' steps "
       "(fresh configs each time) as CUDA graphs and replay later steps from them; one process, whole "
       "graphs, a recipe whose training draws no dropout (a refusal names those that can) (0: off)",
       "0"},
      kThreadsFlag,
      {"resume", "",
       "continue the run in RUN from its last checkpoint (starts one if there is none); "
       "--epochs or --steps given again extend or shorten it"},
      {"skip-nonfinite", "", "skip a batch whose loss or gradient is NaN/Inf (counted) instead of stopping"},
      {"checkpoint-minutes", "M", "also checkpoint mid-epoch every M minutes (0: every step)", "10"},
      {"eval-indices", "DIR",
       "folder of the official eval_indices JSON files: layout validation on them (each valid layout "
       "collection's file must be there and list each of its valid graphs)"},
      {"max-graphs", "N", "use only the first N train and N valid graphs"},
      {"progress", "auto|bar|lines", "a progress bar (on a terminal by default) or plain lines", "auto"},
      {"profile", "",
       "time each step's phases (batch, prepare, forward, loss, backward, update) and ops, with the step's GEMM "
       "floor at this machine's measured peak: a table at the end and \"profile\" in the summary"},
      kCommTimeout,
      {"kill-after-steps", "N",
       "testing: kill -9 this process after step N (and its checkpoint: mid-epoch, give --checkpoint-minutes 0)"},
      {"stall-after-steps", "N", "testing: this process stops answering (sleeps) after step N"},
      {"fault-rank", "R", "testing: under mpirun, only rank R kills or stalls itself"}};
  for (const train::HParamSpec& h : all_hparams())
    c.flags.push_back({h.name, "V", h.help + "; " + h.valid() + " (default: the recipe's)"});
  std::string details =
      "An epoch visits every training graph once (--graph-repeats R times), in a seeded random order, in\n"
      "batches of --batch-graphs graphs; each visit contributes --configs configs drawn at random, different\n"
      "ones each epoch and each copy. A tile\n"
      "kernel has up to a few thousand configs and a layout graph up to 100k, so an epoch sees a sample\n"
      "of them; --epochs sets how many samples. Validation scores every config of each valid graph (layout:\n"
      "its eval_indices subset with --eval-indices). RUN/metrics.jsonl gets one line per epoch, RUN/model.npz\n"
      "the checkpoint (weights, Adam state, the recipe and its hyper-parameters, the preprocessing fitted on\n"
      "train), RUN/best.npz the best-validation weights. The last line of stdout is one JSON object.\n\n"
      "Recipe defaults of the hyper-parameter flags:\n";
  for (const train::Recipe& r : train::recipes()) {
    details += "  " + r.name + ":";
    for (const train::HParamSpec& h : r.hparams) details += " " + h.name + "=" + h.default_value;
    details += "\n";
  }
  c.details = details;
  c.run = [](const Args& a) {
    train::TrainOptions o;
    o.device = parse_device(a);
    set_timeout(a);
    if (a.has("model")) o.recipe = a.str("model");
    try {  // an unknown one is a usage error, listing the names
      if (!o.recipe.empty()) (void)train::find_recipe(o.recipe);
    } catch (const Error& e) {
      throw UsageError(e.message());
    }
    if (a.on("data")) o.data = a.str("data");
    o.out = a.str("out");
    check_output_folder("out", o.out);
    if (a.on("epochs")) o.epochs = a.integer("epochs", 1, train::kMaxEpochs);
    if (a.has("steps")) o.steps = a.integer("steps", 0, INT64_MAX);
    if (a.has("steps") && o.steps == 0) o.steps = -1;  // 0: no step limit (on --resume: remove the run's)
    if (a.on("seed")) o.seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    o.cuda_graphs = a.integer("cuda-graphs", 0, 1024);
    o.profile = a.on("profile");
    o.memory_limit = parse_memory_limit(a.str("memory-limit"));
    o.resume = a.on("resume"), o.skip_nonfinite = a.on("skip-nonfinite");
    o.checkpoint_minutes = a.number("checkpoint-minutes");
    if (!(o.checkpoint_minutes >= 0))
      throw UsageError("--checkpoint-minutes must be >= 0, got " + a.str("checkpoint-minutes"));
    o.eval_indices = eval_indices_flag(a);
    if (a.has("max-graphs")) o.max_graphs = a.integer("max-graphs", 1, INT64_MAX);
    if (a.has("kill-after-steps")) o.kill_after_steps = a.integer("kill-after-steps", 1, INT64_MAX);
    if (a.has("stall-after-steps")) {
      if (a.has("kill-after-steps"))
        throw UsageError("gnn train: --kill-after-steps and --stall-after-steps: pick one");
      o.kill_after_steps = a.integer("stall-after-steps", 1, INT64_MAX), o.stall = true;
    }
    if (a.has("fault-rank")) o.fault_rank = int(a.integer("fault-rank", 0, dist::world().size - 1));
    const std::string p = a.str("progress");
    if (p != "auto" && p != "bar" && p != "lines")
      throw UsageError("--progress: expected auto, bar or lines, got '" + p + "'");
    o.progress = p == "auto" ? -1 : p == "bar" ? 1 : 0;
    for (const train::HParamSpec& h : all_hparams())
      if (a.has(h.name)) o.hparams[h.name] = a.str(h.name);
    train::TrainResult r;
    try {
      r = train::run_training(o);
    } catch (const train::OptionError& e) {
      throw UsageError("gnn train: " + e.message());
    }
    if (dist::world().rank == 0) std::printf("%s\n", r.json.c_str());
    return 0;
  };
  return c;
}

namespace {

// A predicted runtime as text that reads back to the same double.
std::string fmt_runtime(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The flags eval and predict share: which run and checkpoint, the data, how to score, where to run.
const Flag kRunFlag{
    "run", "RUN", "the run directory of gnn train; given more than once, an ensemble of the runs (--ensemble)",
    "",    false, true};
const Flag kRunsFlag{"runs", "FILE",
                     "a file listing run directories, one per line (relative to the current folder; blank lines "
                     "and lines starting with # skipped): more members of the ensemble"};
const Flag kEnsembleFlag{"ensemble", "mean-z|mean-rank|mean",
                         "how several runs' scores of a graph's configs combine: the mean of each run's scores "
                         "standardised over the graph's configs, the mean of their ranks, or the mean of the raw "
                         "scores (as the 6th place's submission)",
                         "mean-z"};
const Flag kDataFlag{"data", "DIR", "the dataset", "", true};
const Flag kCheckpointFlag{"checkpoint", "auto|best|last|swa",
                           "best.npz, model.npz, swa.npz (--swa), or best when it exists", "auto"};
const Flag kTtaFlag{"tta", "N",
                    "score each config as the mean of N passes over the configs in random orders (default: the "
                    "run's --tta)"};
const Flag kDeviceFlag{"device", "cpu|cuda", "where to run", "cpu"};

}  // namespace

Command eval_command() {
  Command c;
  c.name = "eval";
  c.summary = "score a trained run on a split with known runtimes (the competition metrics)";
  c.flags = {kRunFlag,
             kRunsFlag,
             kEnsembleFlag,
             kDataFlag,
             {"split", "NAME", "train | valid | test (test files have no runtimes)", "valid"},
             kCheckpointFlag,
             {"eval-indices", "DIR",
              "folder of the official eval_indices JSON files: layout metrics on them (each scored layout "
              "collection's file must be there and list each of its graphs scored)"},
             {"per-graph", "FILE", "one JSON line per graph (default: RUN/eval_<split>.jsonl; an ensemble: none)"},
             kTtaFlag,
             kDeviceFlag,
             kThreadsFlag,
             kCommTimeout};
  c.details =
      "Every config of each graph is scored (a layout graph on its eval_indices subset with --eval-indices,\n"
      "scored alone as the test files hold only their 1000 configs, a config listed twice tying with itself;\n"
      "so a model whose configs interact, or an ensemble under mean-z or mean-rank, scores otherwise than\n"
      "predict on the whole valid split followed by score --eval-indices).\n"
      "Tile: slowdown@1/5/10 as 1 - slowdown (the Kaggle convention) over the full predicted order, score =\n"
      "slowdown@5. Layout: Kendall tau-b (as scipy), OPA, slowdown@1/10/100; score = tau. A graph whose\n"
      "runtimes all tie has no tau or OPA: left out of their means and counted as \"unscored\". A prediction\n"
      "that is not finite ranks last (in an ensemble under mean-z or mean-rank: past that run's others), and\n"
      "its config is counted as \"nonfinite_predictions\" (training's validation then picks no best.npz). The\n"
      "last line of stdout is one JSON object.\n"
      "Several runs (--run A --run B, --runs FILE) are scored as an ensemble, as the top solutions submitted:\n"
      "each run scores every config with its own preprocessing, --eval-chunk and --tta, and per graph the\n"
      "runs' scores are standardised and averaged (--ensemble mean-z), their ranks averaged (mean-rank), or\n"
      "the raw scores averaged (mean: for runs whose scores are comparable; the most confident run weighs most).";
  c.run = [](const Args& a) {
    const std::string eval_dir = eval_indices_flag(a), split = split_flag(a);
    const std::vector<RunOnSplit> runs =
        open_runs(a, {{"--eval-indices", eval_dir.empty() ? "" : std::filesystem::absolute(eval_dir).string()}});
    if (!eval_dir.empty() && runs[0].model.recipe->kind != "layout")
      throw UsageError("--eval-indices " + eval_dir + ": the official subsets are of layout graphs, and " +
                       runs[0].dir + " is a " + runs[0].model.recipe->kind + " model (" + runs[0].model.recipe->name +
                       ")");
    if (a.has("per-graph")) check_output("per-graph", a.str("per-graph"), inputs_of(a, runs));
    const train::LoadedModel& m = runs[0].model;
    train::GraphSource& src = *runs[0].graphs;
    const bool lead = dist::world().rank == 0;
    if (lead)
      for (const RunOnSplit& r : runs)
        std::fprintf(
            stderr, "gnn eval: %s (%s, epoch %lld) on %zu %s graphs%s\n", r.model.path.c_str(),
            r.model.recipe->name.c_str(), (long long)r.model.epoch, src.files().size(), split.c_str(),
            runs.size() > 1
                ? (", one of " + std::to_string(runs.size()) + " (--ensemble " + a.str("ensemble") + ")").c_str()
                : "");
    // One run as it always was (its regression runs also get the mean relative error); an ensemble's
    // combined scores are no runtimes.
    const train::Evaluation ev = runs.size() == 1
                                     ? train::evaluate(*m.model, src, m.train.eval_chunk, eval_dir, runs[0].tta,
                                                       m.train.regression(), m.prep.log_offset)
                                     : train::evaluate(ensemble_scorer(a, runs), src, eval_dir);
    const std::string per =
        a.has("per-graph")
            ? a.str("per-graph")
            : (runs.size() == 1 ? (std::filesystem::path(runs[0].dir) / ("eval_" + split + ".jsonl")).string()
                                : std::string());
    std::string text;
    for (const auto& [coll, s] : ev.scores) text += graph_score_json(s) + "\n";
    if (!lead) return 0;
    if (per.empty()) {
      std::printf("%s\n", ev.json.c_str());
      return 0;
    }
    try {
      if (!a.has("per-graph")) remove_stale_temporaries(per);  // (--per-graph's: check_output's)
      write_file_atomic(per, text);
    } catch (const Error& e) {
      // The default file is a convenience: a run on a read-only disk is still scored. A --per-graph the
      // user asked for is not optional.
      if (a.has("per-graph")) throw;
      std::fprintf(stderr, "gnn eval: warning: the per-graph scores are not written: %s\n", e.message().c_str());
    }
    std::printf("%s\n", ev.json.c_str());
    return 0;
  };
  return c;
}

Command predict_command() {
  Command c;
  c.name = "predict";
  c.summary = "write the competition's submission CSV for a split (test by default)";
  c.flags = {kRunFlag,
             kRunsFlag,
             kEnsembleFlag,
             kDataFlag,
             {"split", "NAME", "which split's files", "test"},
             {"out", "FILE", "the CSV to write (atomically)", "", true},
             {"runtimes", "FILE",
              "also write each config's predicted runtime, header ID,Config,Runtime (a run trained with --loss mse "
              "or mape; gnn score --runtimes scores it)"},
             kCheckpointFlag,
             kTtaFlag,
             kDeviceFlag,
             kThreadsFlag,
             kCommTimeout};
  c.details =
      "Format as the competition's sample_submission.csv: header ID,TopConfigs; one row per graph\n"
      "<collection>:<file stem>; tile rows the 5 predicted-fastest config indices, layout rows every config\n"
      "index, fastest first (ties by index), separated by ';'. Rows in the order the files are walked.\n"
      "--runtimes FILE also writes, for a run trained with --loss mse or mape, one row per (graph, config):\n"
      "ID,Config,Runtime, the predicted runtime (exp of the model's log runtime); gnn score --runtimes scores it.\n"
      "Several runs (--run A --run B, --runs FILE) predict as an ensemble (see gnn eval --help).";
  c.run = [](const Args& a) {
    // (--runtimes adds a gather: a rank without it would leave the others waiting)
    const std::vector<RunOnSplit> runs = open_runs(a, {{"--runtimes", a.has("runtimes") ? "on" : "off"}});
    const train::LoadedModel& m = runs[0].model;
    const std::vector<std::string> inputs = inputs_of(a, runs);
    check_output("out", a.str("out"), inputs);
    if (a.has("runtimes")) check_output("runtimes", a.str("runtimes"), inputs);
    if (a.has("runtimes") && !output_names_input(a.str("runtimes"), {a.str("out")}).empty())
      throw UsageError("--runtimes: " + a.str("runtimes") + " is the --out file too; give them different paths");
    if (a.has("runtimes") && runs.size() > 1)
      throw UsageError("--runtimes: an ensemble's combined scores are no runtimes; predict them with one --run");
    if (a.has("runtimes") && !m.train.regression())
      throw UsageError("--runtimes: " + m.path + " ranks configs (--loss " + m.hparams.str("loss") +
                       ") and predicts no runtimes; train with --loss mse or mape");
    train::GraphSource& src = *runs[0].graphs;
    const train::ConfigScorer score = ensemble_scorer(a, runs);
    // Under mpirun each rank predicts its share of the graphs and rank 0 writes every row, in file order.
    const dist::World& w = dist::world();
    const dist::Range mine = dist::shard(int64_t(src.files().size()), w.rank, w.size);
    std::string csv, runtimes;
    for (size_t i = size_t(mine.begin); i < size_t(mine.end); ++i) {
      const auto g = src.get(i);
      std::vector<int64_t> all(size_t(g->num_configs()));
      std::iota(all.begin(), all.end(), 0);
      // Positions in `all` are the config indices themselves.
      int64_t nonfinite = 0;  // (each member warns of its own)
      const std::vector<double> p = score(i, *g, all, nonfinite);
      for (size_t k = 0; a.has("runtimes") && k < p.size(); ++k) {
        const double rt = std::exp(p[k] + m.prep.log_offset);  // the output plus the run's offset: log runtime
        GNN_CHECK(std::isfinite(rt) && rt > 0, "--runtimes: ", g->file.id(), " config ", k,
                  ": the model predicts no finite runtime (log runtime ", p[k] + m.prep.log_offset,
                  "); the run has diverged");
        runtimes += detail::str_cat(g->file.id(), ",", k, ",", fmt_runtime(rt), "\n");
      }
      std::vector<int64_t> configs = ranking_order(p, all);
      if (!g->file.collection.is_layout() && configs.size() > 5) configs.resize(5);
      csv += g->file.id() + ",";
      for (size_t k = 0; k < configs.size(); ++k) {
        if (k) csv += ';';
        csv += std::to_string(configs[k]);
      }
      csv += "\n";
    }
    std::string all = "ID,TopConfigs\n";
    for (const std::string& part : dist::allgather(csv, "the predicted rows")) all += part;
    const std::vector<std::string> runtime_parts =
        a.has("runtimes") ? dist::allgather(runtimes, "the predicted runtimes") : std::vector<std::string>{};
    if (w.rank != 0) return 0;
    // Both files written before either is moved into place: a write that fails leaves the other as it was.
    AtomicFile out_file(a.str("out"));
    out_file.write(all.data(), all.size());
    std::optional<AtomicFile> runtimes_file;
    if (a.has("runtimes")) {
      std::string text = "ID,Config,Runtime\n";
      for (const std::string& part : runtime_parts) text += part;
      runtimes_file.emplace(a.str("runtimes"));
      runtimes_file->write(text.data(), text.size());
    }
    out_file.commit();
    if (runtimes_file) runtimes_file->commit();
    if (runs.size() == 1)
      std::printf("wrote %s: %zu rows (%s, %s)\n", a.str("out").c_str(), src.files().size(), m.recipe->name.c_str(),
                  m.path.c_str());
    else
      std::printf("wrote %s: %zu rows (an ensemble of %zu runs, --ensemble %s)\n", a.str("out").c_str(),
                  src.files().size(), runs.size(), a.str("ensemble").c_str());
    return 0;
  };
  return c;
}

Command pass_command() {
  Command c;
  c.name = "pass";
  c.summary = "one forward and backward of a run's model on one graph's configs, written with its inputs";
  c.flags = {{"run", "RUN", "the run directory of gnn train", "", true},
             kDataFlag,
             {"split", "NAME", "which split's files (needs runtimes: train or valid; a release's test files have none)",
              "train"},
             {"graph", "ID",
              "the graph: its file stem, or its ID as the submission CSV writes it (<collection>:<stem>, e.g. "
              "layout:xla:default:NAME) (default: the split's first)"},
             {"configs", "I,J,...", "the config indices of the batch, in order", "0,1,2,3,4,5,6,7"},
             {"out", "FILE", "the .npz to write (atomically)", "", true},
             {"train", "", "in training mode (dropout on, with the masks of noise seed 0) instead of eval mode"},
             kCheckpointFlag,
             kDeviceFlag,
             kThreadsFlag,
             kCommTimeout};
  c.details =
      "Writes what a training step computes on one batch, without the optimiser, so that another\n"
      "implementation of the model (the original authors' code: scripts/check_vs_original.py) can be fed the\n"
      "same batch and compared: score [C, 1] (lower = faster), loss (the run's --loss on this batch),\n"
      "grad/NAME and param/NAME (the weights the forward starts from) for every parameter, param_after/NAME\n"
      "for each the forward changed in place (--op-max-norm's opcode embedding rows), as it left them, and\n"
      "the batch's inputs under batch/ (x, opcode, edges rows [u, v] where u consumes v, graph_ptr, target,\n"
      "config_ids; layout: node_config [N, C*18], config_nodes; tile: config_feat; and the inputs only the\n"
      "recipe reads under their names:\n"
      "layout-tgraph's and layout-sage-5th's node_layout, layout-attn-violation's violation,\n"
      "dnnperf-anee's producer), preprocessed as the run was trained.\n"
      "The last line of stdout is one JSON object (recipe, graph, configs, loss, mode: train or eval, out).";
  c.run = [](const Args& a) {
    const Device device = parse_device(a);
    set_timeout(a);
    const std::string split = split_flag(a);  // (before the checkpoint is read)
    // A batch of as many --configs as a command line holds could take more than the machine has: past 90% of
    // it, stopped with a message (as train's --memory-limit auto), not by the kernel's OOM kill.
    host_set_limit(parse_memory_limit("auto"));
    train::LoadedModel m = train::load_model(train::run_checkpoint(a.str("run"), checkpoint_flag(a)), device);
    nn::move_parameters(*m.model, device);
    const auto files = train::kind_files(a.str("data"), m.recipe->kind, split);
    if (files.empty()) throw UsageError("--data " + a.str("data") + ": no " + m.recipe->kind + " " + split + " files");
    size_t at = 0;
    if (a.has("graph")) {
      const std::string want = a.str("graph");
      const auto is = [&](const DatasetFile& f) { return f.id() == want || f.stem == want; };
      while (at < files.size() && !is(files[at])) ++at;
      if (at == files.size()) {
        std::string hint;  // (the file in another split: the flag that reads it; none where that split is damaged)
        for (const char* other : {"train", "valid", "test"}) try {
            if (other != split)
              for (const DatasetFile& f : train::kind_files(a.str("data"), m.recipe->kind, other))
                if (hint.empty() && is(f)) hint = std::string(" (it is a ") + other + " file: --split " + other + ")";
          } catch (const Error&) {}
        throw UsageError("--graph " + want + ": no such " + m.recipe->kind + " " + split + " file in " + a.str("data") +
                         hint + "; give a file stem, or an ID as the submission CSV writes it (" + files[0].id() + ")");
      }
    }
    std::vector<int64_t> configs;
    for (const std::string& v : a.list("configs")) {
      int64_t k = 0;
      if (!parse_int64(v, &k) || k < 0) throw UsageError("--configs: '" + v + "' is not a config index");
      configs.push_back(k);
    }
    // (the file is an .npz: inside the data's tree it would be read as a graph, or fail its reader)
    if (const std::string inside = data_folder_holding(a.str("data"), a.str("out"), true); !inside.empty())
      throw UsageError("--out " + a.str("out") + ": lies inside " + inside +
                       ", where --data's graphs are read; it would be read as a graph there: write it outside");
    check_output("out", a.str("out"), [&] {
      std::vector<std::string> in = train::run_files(a.str("run"));
      in.push_back(files[at].path);
      return in;
    }());
    const train::ModelGraph g = train::prepare_graph(files[at], m.prep, false, m.model->needs().features);
    for (int64_t c : configs)
      if (c >= g.num_configs())
        throw UsageError(detail::str_cat("--configs", a.on("configs") ? "" : " (its default, 0,1,...,7)", ": config ",
                                         c, " is past the ", g.num_configs(), " configs of ", files[at].path,
                                         "; give indices below ", g.num_configs()));
    const train::ModelPass p = train::model_pass(m, g, configs, a.on("train"));
    std::vector<std::pair<std::string, Tensor>> out = {{"score", p.score},
                                                       {"loss", Tensor::full(Shape{1}, p.loss, DType::F64)}};
    for (const auto& [name, t] : p.grads) out.emplace_back("grad/" + name, t);
    for (const auto& [name, t] : p.params) out.emplace_back("param/" + name, t);
    for (const auto& [name, t] : p.changed) out.emplace_back("param_after/" + name, t);
    const train::Batch& b = p.batch;
    for (const auto& [name, t] : b.named_arrays())
      if (t.defined()) out.emplace_back("batch/" + name, t);
    for (const auto& [f, t] : b.features.values) out.emplace_back(std::string("batch/") + f->name, t);
    save_npz(a.str("out"), out);
    Json j = Json::object();
    j.set("recipe", m.recipe->name);
    j.set("graph", g.file.id());
    j.set("configs", int64_t(configs.size()));
    j.set("loss", p.loss);
    j.set("mode", a.on("train") ? "train" : "eval");
    j.set("out", a.str("out"));
    std::printf("%s\n", j.dump().c_str());
    return 0;
  };
  return c;
}

Command models_command() {
  Command c;
  c.name = "models";
  c.summary = "the training recipes, one line each";
  c.run = [](const Args&) {
    for (const train::Recipe& r : train::recipes())
      std::printf("%-22s %-6s %s\n", r.name.c_str(), r.kind.c_str(), r.summary.c_str());
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
