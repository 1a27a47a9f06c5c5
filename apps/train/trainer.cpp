#include "apps/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <numeric>
#include <sstream>

#include "apps/checkpoint.h"
#include "autograd/ops.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/npz.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "runtime/allocator.h"
#include "runtime/cuda.h"

namespace gnn::train {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kCheckpointFormat = 1;
constexpr uint64_t kGraphBudget = uint64_t(4) << 30;  // prepared graphs kept in memory

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Tensor text_tensor(const std::string& s) {
  return Tensor::from_vector(std::vector<uint8_t>(s.begin(), s.end()));
}
std::string tensor_text(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end() && it->second.dtype() == DType::U8 && it->second.dim() == 1, file, ": '", key,
            "' is missing (not a gnn train checkpoint?)");
  return std::string(reinterpret_cast<const char*>(it->second.u8()), size_t(it->second.numel()));
}
Tensor i64_tensor(int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}); }
Tensor f64_tensor(double v) { return Tensor::from_vector(std::vector<double>{v}); }
int64_t get_i64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end() && it->second.numel() == 1 && it->second.dtype() == DType::I64, file, ": '", key,
            "' is missing or not one int64");
  return it->second.i64()[0];
}
double get_f64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end() && it->second.numel() == 1 && it->second.dtype() == DType::F64, file, ": '", key,
            "' is missing or not one float64");
  return it->second.f64()[0];
}

// Reads the recipe, hyper-parameters and preprocessing of a checkpoint (no weights).
struct Meta {
  const Recipe* recipe = nullptr;
  HParams hparams;
  Preprocessing prep;
  std::map<std::string, Tensor> arrays;  // the non-parameter arrays
};
Meta read_meta(const std::string& path) {
  GNN_CHECK(fs::exists(path), path, ": no such checkpoint");
  NpzReader r(path);
  std::vector<std::string> keys;
  for (const std::string& k : r.keys())
    if (k.rfind("params/", 0) != 0 && k.rfind("optim/", 0) != 0) keys.push_back(k);
  Meta m;
  m.arrays = r.load_keys(keys);
  const int64_t format = get_i64(m.arrays, "meta/format", path);
  GNN_CHECK(format == kCheckpointFormat, path, ": checkpoint format ", format, ", this build reads ", kCheckpointFormat);
  m.recipe = &find_recipe(tensor_text(m.arrays, "meta/recipe", path));
  m.hparams = HParams::from_json(tensor_text(m.arrays, "meta/hparams", path), path + ": meta/hparams");
  // A checkpoint written before a hyper-parameter existed (--share) runs with that one's default.
  for (const auto& [name, value] : m.recipe->defaults().values) m.hparams.values.emplace(name, value);
  m.prep = Preprocessing::load(m.arrays, path);
  return m;
}

ModelDims dims_of(const Preprocessing& p) { return {p.node_features(), p.config_features()}; }

// Seeds for one (epoch, batch): the order of graphs of an epoch and everything sampled in a batch
// depend on these alone, so a resumed run draws exactly what the unbroken run drew.
uint64_t stream_seed(uint64_t seed, int64_t epoch, int64_t batch) {
  Rng r(seed ^ (uint64_t(epoch + 1) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(batch + 2) * 0xC2B2AE3D27D4EB4Full));
  return r.next();
}

// The ranking losses see only the order of the targets; the MSE term (and the mse loss) fits the
// prediction to log(target), which keeps it on the scale the ranking losses use whatever the spread of
// the runtimes (synthetic and real tile targets span 1 to 10^4 times the default config's).
// The losses run on the host in double (nn/loss.cpp). A GPU prediction comes back once, here, and the
// loss stays on the host: the step reads its value and seeds the backward without waiting for the
// device again, and the gradient goes back to the device in one queued upload.
ag::Var batch_loss(const HParams& h, const ag::Var& device_pred, const Batch& b) {
  const std::string& kind = h.str("loss");
  const ag::Var pred = ag::to_device(device_pred, Device::cpu());
  Tensor log_target = Tensor::empty(b.target.shape(), DType::F64);
  for (int64_t i = 0; i < b.target.numel(); ++i) log_target.f64()[i] = std::log(b.target.f64()[i]);
  ag::Var loss;
  if (kind == "listmle") loss = nn::list_mle_loss(pred, b.target, b.group_ptr, h.num("temperature"));
  else if (kind == "hinge") loss = nn::pairwise_hinge_loss(pred, b.target, b.group_ptr, h.num("margin"));
  else if (kind == "logistic") loss = nn::pairwise_logistic_loss(pred, b.target, b.group_ptr);
  else if (kind == "mse") loss = nn::mse_loss(pred, log_target);
  else GNN_FAIL("--loss: unknown loss '", kind, "' (listmle, hinge, logistic, mse)");
  const double w = h.num("mse-weight");
  if (w > 0 && kind != "mse") loss = ag::add(loss, ag::scale(nn::mse_loss(pred, log_target), w));
  return loss;
}

// The graphs a non-finite value came from: the first graph whose prediction is not finite, or all.
std::string culprit(const ag::Var& pred, const Batch& b) {
  const Tensor p = pred.value().on(Device::cpu());
  for (int64_t i = 0; i < p.numel(); ++i)
    if (!std::isfinite(p.f32()[i])) return b.ids[size_t(i / b.configs)];
  std::string all;
  for (const std::string& id : b.ids) all += (all.empty() ? "" : ", ") + id;
  return all;
}

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60), (long long)(t % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

// metrics.jsonl without the lines of epochs after `epochs` (a resumed run writes them again) and
// without a torn last line.
void trim_metrics(const std::string& path, int64_t epochs) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string keep, line;
  while (std::getline(in, line)) {
    try {
      const Json j = Json::parse(line, path);
      if (j["epoch"].as_int() <= epochs) keep += line + "\n";
    } catch (const Error&) {
      // a line cut short by the interruption: dropped
    }
  }
  write_file_atomic(path, keep);
}

void append_line(const std::string& path, const std::string& line) {
  FILE* f = std::fopen(path.c_str(), "a");
  GNN_CHECK(f, path, ": cannot append");
  std::fprintf(f, "%s\n", line.c_str());
  std::fflush(f);
  ::fsync(::fileno(f));
  std::fclose(f);
}

}  // namespace

std::vector<DatasetFile> kind_files(const std::string& data, const std::string& kind, const std::string& split) {
  WalkOptions wo;
  wo.splits = {split};
  std::vector<DatasetFile> out;
  for (DatasetFile& f : walk_dataset(data, wo))
    if (f.collection.kind == kind) out.push_back(std::move(f));
  return out;
}

std::string run_checkpoint(const std::string& run, const std::string& which) {
  GNN_CHECK(fs::is_directory(run), "--run ", run, ": not a directory");
  const std::string best = (fs::path(run) / "best.npz").string(), last = (fs::path(run) / "model.npz").string();
  if (which == "best") {
    GNN_CHECK(fs::exists(best), "--checkpoint best: ", best, " does not exist (the run had no valid split?)");
    return best;
  }
  GNN_CHECK(which == "last" || which == "auto", "--checkpoint: expected best, last or auto, got '", which, "'");
  if (which == "auto" && fs::exists(best)) return best;
  GNN_CHECK(fs::exists(last), "--run ", run, ": no model.npz (not a gnn train run directory?)");
  return last;
}

LoadedModel load_model(const std::string& checkpoint) {
  Meta m = read_meta(checkpoint);
  LoadedModel out;
  out.recipe = m.recipe;
  out.hparams = m.hparams;
  out.prep = m.prep;
  Rng rng(0);
  out.model = m.recipe->build(m.hparams, dims_of(m.prep), rng);
  load_checkpoint(checkpoint, out.model->parameters(), nullptr);
  out.model->eval();
  out.path = checkpoint;
  out.epoch = get_i64(m.arrays, "state/epoch", checkpoint);
  return out;
}

std::vector<double> predict_configs(RankModel& model, const ModelGraph& g, const std::vector<int64_t>& configs,
                                    int64_t chunk) {
  GNN_CHECK(chunk >= 1, "--eval-chunk must be at least 1");
  ag::NoGrad no_grad;
  const auto params = model.parameters();
  const Device dev = params.empty() ? Device::cpu() : params.front().var.device();
  // Every chunk's prediction lands in one buffer on the model's device, read back once at the end: on a
  // GPU the host builds chunk k + 1 while the device runs chunk k, and waits for the device once per graph.
  const int64_t n = int64_t(configs.size());
  Tensor all;
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t end = std::min(n, at + chunk);
    const std::vector<int64_t> part(configs.begin() + at, configs.begin() + end);
    const Batch b = make_batch({&g}, {part}).to(dev);
    const Tensor p = model.forward(b).value();
    if (!all.defined()) all = Tensor::empty(Shape{n}, p.dtype(), p.device());
    all.slice(at, end).copy_from(p);  // (which refuses a prediction of another size or dtype)
  }
  std::vector<double> out = all.defined() ? all.on(Device::cpu()).astype(DType::F64).to_vector<double>() : std::vector<double>{};
  // A diverged model may predict NaN or Inf: those configs rank last (and the score shows it).
  int64_t bad = 0;
  for (double& v : out)
    if (!std::isfinite(v)) v = std::numeric_limits<double>::max(), ++bad;
  if (bad) std::fprintf(stderr, "gnn: warning: %s: %lld predictions are not finite; ranked last\n", g.file.id().c_str(), (long long)bad);
  return out;
}

std::vector<int64_t> ranking_order(const std::vector<double>& p, const std::vector<int64_t>& configs) {
  GNN_CHECK(p.size() == configs.size(), "ranking_order: ", p.size(), " scores for ", configs.size(), " configs");
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  // predict_configs has made non-finite scores the largest double, so this is a strict weak order.
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return p[size_t(a)] < p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && configs[size_t(a)] < configs[size_t(b)]);
  });
  return order;
}

Evaluation evaluate(RankModel& model, GraphSource& src, int64_t chunk, const std::string& eval_indices_dir) {
  Evaluation ev;
  std::map<std::string, std::map<std::string, std::vector<int64_t>>> subsets;  // "xla_default" -> stem -> configs
  for (size_t i = 0; i < src.files().size(); ++i) {
    const DatasetFile& f = src.files()[i];
    const auto g = src.get(i);
    GNN_CHECK(!g->target.empty(), f.path, ": no runtimes, so it cannot be scored (a test file?)");
    std::vector<int64_t> configs;
    if (f.collection.is_layout() && !eval_indices_dir.empty() && !f.collection.search.empty()) {
      const std::string key = f.collection.source + "_" + f.collection.search;
      if (!subsets.count(key)) {
        const std::string p = (fs::path(eval_indices_dir) / (key + ".json")).string();
        subsets[key] = fs::exists(p) ? load_eval_indices(p) : std::map<std::string, std::vector<int64_t>>{};
      }
      auto it = subsets[key].find(f.stem);
      if (it != subsets[key].end()) configs = it->second;
    }
    for (int64_t c : configs)
      GNN_CHECK(c >= 0 && c < g->num_configs(), eval_indices_dir, ": eval index ", c, " for ", f.stem, " is outside its ",
                g->num_configs(), " configs");
    if (configs.empty()) {
      configs.resize(size_t(g->num_configs()));
      std::iota(configs.begin(), configs.end(), 0);
    }
    const std::vector<double> p = predict_configs(model, *g, configs, chunk);
    std::vector<double> y;
    for (int64_t c : configs) y.push_back(g->target[size_t(c)]);
    // Scored as the ranking gnn predict writes (ties in p, as for repeated configs, broken by config
    // index), so eval, the valid score that picks the best epoch, and a scored submission agree exactly.
    const std::vector<int64_t> order = ranking_order(p, configs);
    std::vector<double> rank(p.size());
    for (size_t r = 0; r < order.size(); ++r) rank[size_t(order[r])] = double(r);
    ev.scores.emplace_back(f.collection.str(), score_predictions(f.id(), f.collection.is_layout(), rank, y, int64_t(p.size())));
  }
  GNN_CHECK(!ev.scores.empty(), "evaluate: no graphs");
  ev.score = mean_score(ev.scores);
  ev.json = summary_json(ev.scores);
  return ev;
}

// ---- training -------------------------------------------------------------------------------------------

namespace {

struct State {
  int64_t epoch = 0, batch = 0, step = 0, skipped = 0;  // the next batch to run
  double loss_sum = 0, seconds = 0, best_score = -INFINITY;
  int64_t loss_n = 0, configs = 0, best_epoch = 0;
  void save(std::vector<std::pair<std::string, Tensor>>& out) const {
    for (auto [k, v] : {std::pair<const char*, int64_t>{"epoch", epoch}, {"batch", batch}, {"step", step},
                        {"skipped", skipped}, {"loss_n", loss_n}, {"configs", configs}, {"best_epoch", best_epoch}})
      out.emplace_back(std::string("state/") + k, i64_tensor(v));
    for (auto [k, v] : {std::pair<const char*, double>{"loss_sum", loss_sum}, {"seconds", seconds}, {"best_score", best_score}})
      out.emplace_back(std::string("state/") + k, f64_tensor(v));
  }
  void load(const std::map<std::string, Tensor>& a, const std::string& f) {
    epoch = get_i64(a, "state/epoch", f), batch = get_i64(a, "state/batch", f), step = get_i64(a, "state/step", f);
    skipped = get_i64(a, "state/skipped", f), loss_n = get_i64(a, "state/loss_n", f), configs = get_i64(a, "state/configs", f);
    best_epoch = get_i64(a, "state/best_epoch", f);
    loss_sum = get_f64(a, "state/loss_sum", f), seconds = get_f64(a, "state/seconds", f);
    best_score = get_f64(a, "state/best_score", f);
  }
};

class Progress {
 public:
  explicit Progress(int mode) : bar_(mode == 1 || (mode < 0 && ::isatty(::fileno(stderr)))) {}  // 0: no bar
  void update(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss, double cps, double eta) {
    if (!bar_) return;
    const int width = 24, done = int(double(width) * double(batch) / double(std::max<int64_t>(1, batches)));
    std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %lld/%lld  loss %.4f  %.0f configs/s  ETA %s   ", (long long)epoch,
                 (long long)epochs, std::string(size_t(done), '#').c_str(), std::string(size_t(width - done), '.').c_str(),
                 (long long)batch, (long long)batches, loss, cps, fmt_duration(eta).c_str());
    std::fflush(stderr);
  }
  void end_line() {
    if (bar_) std::fprintf(stderr, "\n");
  }

 private:
  bool bar_;
};

}  // namespace

namespace {

// What a run is, resolved from the options and checked before anything is written: the recipe and its
// hyper-parameters, and on --resume the run's own settings where the command line leaves them out.
struct RunPlan {
  const Recipe* recipe = nullptr;
  HParams hp;
  Meta meta;  // the checkpoint's, on resume
  bool resuming = false;
  uint64_t seed = 1;
  std::string data, eval_indices;
  int64_t epochs = 10, steps = 0, max_graphs = 0;
  std::vector<std::string> notes;  // what a resumed run took from the command line instead of its own
};

template <class... Parts>
[[noreturn]] void bad_option(const Parts&... parts) {
  throw OptionError(detail::str_cat(parts...));
}

std::string stored_text(const Meta& m, const std::string& key) {
  return m.arrays.count(key) ? tensor_text(m.arrays, key, "checkpoint") : "";
}
int64_t stored_i64(const Meta& m, const std::string& key, int64_t fallback) {
  return m.arrays.count(key) ? get_i64(m.arrays, key, "checkpoint") : fallback;
}
bool same_path(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

RunPlan plan_new_run(const TrainOptions& o) {
  RunPlan p;
  if (o.recipe.empty()) bad_option("--model: no recipe given (gnn models lists them)");
  p.recipe = &find_recipe(o.recipe);
  p.hp = p.recipe->defaults();
  for (const auto& [k, v] : o.hparams) p.hp.values[k] = v;
  if (o.data.empty()) bad_option("--data: no dataset given");
  p.data = o.data, p.eval_indices = o.eval_indices;
  p.epochs = o.epochs > 0 ? o.epochs : 10, p.steps = std::max<int64_t>(o.steps, 0), p.max_graphs = o.max_graphs;
  p.seed = o.seed.value_or(1);
  return p;
}

RunPlan plan_resumed_run(const TrainOptions& o, const std::string& model_path) {
  RunPlan p;
  p.resuming = true;
  p.meta = read_meta(model_path);
  p.recipe = p.meta.recipe, p.hp = p.meta.hparams;
  const std::string& run = o.out;
  if (!o.recipe.empty() && o.recipe != p.recipe->name)
    bad_option("--model ", o.recipe, ": the run in ", run, " trains ", p.recipe->name, "; a resumed run keeps its recipe");
  for (const auto& [k, v] : o.hparams)
    if (!p.hp.values.count(k) || p.hp.values.at(k) != v)
      bad_option("--", k, " ", v, ": the run in ", run, " was started with ",
                 p.hp.values.count(k) ? p.hp.values.at(k) : "no such flag", "; a resumed run keeps its hyper-parameters");
  p.seed = uint64_t(get_i64(p.meta.arrays, "meta/seed", model_path));
  if (o.seed && *o.seed != p.seed)
    bad_option("--seed ", *o.seed, ": the run in ", run, " was started with seed ", p.seed, "; a resumed run keeps its seed");
  // Checkpoints written before these were recorded lack them: the command line's values are taken.
  const bool recorded = p.meta.arrays.count("meta/epochs") > 0;
  const std::string older = " (not recorded: the checkpoint was written by an older gnn)";
  const int64_t max_graphs = stored_i64(p.meta, "meta/max_graphs", o.max_graphs);
  if (o.max_graphs > 0 && o.max_graphs != max_graphs)
    bad_option("--max-graphs ", o.max_graphs, ": the run in ", run, " was started with ",
               max_graphs ? std::to_string(max_graphs) : "every graph", "; a resumed run keeps its graphs");
  p.max_graphs = max_graphs;

  // The rest may change: each change is said in the output.
  const std::string data = stored_text(p.meta, "meta/data");
  p.data = o.data.empty() ? data : o.data;
  if (p.data.empty())
    bad_option("--data: the run in ", run, " does not record its dataset (written by an older gnn); pass --data");
  if (!o.data.empty() && !data.empty() && !same_path(o.data, data))
    p.notes.push_back("--data " + o.data + ": the run was started on " + data + "; its preprocessing is kept");
  const int64_t epochs = stored_i64(p.meta, "meta/epochs", 10), steps = stored_i64(p.meta, "meta/steps", 0);
  p.epochs = o.epochs > 0 ? o.epochs : epochs;
  p.steps = o.steps > 0 ? o.steps : o.steps < 0 ? 0 : steps;
  if (p.epochs != epochs || !recorded)
    p.notes.push_back("--epochs " + std::to_string(p.epochs) + ": the run was started with " +
                      (recorded ? std::to_string(epochs) : "?" + older) + "; it now ends after epoch " +
                      std::to_string(p.epochs) + (p.steps > 0 ? " or step " + std::to_string(p.steps) : ""));
  if (p.steps != steps && recorded)
    p.notes.push_back("--steps " + (p.steps ? std::to_string(p.steps) : std::string("0 (no limit)")) +
                      ": the run was started with " + (steps ? std::to_string(steps) : "no step limit"));
  const std::string eval_indices = stored_text(p.meta, "meta/eval_indices");
  p.eval_indices = o.eval_indices.empty() ? eval_indices : o.eval_indices;
  if (!o.eval_indices.empty() && !same_path(o.eval_indices, eval_indices))
    p.notes.push_back("--eval-indices " + o.eval_indices + ": the run was started with " +
                      (eval_indices.empty() ? (recorded ? "none" : "?" + older) : eval_indices));
  return p;
}

RunPlan plan_run(const TrainOptions& o, const std::string& model_path) {
  RunPlan p = o.resume && fs::exists(model_path) ? plan_resumed_run(o, model_path) : plan_new_run(o);
  if (std::string e = check_hparams(p.recipe->hparams, p.hp, p.recipe->name); !e.empty()) bad_option(e);
  const std::string recorded = p.resuming ? " (recorded in the run's model.npz; pass it again to change it)" : "";
  if (!fs::exists(p.data))
    bad_option("--data ", p.data, ": no such file or directory", o.data.empty() ? recorded : "");
  if (!p.eval_indices.empty() && !fs::is_directory(p.eval_indices))
    bad_option("--eval-indices ", p.eval_indices, ": not a directory", o.eval_indices.empty() ? recorded : "");
  if (o.memory_limit < 0) bad_option("--memory-limit: must be >= 0 bytes, got ", o.memory_limit);
  return p;
}

// Sets the host memory limit for a scope and puts the previous one back.
class ScopedMemoryLimit {
 public:
  explicit ScopedMemoryLimit(int64_t bytes) : active_(bytes > 0), previous_(active_ ? host_set_limit(bytes) : 0) {}
  ~ScopedMemoryLimit() {
    if (active_) host_set_limit(previous_);
  }
  ScopedMemoryLimit(const ScopedMemoryLimit&) = delete;
  ScopedMemoryLimit& operator=(const ScopedMemoryLimit&) = delete;

 private:
  bool active_;
  int64_t previous_;
};

// The whole run; `working_on` names the phase or step at hand for the memory-limit error.
TrainResult train_run(const TrainOptions& o, std::string& working_on) {
  if (o.out.empty()) bad_option("--out: no run directory given");
  if (o.epochs < 0) bad_option("--epochs must be at least 1");
  const fs::path run(o.out);
  const std::string model_path = (run / "model.npz").string(), best_path = (run / "best.npz").string(),
                    metrics_path = (run / "metrics.jsonl").string();
  GNN_CHECK(o.resume || !fs::exists(model_path), "--out ", o.out,
            ": already holds a run (model.npz); pass --resume to continue it, or choose another directory");

  // The recipe and its hyper-parameters: the command line's for a new run, the checkpoint's on resume.
  const RunPlan plan = plan_run(o, model_path);
  if (o.resume && !plan.resuming)
    std::fprintf(stderr, "gnn train: --resume: %s does not exist yet; starting a new run\n", model_path.c_str());
  const bool resuming = plan.resuming;
  const Recipe* recipe = plan.recipe;
  const HParams& hp = plan.hp;
  const Meta& meta = plan.meta;
  const uint64_t seed = plan.seed;
  Preprocessing prep = plan.meta.prep;
  const bool layout = recipe->kind == "layout";
  const int64_t G = hp.integer("batch-graphs"), C = hp.integer("configs"), chunk = hp.integer("eval-chunk");
  const int64_t segment = layout ? hp.integer("segment") : 0;
  const int64_t epochs = plan.epochs;
  const ScopedMemoryLimit memory_limit(o.memory_limit);
  const uint64_t graph_budget =
      o.memory_limit > 0 ? std::min<uint64_t>(kGraphBudget, uint64_t(o.memory_limit) / 4) : kGraphBudget;
  for (const std::string& f : {model_path, best_path, metrics_path}) remove_stale_temporaries(f);

  std::vector<DatasetFile> train_files = kind_files(plan.data, recipe->kind, "train");
  std::vector<DatasetFile> valid_files = kind_files(plan.data, recipe->kind, "valid");
  if (plan.max_graphs > 0) {
    if (int64_t(train_files.size()) > plan.max_graphs) train_files.resize(size_t(plan.max_graphs));
    if (int64_t(valid_files.size()) > plan.max_graphs) valid_files.resize(size_t(plan.max_graphs));
  }
  GNN_CHECK(!train_files.empty(), "--data ", plan.data, ": no ", recipe->kind, " train files for ", recipe->name);
  working_on = "loading and preprocessing the training graphs";
  if (!resuming) {
    prep = fit_preprocessing(train_files, layout, parse_feature_transform(hp.str("node-transform")),
                             layout ? FeatureTransform::kNone : parse_feature_transform(hp.str("config-transform")),
                             layout ? int(hp.integer("khops")) : -1);
    fs::create_directories(run);
  }

  working_on = "building the model and loading its checkpoint";
  Rng init_rng(seed);
  std::unique_ptr<RankModel> model = recipe->build(hp, dims_of(prep), init_rng);
  const auto params = model->parameters();
  nn::Adam opt(nn::one_group(params, hp.num("weight-decay")), hp.num("lr"), /*decoupled=*/true);
  State st;
  if (resuming) {
    load_checkpoint(model_path, params, &opt);
    st.load(meta.arrays, model_path);
    trim_metrics(metrics_path, st.epoch);
  } else if (fs::exists(metrics_path)) {
    fs::remove(metrics_path);
  }
  nn::move_parameters(*model, o.device);  // Adam moves its (host-loaded) moments on its first GPU step

  GraphSource train_src(train_files, prep, graph_budget), valid_src(valid_files, prep, graph_budget);
  const int64_t n = int64_t(train_files.size()), batches = (n + G - 1) / G;
  const int64_t total_steps = plan.steps > 0 ? std::min(plan.steps, epochs * batches) : epochs * batches;
  nn::LrSchedule sched;
  sched.kind = hp.str("schedule") == "cosine" ? nn::LrSchedule::Kind::kCosine : nn::LrSchedule::Kind::kConstant;
  sched.base = hp.num("lr"), sched.warmup = hp.integer("warmup"), sched.total = total_steps;
  const double clip = hp.num("clip");

  auto save = [&](const std::string& path, bool with_optimizer) {
    working_on = detail::str_cat("writing ", path);
    std::vector<std::pair<std::string, Tensor>> extra = {{"meta/format", i64_tensor(kCheckpointFormat)},
                                                         {"meta/recipe", text_tensor(recipe->name)},
                                                         {"meta/hparams", text_tensor(hp.json())},
                                                         {"meta/seed", i64_tensor(int64_t(seed))},
                                                         {"meta/data", text_tensor(fs::absolute(plan.data).string())},
                                                         {"meta/epochs", i64_tensor(epochs)},
                                                         {"meta/steps", i64_tensor(plan.steps)},
                                                         {"meta/max_graphs", i64_tensor(plan.max_graphs)},
                                                         {"meta/eval_indices", text_tensor(plan.eval_indices.empty() ? ""
                                                                                   : fs::absolute(plan.eval_indices).string())}};
    prep.save(extra);
    st.save(extra);
    save_checkpoint(path, params, with_optimizer ? &opt : nullptr, extra);
  };

  if (!o.quiet) std::printf("gnn train: %s on %lld train / %lld valid %s graphs; %lld graphs x %lld configs per step, %lld steps "
              "per epoch%s\n",
              recipe->name.c_str(), (long long)n, (long long)valid_files.size(), recipe->kind.c_str(), (long long)G,
              (long long)C, (long long)batches, resuming ? " (resumed)" : "");
  if (resuming && !o.quiet)
    std::printf("resuming at epoch %lld, batch %lld of %lld (after step %lld)\n", (long long)st.epoch + 1,
                (long long)st.batch + 1, (long long)((int64_t(train_files.size()) + G - 1) / G), (long long)st.step);
  for (const std::string& note : plan.notes) std::printf("resuming with %s\n", note.c_str());
  std::fflush(stdout);

  Progress progress(o.progress);
  int64_t step_waits = 0, waited_steps = 0;  // the host's waits for the GPU within the steps of this process
  auto last_ckpt = Clock::now();
  double last_score = NAN;
  bool done = st.step >= total_steps || st.epoch >= epochs;
  const int64_t first_step = st.step;
  while (!done) {
    const int64_t e = st.epoch;
    Rng order_rng(stream_seed(seed, e, -1));
    const std::vector<int64_t> order = sample_without_replacement(n, n, order_rng);
    const double epoch_seconds_before = st.seconds;
    const int64_t epoch_configs_before = st.configs, first_batch = st.batch;
    // Batch bi is a function of (seed, epoch, bi) alone, so on a GPU the host builds batch bi + 1 on a
    // second thread while the device runs step bi (the host is otherwise idle, waiting on the loss).
    auto build_batch = [&, e](int64_t bi) {
      Rng rng(stream_seed(seed, e, bi));
      std::vector<std::shared_ptr<const ModelGraph>> held;
      std::vector<const ModelGraph*> graphs;
      int64_t cb = C;
      for (int64_t k = bi * G; k < std::min(n, (bi + 1) * G); ++k) {
        held.push_back(train_src.get(size_t(order[size_t(k)])));
        graphs.push_back(held.back().get());
        GNN_CHECK(held.back()->num_configs() >= 2 && !held.back()->target.empty(), held.back()->file.path,
                  ": a training graph needs runtimes and at least 2 configs");
        cb = std::min(cb, held.back()->num_configs());
      }
      std::vector<std::vector<int64_t>> configs;
      for (const ModelGraph* g : graphs) configs.push_back(sample_without_replacement(g->num_configs(), cb, rng));
      return make_batch(graphs, configs, segment, &rng);
    };
    const bool prefetch = o.prefetch < 0 ? o.device.is_cuda() : o.prefetch > 0;
    std::future<Batch> next;
    for (int64_t bi = st.batch; bi < batches; ++bi) {
      working_on = detail::str_cat("step ", st.step + 1, " (graphs");
      for (int64_t k = bi * G; k < std::min(n, (bi + 1) * G); ++k)
        working_on.append(" ").append(train_files[size_t(order[size_t(k)])].id());
      working_on += ")";
      const auto t_step = Clock::now();
      const int64_t waits_before = cuda_host_waits();
      const Batch b = (next.valid() ? next.get() : build_batch(bi)).to(o.device);
      if (prefetch && bi + 1 < batches && st.step + 1 < total_steps)
        next = std::async(std::launch::async, build_batch, bi + 1);

      model->train();
      opt.zero_grad();
      const ag::Var pred = model->forward(b);
      const ag::Var loss = batch_loss(hp, pred, b);
      const double lv = loss.value().item();
      bool finite = std::isfinite(lv);
      std::string what = "loss";
      if (finite) {
        ag::backward(loss);
        const double norm = nn::clip_grad_norm(params, clip > 0 ? clip : INFINITY);
        finite = std::isfinite(norm);
        what = "gradient";
      } else {
        ag::clear_tape();
      }
      if (!finite) {
        GNN_CHECK(o.skip_nonfinite, "non-finite ", what, " at step ", st.step + 1, " (epoch ", e + 1, ", batch ", bi + 1,
                  ") from graph ", culprit(pred, b), "; lower --lr, set --clip, or pass --skip-nonfinite to skip such batches");
        opt.zero_grad();
        st.skipped += 1;
      } else {
        opt.set_lr(sched.at(st.step));
        opt.step();
        st.loss_sum += lv, st.loss_n += 1;
      }
      if (o.device.is_cuda()) step_waits += cuda_host_waits() - waits_before, waited_steps += 1;
      st.step += 1, st.batch = bi + 1, st.configs += b.graphs * b.configs;
      st.seconds += since(t_step);  // training time: batch building, forward, backward, step
      const double epoch_s = st.seconds - epoch_seconds_before;
      const double cps = double(st.configs - epoch_configs_before) / std::max(1e-9, epoch_s);
      const double steps_left = double(std::min(total_steps - st.step, (epochs - e) * batches - (bi + 1)));
      progress.update(e + 1, epochs, bi + 1, batches, st.loss_n ? st.loss_sum / double(st.loss_n) : NAN, cps,
                      steps_left * epoch_s / double(bi + 1 - first_batch));
      const bool last_batch = bi + 1 == batches || st.step >= total_steps;
      if (!last_batch && since(last_ckpt) >= o.checkpoint_minutes * 60) {
        save(model_path, true);
        last_ckpt = Clock::now();
      }
      if (o.kill_after_steps > 0 && st.step == o.kill_after_steps && !last_batch) std::raise(SIGKILL);
      if (st.step >= total_steps) break;
    }
    progress.end_line();
    // The end of an epoch (or of the step budget): validate, log, checkpoint.
    const double epoch_s = st.seconds - epoch_seconds_before;
    Json line = Json::object();
    line.set("epoch", e + 1);
    line.set("step", st.step);
    line.set("train_loss", st.loss_n ? st.loss_sum / double(st.loss_n) : NAN);
    line.set("lr", opt.lr());
    line.set("configs_per_s", double(st.configs - epoch_configs_before) / std::max(1e-9, epoch_s));
    line.set("train_seconds", epoch_s);
    line.set("skipped", st.skipped);
    double valid_score = NAN;
    if (!valid_files.empty()) {
      model->eval();
      working_on = detail::str_cat("validation after epoch ", e + 1);
      const auto t_valid = Clock::now();
      const Evaluation ev = evaluate(*model, valid_src, chunk, plan.eval_indices);
      line.set("valid_seconds", since(t_valid));
      valid_score = ev.score;
      last_score = valid_score;
      line.set("valid_score", valid_score);
      line.set("valid", Json::parse(ev.json, "valid metrics"));
    }
    st.epoch = e + 1, st.batch = 0, st.loss_sum = 0, st.loss_n = 0;
    if (std::isfinite(valid_score) && valid_score > st.best_score) {
      st.best_score = valid_score, st.best_epoch = st.epoch;
      save(best_path, false);
    }
    append_line(metrics_path, line.dump());
    save(model_path, true);
    last_ckpt = Clock::now();
    if (!o.quiet) {
      std::printf("epoch %lld/%lld  step %lld  train_loss %.5f", (long long)st.epoch, (long long)epochs,
                  (long long)st.step, line["train_loss"].is_null() ? NAN : line["train_loss"].as_number());
      if (std::isfinite(valid_score)) std::printf("  valid_score %.4f", valid_score);
      std::printf("  %.0f configs/s  %.1f s\n", line["configs_per_s"].as_number(), epoch_s);
      std::fflush(stdout);
    }
    if (o.kill_after_steps > 0 && st.step == o.kill_after_steps) std::raise(SIGKILL);
    done = st.step >= total_steps || st.epoch >= epochs;
  }

  // A finished run given a new length, data or eval folder runs no step: record the change all the same.
  if (resuming && !plan.notes.empty() && st.step == first_step) save(model_path, true);

  TrainResult r;
  r.epochs = st.epoch, r.steps = st.step, r.skipped = st.skipped, r.best_score = st.best_score, r.seconds = st.seconds;
  r.configs = st.configs, r.last_score = last_score;
  Json j = Json::object();
  j.set("run", o.out);
  j.set("model", recipe->name);
  j.set("epochs", st.epoch);
  j.set("steps", st.step);
  j.set("skipped", st.skipped);
  j.set("train_seconds", st.seconds);
  if (std::isfinite(st.best_score)) {
    j.set("best_valid_score", st.best_score);
    j.set("best_epoch", st.best_epoch);
  }
  j.set("configs_per_s", double(st.configs) / std::max(1e-9, st.seconds));
  j.set("peak_tensor_mb", double(host_memory_stats().peak_bytes) / 1e6);
  if (o.device.is_cuda()) {
    j.set("device", o.device.str());
    j.set("peak_device_mb", double(cuda_memory_stats(o.device.index).peak_bytes) / 1e6);
    if (waited_steps) j.set("device_waits_per_step", double(step_waits) / double(waited_steps));
  }
  r.json = j.dump();
  return r;
}

}  // namespace

TrainResult run_training(const TrainOptions& o) {
  std::string working_on = "starting the run";
  try {
    return train_run(o, working_on);
  } catch (const MemoryLimitError& e) {
    GNN_FAIL(working_on, " does not fit in the memory limit of ", e.limit, " bytes (--memory-limit): it needs more than ",
             e.in_use + e.requested, " bytes of tensors (", e.requested, " asked for with ", e.in_use,
             " in use); raise --memory-limit, or start a new run with lower --configs or --batch-graphs (layout: or "
             "--segment)");
  }
}

}  // namespace gnn::train
