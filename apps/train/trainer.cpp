// gnn train's loop: a Run is set up from the options (new or resumed, checked before anything is
// written), then trains epoch by epoch; each step builds a batch (on a second thread while a GPU runs
// the previous one), runs forward, loss, backward and the optimiser; each epoch ends with validation,
// a line of metrics.jsonl and a checkpoint. The run directory's files are in run_state.h.
#include "apps/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "apps/checkpoint.h"
#include "apps/scoring.h"
#include "apps/train/data_parallel.h"
#include "apps/train/profile.h"
#include "apps/train/progress.h"
#include "apps/train/run_state.h"
#include "apps/train/step_graph.h"
#include "autograd/ops.h"
#include "dist/comm.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/npz.h"
#include "kernels/gemm.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "runtime/allocator.h"
#include "runtime/cuda.h"

namespace gnn::train {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kGraphBudget = uint64_t(4) << 30;  // prepared graphs kept in memory

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The process's host memory so far: the high-water mark of tensor bytes, the bytes held from the system
// (in use and cached, runtime/host_cache.h) and the allocations the cache served without new pages.
void set_host_memory(Json& j) {
  const MemoryStats m = host_memory_stats();
  j.set("peak_tensor_mb", double(m.peak_bytes) / 1e6);
  j.set("host_reserved_mb", double(m.reserved_bytes) / 1e6);
  j.set("host_reused_allocations", m.reused_allocations);
}

// Flags given on the command line that another setting of the run makes moot, refused rather than ignored
// (a new run only: a resumed one keeps what it was started with). `given`: the command line's.
void refuse_moot_flags(const Recipe& r, const HParams& hp, const TrainHParams& tp,
                       const std::map<std::string, std::string>& given) {
  auto on = [&](const char* flag) { return given.count(flag) > 0; };
  const std::string loss = "--loss " + hp.str("loss");
  for (const char* flag : {"temperature", "listmle-order"})
    if (on(flag) && tp.loss != TrainHParams::Loss::kListMle)
      bad_option("--", flag, ": acts on ListMLE; ", loss, " is not listmle");
  if (on("margin") && tp.loss != TrainHParams::Loss::kHinge)
    bad_option("--margin: the pairwise hinge's margin; ", loss, " is not hinge");
  if (on("mse-weight") && tp.mse_weight > 0 && tp.loss == TrainHParams::Loss::kMse)
    bad_option("--mse-weight: an MSE term beside the loss; --loss mse is the MSE already");
  if (on("dropout-mask") && hp.values.count("dropout") && hp.num("dropout") == 0)
    bad_option("--dropout-mask: the mask of --dropout; this run has --dropout 0");
  if (on("segment-backward") && tp.segment == 0)
    bad_option("--segment-backward: how --segment trains; this run has --segment 0");
  if (on("segment") && tp.segment > 0 && !r.takes_segment)
    bad_option("--segment: ", r.name, " takes no gradient cut through a range of nodes",
               r.name == "layout-gst" ? " (its own segments are --segment-nodes)" : "");
  if (on("sage-order") && hp.values.count("cross-attn") && hp.str("cross-attn") == "off")
    bad_option("--sage-order: the order of the SAGE blocks that narrow the width; with --cross-attn off none do");
  if (!r.reads_edges)
    for (const char* flag : {"edge-dropout", "khops-edges"})
      if (on(flag) && (std::string(flag) != "edge-dropout" || tp.edge_dropout > 0))
        bad_option("--", flag, ": acts on the graph's edges, and ", r.name, " passes no messages along them");
  if (on("accumulate") && tp.accumulate > tp.batch_graphs)
    bad_option("--accumulate ", tp.accumulate, ": a step of --batch-graphs ", tp.batch_graphs,
               " splits into at most that many micro-batches");
  if (on("tta") && tp.tta > 1 && !r.configs_interact(hp))
    bad_option("--tta ", tp.tta, ": averages over orders of the configs, and ", r.name, Recipe::kTtaMoot);
  // (a model whose configs interact, scoring a config alone, is not the function it trained: one whose norm
  // runs over the configs scores every config alike, and --tta has no order to change. predict_configs cuts
  // n configs into the fewest near-equal chunks: of at most 2, an odd n leaves one alone; at most 3 or more,
  // none for any n >= 2)
  if (on("eval-chunk") && tp.eval_chunk < 3 && r.configs_interact(hp))
    bad_option("--eval-chunk ", tp.eval_chunk, ": ", r.name, "'s configs interact (its norms or attention run over ",
               "the configs scored together), and chunks of at most ", tp.eval_chunk,
               " leave a config scored alone; give 3 or more");
}

// Seeds for one (epoch, batch): the order of graphs of an epoch and everything sampled in a batch
// depend on these alone, so a resumed run draws exactly what the unbroken run drew.
uint64_t stream_seed(uint64_t seed, int64_t epoch, int64_t batch) {
  Rng r(seed ^ (uint64_t(epoch + 1) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(batch + 2) * 0xC2B2AE3D27D4EB4Full));
  return r.next();
}

// The longest epoch list (--graph-repeats x training graphs) a run accepts: its order takes 8 bytes a
// graph, 512 MiB at this bound.
constexpr int64_t kMaxEpochList = int64_t(1) << 26;

// The generator of the graph at position j of batch `batch`: its configs and its segment are drawn from
// it alone, so they do not depend on which rank of a data-parallel job builds it (or on R).
Rng graph_rng(uint64_t seed, int64_t epoch, int64_t batch, int64_t j) {
  return Rng(stream_seed(seed, epoch, batch) ^ (uint64_t(j + 1) * 0xD6E8FEB86659FD93ull));
}

// The loss of a step is a table of terms, each a mean over the batch of its own count: the ranking term
// over groups (listmle) or ordered pairs (hinge, logistic), or a regression over predictions; the same
// pairwise loss over the ordered pairs of the whole batch, graphs mixed (--batch-pairs-weight: the 5th
// place's loss is half within each graph, half over its batch flattened); and the MSE term
// (--mse-weight) and the MAPE term (--mape-weight, layout) over predictions. A micro-batch of
// --accumulate, or a rank of a data-parallel job, weights each term by its share of the global count
// (Run::step), so the parts add up to the loss of the whole batch.
// The ranking losses see only the order of the targets; the MSE term (and the mse loss) fits the
// prediction to log(target), which keeps it on the scale the ranking losses use whatever the spread of
// the runtimes (synthetic and real tile targets span 1 to 10^4 times the default config's). The
// regressions read the prediction plus log_offset (Preprocessing::log_offset) as the log runtime. The
// MAPE term reads the prediction itself as seconds and the layout files' runtimes (nanoseconds) in
// seconds, as the 2nd place's xla loss did, which also sets the scale its margin of 0.01 s is read on.
// The losses run on the host in double (nn/loss.cpp). A GPU prediction comes back once, here, and the
// loss stays on the host: the step reads its value and seeds the backward without waiting for the
// device again, and the gradient goes back to the device in one queued upload.
struct LossInputs {
  const ag::Var& pred;  // on the host
  const ag::Var& log_pred;  // pred + log_offset
  const Tensor& log_target;
  const Batch& b;
};
struct LossTerm {
  const char* name = nullptr;
  double weight = 0;
  double (*count)(const Batch& b) = nullptr;  // what the term is a mean over
  std::function<ag::Var(const LossInputs&)> value;
};
double predictions(const Batch& b) { return double(b.graphs * b.configs); }
double groups(const Batch& b) { return double(b.group_ptr.numel() - 1); }
double ordered_pairs_in(const Batch& b, const Tensor& group_ptr) {  // pairs (i, j) of a group with t_i > t_j
  double n = 0;
  const double* t = b.target.f64();
  const int64_t* gp = group_ptr.i64();
  for (int64_t g = 0; g + 1 < group_ptr.numel(); ++g)
    for (int64_t i = gp[g]; i < gp[g + 1]; ++i)
      for (int64_t j = gp[g]; j < gp[g + 1]; ++j) n += t[i] > t[j] ? 1 : 0;
  return n;
}
double ordered_pairs(const Batch& b) { return ordered_pairs_in(b, b.group_ptr); }
// The whole batch as one group: every config of every graph (--batch-pairs-weight).
Tensor one_group(const Batch& b) { return Tensor::from_vector(std::vector<int64_t>{0, b.target.numel()}); }
double batch_pairs(const Batch& b) { return ordered_pairs_in(b, one_group(b)); }

std::vector<LossTerm> loss_terms(const TrainHParams& h) {
  using Loss = TrainHParams::Loss;
  LossTerm main, across;  // across: --batch-pairs-weight, the pairwise loss over the whole batch
  switch (h.loss) {
    case Loss::kListMle:
      main = {"listmle", 1, groups,
              [T = h.temperature, slowest = h.listmle_slowest_first](const LossInputs& in) {
                return nn::list_mle_loss(in.pred, in.b.target, in.b.group_ptr, T, slowest);
              }};
      break;
    case Loss::kHinge:
      main = {"hinge", 1, ordered_pairs, [m = h.margin](const LossInputs& in) {
                return nn::pairwise_hinge_loss(in.pred, in.b.target, in.b.group_ptr, m);
              }};
      across = {"batch-hinge", h.batch_pairs_weight, batch_pairs, [m = h.margin](const LossInputs& in) {
                  return nn::pairwise_hinge_loss(in.pred, in.b.target, one_group(in.b), m);
                }};
      break;
    case Loss::kLogistic:
      main = {"logistic", 1, ordered_pairs,
              [](const LossInputs& in) { return nn::pairwise_logistic_loss(in.pred, in.b.target, in.b.group_ptr); }};
      across = {"batch-logistic", h.batch_pairs_weight, batch_pairs,
                [](const LossInputs& in) { return nn::pairwise_logistic_loss(in.pred, in.b.target, one_group(in.b)); }};
      break;
    case Loss::kMse:
      main = {"mse", 1, predictions, [](const LossInputs& in) { return nn::mse_loss(in.log_pred, in.log_target); }};
      break;
    case Loss::kMape:
      main = {"mape", 1, predictions, [](const LossInputs& in) { return nn::log_mape_loss(in.log_pred, in.b.target); }};
      break;
  }
  // (with mape: both regressions, as DNNPerf trains; the mse loss has no second MSE term)
  const double w = h.loss == Loss::kMse ? 0 : h.mse_weight;
  std::vector<LossTerm> terms = {
      main,
      {"mse-term", w, predictions, [](const LossInputs& in) { return nn::mse_loss(in.log_pred, in.log_target); }},
      {"mape-term", h.mape_weight, predictions,
       [](const LossInputs& in) { return nn::mape_loss(in.pred, in.b.target, /*nanoseconds to seconds*/ 1e-9); }}};
  if (across.count) terms.push_back(across);  // the pairwise losses only
  return terms;
}

// Copies of one graph in a micro-batch (--graph-repeats) as one graph with the copies' configs side by
// side, for a model that scores each config on its own (BatchNeeds::merge_copies): the rows no config
// reaches then run once, not once a copy. Each copy's configs stay a ranking group of their own (Batch::
// group_ptr, set by the caller), so the loss sums the same terms over the same slates; only the order of
// the floating-point sums moves. Done only where every graph of the micro-batch appears equally often (a
// Batch holds one count for all its graphs); the caller asks only when nothing else is drawn per copy
// (segments, sampled nodes, dropped edges), and splits a micro-batch first (by_copies) so that it is so.
// Returns the copies per graph (1: left as it was). A merged graph keeps its first copy's generator.
int64_t merge_copies(const std::vector<size_t>& file, std::vector<const ModelGraph*>& gs,
                     std::vector<std::vector<int64_t>>& configs, std::vector<Rng>& rs) {
  std::vector<size_t> distinct;
  std::vector<std::vector<size_t>> at;  // each distinct file's positions, in order
  for (size_t g = 0; g < file.size(); ++g) {
    const size_t d = size_t(std::find(distinct.begin(), distinct.end(), file[g]) - distinct.begin());
    if (d == distinct.size()) distinct.push_back(file[g]), at.emplace_back();
    at[d].push_back(g);
  }
  const size_t m = at[0].size();
  if (m < 2) return 1;
  for (const auto& a : at)
    if (a.size() != m) return 1;
  std::vector<const ModelGraph*> mgs;
  std::vector<std::vector<int64_t>> mconfigs;
  std::vector<Rng> mrs;
  for (const auto& a : at) {
    mgs.push_back(gs[a[0]]), mrs.push_back(rs[a[0]]), mconfigs.emplace_back();
    for (size_t g : a) mconfigs.back().insert(mconfigs.back().end(), configs[g].begin(), configs[g].end());
  }
  gs = std::move(mgs), configs = std::move(mconfigs), rs = std::move(mrs);
  return int64_t(m);
}

// The graphs of one count (positions into `file`) split into parts whose files appear equally often in
// the part, in order of first appearance, so that merge_copies merges each part's copies (A A B: A A, then
// B). Each part becomes a micro-batch of its own, weighted by its counts like any other.
std::vector<std::vector<size_t>> by_copies(const std::vector<size_t>& positions, const std::vector<size_t>& file) {
  std::vector<size_t> times(positions.size());
  for (size_t i = 0; i < positions.size(); ++i)
    times[i] = size_t(std::count_if(positions.begin(), positions.end(),
                                    [&](size_t q) { return file[q] == file[positions[i]]; }));
  std::vector<size_t> seen;
  std::vector<std::vector<size_t>> parts;
  for (size_t i = 0; i < positions.size(); ++i) {
    const size_t at = size_t(std::find(seen.begin(), seen.end(), times[i]) - seen.begin());
    if (at == seen.size()) seen.push_back(times[i]), parts.emplace_back();
    parts[at].push_back(positions[i]);
  }
  return parts;
}

// Each term's count in b (0 for an empty batch, and for a term weighted 0).
std::vector<double> loss_counts(const std::vector<LossTerm>& terms, const Batch& b) {
  std::vector<double> c;
  for (const LossTerm& t : terms) c.push_back(b.graphs == 0 || t.weight <= 0 ? 0.0 : t.count(b));
  return c;
}

// The weighted sum of the terms on b; `share[t]`: this part's weight of term t (its count over the global
// count), empty for a whole batch in one process.
ag::Var batch_loss(const std::vector<LossTerm>& terms, const ag::Var& device_pred, const Batch& b, double log_offset,
                   const std::vector<double>& share = {}) {
  const ag::Var pred = ag::to_device(device_pred, Device::cpu());
  const ag::Var log_pred = ag::add_bias(pred, ag::Var(Tensor::full(Shape{1}, log_offset, pred.dtype())));
  Tensor log_target = Tensor::empty(b.target.shape(), DType::F64);
  for (int64_t i = 0; i < b.target.numel(); ++i) log_target.f64()[i] = std::log(b.target.f64()[i]);
  const LossInputs in{pred, log_pred, log_target, b};
  ag::Var loss;
  for (size_t t = 0; t < terms.size(); ++t) {
    if (terms[t].weight <= 0) continue;
    ag::Var v = terms[t].value(in);
    const double k = terms[t].weight * (share.empty() ? 1.0 : share[t]);
    if (k != 1.0) v = ag::scale(v, k);
    loss = loss.defined() ? ag::add(loss, v) : v;
  }
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

// What an epoch writes before its model.npz (best.npz, swa.npz) goes back to what it was unless that
// model.npz lands (a full disk, a failed check, a start that fails, a signal): eval and a resume must not
// find the weights of an epoch the run has no record of, nor a failed start any part of a run without its
// model.npz. Each file as it was is kept as a hard link (a copy where the filesystem has none) named as a
// temporary, PATH.before.tmp-PID, which a signal renames back over PATH while model.npz is not yet replaced
// (one the epoch wrote first it removes). What SIGKILL leaves, Run::put_back_epoch_files mends. A file that
// is a symlink (AtomicFile writes through it) is not kept: left as written, as one that could not be kept,
// since removing it would lose the one before as well.
class EpochFiles {
 public:
  EpochFiles(bool lead, std::string model) : lead_(lead), model_(std::move(model)) {}
  EpochFiles(const EpochFiles&) = delete;
  EpochFiles& operator=(const EpochFiles&) = delete;
  static std::string kept_name(const std::string& path) { return path + ".before"; }
  void keep(const std::string& path) {  // before `path` is replaced
    if (!lead_) return;
    Kept k{path, kept_name(path) + ".tmp-" + std::to_string(::getpid())};
    std::error_code ec;
    k.existed = fs::exists(fs::symlink_status(path, ec));
    if (k.existed && !fs::is_symlink(fs::symlink_status(path, ec))) {
      fs::remove(k.copy, ec);
      fs::create_hard_link(path, k.copy, ec);
      if (ec) ec.clear(), fs::copy_file(path, k.copy, fs::copy_options::overwrite_existing, ec);
      k.kept = !ec;
      if (k.kept) on_signal_.add_put_back(k.copy, path, model_);
      else fs::remove(k.copy, ec);  // (a copy cut short by a full disk)
    } else if (!k.existed) {
      on_signal_.add_file(path, model_);
    }
    kept_.push_back(std::move(k));
  }
  void landed() {  // model.npz landed: the files as they were go
    on_signal_.clear();
    std::error_code ec;
    for (const Kept& k : kept_)
      if (k.kept) fs::remove(k.copy, ec);
    kept_.clear();
  }
  ~EpochFiles() {
    for (const Kept& k : kept_) {
      std::error_code ec;
      if (!k.kept) {
        if (!k.existed) fs::remove(k.path, ec);
        continue;
      }
      fs::rename(k.copy, k.path, ec);
      if (!ec) fs::remove(k.copy, ec);  // (a write of the file itself that failed left both names one file)
      else
        std::fprintf(stderr,
                     "gnn train: warning: %s could not be put back as it was before this epoch (%s); it is %s\n",
                     k.path.c_str(), ec.message().c_str(), k.copy.c_str());
    }
  }

 private:
  struct Kept {
    std::string path, copy;
    bool existed = false, kept = false;
  };
  bool lead_;
  std::string model_;  // model.npz: once it is replaced, a signal leaves the epoch's files as written
  std::vector<Kept> kept_;
  RemovedOnSignal on_signal_;
};

// One run of gnn train; `working_on` names the phase or step at hand for the memory-limit error.
class Run {
 public:
  Run(const TrainOptions& o, std::string& working_on);
  TrainResult train();

 private:
  std::vector<Batch> build_batch(int64_t epoch, const std::vector<int64_t>& order, int64_t bi);
  // The training file at position k of an epoch's order (which lists each file --graph-repeats times).
  size_t file_at(const std::vector<int64_t>& order, int64_t k) const {
    return size_t(order[size_t(k)]) % train_files_.size();
  }
  std::string batch_ids(const std::vector<int64_t>& order, int64_t bi) const;
  // Batch bi's positions [first, second) in the epoch's order.
  std::pair<int64_t, int64_t> batch_range(int64_t bi) const {
    return {bi * tp_.batch_graphs, std::min(n_, (bi + 1) * tp_.batch_graphs)};
  }
  void step(const std::vector<Batch>& micro, int64_t epoch, int64_t bi, class Laps& lap);
  struct MicroStep {
    ag::Var pred;  // its prediction
    const Batch* batch = nullptr;  // the batch it ran on (the host's, or its device copy)
    double loss = 0;
    bool finite = true;
  };
  std::vector<std::vector<double>> loss_shares(const std::vector<Batch>& micro);  // (a collective in a job)
  MicroStep micro_step(const Batch& host, const std::vector<double>& share, class Laps& lap);
  void apply(double loss, const MicroStep& last, int64_t configs, int64_t epoch, int64_t bi);
  void check_cuda_graphs(const std::string& recipe) const;
  // Run::Run's stages, in the order it calls them
  void refuse_options() const;
  void put_back_epoch_files();
  std::vector<std::string> kept_copies(const std::string& f) const;
  void list_files();
  void make_directory();
  void check_kept_checkpoints() const;
  void restore_state();
  void open_sources(uint64_t graph_budget);
  void announce() const;
  void end_epoch(int64_t epoch, double seconds, int64_t configs, bool partial);
  void save(const std::string& path, bool with_optimizer);
  // What an interrupted first attempt left here (check_leftovers), removed before this run's first write, not
  // before: a new run that fails before it writes anything leaves them as they were.
  void replace_leftovers();
  std::vector<std::string> leftovers_;
  void fault() const;
  void check_finite(int64_t step) const;
  void agree_on_plan() const;
  void end_epoch_swa(int64_t epoch, bool validating, Json& line);
  std::vector<Tensor> copy_weights() const;
  void restore_weights(const std::vector<Tensor>& weights);
  bool stopped_early() const;
  bool finished() const { return st_.step >= total_steps_ || st_.epoch >= plan_.epochs || stopped_early(); }
  TrainResult result() const;

  const TrainOptions& o_;
  std::string& working_on_;
  const dist::World& world_;
  const bool lead_;  // rank 0 (or the only process): writes the run directory and prints
  const fs::path dir_;
  const std::string model_path_, best_path_, metrics_path_, swa_path_;
  std::optional<RunLock> lock_;  // the lead process's, while it may write the run directory
  // A new run's lock file, where this process made it, and the folders it made for the run directory (it, and
  // any parents it lacked; deepest first): removed again if the run ends before its first model.npz (the
  // folders only while empty), so a failed start leaves nothing behind. (After lock_: gone while still
  // locked.) A signal that ends the process first does the same through until_first_checkpoint_. The first
  // model.npz disarms both (Run::save).
  struct MadeDirs {
    fs::path lock;
    std::vector<fs::path> dirs;
    ~MadeDirs() {
      std::error_code ec;
      if (!lock.empty()) fs::remove(lock, ec);
      for (const fs::path& d : dirs)
        if (!fs::remove(d, ec)) return;  // (not empty: the run's leftovers, or someone else wrote there)
    }
  } made_dirs_;
  RemovedOnSignal until_first_checkpoint_;
  RunPlan plan_;
  TrainHParams tp_;  // plan_.hp's training hyper-parameters, typed
  std::vector<LossTerm> losses_;  // loss_terms(tp_)
  std::optional<ScopedMemoryLimit> memory_limit_;
  Preprocessing prep_;
  bool layout_ = false;
  std::vector<DatasetFile> train_files_, valid_files_;
  // Per training file, from its header: read up front, so a file that cannot be read stops the run before
  // its first step; a loaded graph is checked against it.
  std::vector<int64_t> config_counts_;
  std::unique_ptr<RankModel> model_;
  std::vector<nn::NamedParam> params_;
  std::optional<nn::Adam> opt_;
  std::optional<DataParallel> dp_;  // with mpirun -np R > 1
  std::optional<nn::Swa> swa_;  // --swa K
  std::unique_ptr<StepGraphs> graphs_;  // --cuda-graphs N
  State st_;
  std::optional<GraphSource> train_src_, valid_src_;
  int64_t n_ = 0, batches_ = 0, total_steps_ = 0;
  bool merge_copies_ = false;  // a step's copies of a graph run as one graph (merge_copies)
  nn::LrSchedule sched_;
  Progress progress_;
  int64_t st_configs_step_ = 0;  // the last step's configs (over every rank)
  int64_t step_waits_ = 0, waited_steps_ = 0;  // the host's waits for the GPU within this process's steps
  int64_t waited_micro_ = 0;  // and the micro-batches those steps ran
  Clock::time_point last_ckpt_;
  std::unique_ptr<StepProfile> profile_;  // --profile
  // The device pool's peak, read when training ends: the profile's GEMM-peak measurement allocates after.
  int64_t device_peak_bytes_ = -1;
};

Run::Run(const TrainOptions& o, std::string& working_on)
    : o_(o),
      working_on_(working_on),
      world_(dist::world()),
      lead_(world_.rank == 0),
      dir_(o.out),
      model_path_((dir_ / "model.npz").string()),
      best_path_((dir_ / "best.npz").string()),
      metrics_path_((dir_ / "metrics.jsonl").string()),
      swa_path_((dir_ / "swa.npz").string()),
      progress_(lead_ ? o.progress : 0) {
  if (o.cuda_graphs > 0 && !o.device.is_cuda()) bad_option("--cuda-graphs needs --device cuda");
  if (o.profile && o.cuda_graphs > 0)
    bad_option("--profile times the ops one by one; a step replayed from CUDA graphs has none");
  if (o.profile) profile_ = std::make_unique<StepProfile>(o.device);
  if (o.out.empty()) bad_option("--out: no run directory given");
  if (o.epochs < 0) bad_option("--epochs must be at least 1");
  // A run to resume is locked before anything of it is read; a new one once its recipe accepted the flags,
  // before its first write (a refusal leaves nothing behind, not even the lock file).
  if (lead_ && fs::exists(model_path_)) lock_.emplace(o.out);
  if (!o.resume && fs::exists(model_path_))
    bad_option("--out ", o.out,
               ": already holds a run (model.npz); pass --resume to continue it, or choose another directory");
  if (!fs::exists(model_path_)) check_leftovers(o.out);

  // The recipe and its hyper-parameters: the command line's for a new run, the checkpoint's on resume.
  plan_ = plan_run(o, model_path_);
  if (world_.size > 1) agree_on_plan();
  if (o.resume && !plan_.resuming && lead_)
    std::fprintf(stderr, "gnn train: --resume: %s does not exist yet; starting a new run\n", model_path_.c_str());
  const Recipe* recipe = plan_.recipe;
  const HParams& hp = plan_.hp;
  tp_ = TrainHParams::read(hp, recipe->kind == "layout");
  losses_ = loss_terms(tp_);
  refuse_options();
  set_gemm_cpu_precision(tp_.matmul_bf16 ? GemmPrecision::kBf16 : GemmPrecision::kF32);
  // (a model that takes no gradient cut trains on whole graphs: a batch marked for a cut would never replay
  // from a CUDA graph, for nothing; the recipe's default --segment stays in its hyper-parameters)
  if (!recipe->takes_segment) tp_.segment = 0;
  prep_ = plan_.meta.prep;
  layout_ = recipe->kind == "layout";
  memory_limit_.emplace(o.memory_limit);
  const uint64_t graph_budget =
      o.memory_limit > 0 ? std::min<uint64_t>(kGraphBudget, uint64_t(o.memory_limit) / 4) : kGraphBudget;
  if (lead_ && plan_.resuming) put_back_epoch_files();
  if (lead_)
    for (const std::string& f : {model_path_, best_path_, metrics_path_, swa_path_}) remove_stale_temporaries(f);
  list_files();
  // (the same path may hold other files on another rank: a copy per node, another mount)
  check_ranks_agree(
      {{"train split", files_fingerprint(train_files_)}, {"valid split", files_fingerprint(valid_files_)}},
      "the check that every rank reads the same data",
      "--data must be the same files on every rank (a filesystem every rank sees)");
  working_on_ = "loading and preprocessing the training graphs";
  if (!plan_.resuming) {
    prep_ = fit_preprocessing(train_files_, layout_, tp_.node_transform, tp_.config_transform, int(tp_.khops),
                              tp_.khops_direction, tp_.khops_edges);
  }

  working_on_ = "building the model and loading its checkpoint";
  Rng init_rng(plan_.seed);
  model_ = recipe->build(hp, dims_of(prep_), init_rng);  // a recipe refusing its flags leaves no run behind
  if (o.cuda_graphs > 0) check_cuda_graphs(recipe->name);
  make_directory();
  params_ = model_->parameters();
  check_kept_checkpoints();
  // (the copies epochs kept, only now: a refusal above leaves them for the files they could restore)
  if (lead_)
    for (const std::string& f : {best_path_, swa_path_})
      for (const std::string& c : kept_copies(f)) {
        std::error_code ec;
        fs::remove(c, ec);
      }
  restore_state();
  nn::move_parameters(*model_, o.device);  // Adam moves its (host-loaded) moments on its first GPU step
  if (o.cuda_graphs > 0) graphs_ = std::make_unique<StepGraphs>(o.cuda_graphs, o.device);
  if (world_.size > 1) {
    dp_.emplace(params_);
    dp_->check_same_weights("at the start");
  }

  working_on_ = "reading the config counts of the training graphs";
  open_sources(graph_budget);
  announce();
}

// The flags this run's recipe, device and hyper-parameters cannot take together, and an --out inside the
// data, each refused by name.
void Run::refuse_options() const {
  const Recipe* recipe = plan_.recipe;
  const HParams& hp = plan_.hp;
  // A run folder where the data's graphs are read (a split folder, made yet or not, or where a collection
  // would be found): its files would be read as graphs, or its folder hide them, for this run's resume and
  // every later use of the data. (A --data that is no tree: list_files says so.)
  if (const std::string folder = data_folder_holding(plan_.data, o_.out); !folder.empty())
    bad_option("--out ", o_.out, ": lies inside ", folder, ", where --data's graphs are read; its files would be ",
               "read as graphs or hide them: choose a folder outside it");
  if (tp_.matmul_bf16 && o_.device.is_cuda())
    bad_option("--matmul-precision bf16: sets the CPU's products; on a GPU, GNN_TF32=1 gives cuBLAS's tensor-core "
               "products");
  if (tp_.matmul_bf16 && !gemm_bf16_supported())
    bad_option("--matmul-precision bf16: this CPU has no AVX512-BF16, which its products need; use f32");
  if (recipe->train_part && world_.size > 1)
    bad_option(detail::str_cat("--model ", recipe->name,
                               ": its table of segment scores lives in one process; run it "
                               "without mpirun (or with -np 1)"));
  if (world_.size > 1 && hp.values.count("op-max-norm") && hp.num("op-max-norm") > 0)
    bad_option("--op-max-norm: each process would renormalise, in place, the embedding rows its own batches look "
               "up, and the processes' weights would part; run it without mpirun (or with -np 1)");
  if (tp_.mape_weight > 0 && tp_.regression())
    bad_option("--mape-weight: a MAPE term on the prediction read as seconds, beside a ranking loss; --loss " +
               hp.str("loss") + " already reads the prediction as a log runtime");
  if (tp_.mape_weight > 0 && tp_.mse_weight > 0 && !plan_.resuming)  // (a run saved before resumes as it was)
    bad_option("--mape-weight with --mse-weight: the MAPE term reads the prediction as seconds and the MSE term "
               "as a log runtime; give one of them");
  if (tp_.batch_pairs_weight > 0) {  // its pairs span the step's batch, which these would split
    if (tp_.loss != TrainHParams::Loss::kHinge && tp_.loss != TrainHParams::Loss::kLogistic)
      bad_option("--batch-pairs-weight: a pairwise term over the batch's configs; --loss " + hp.str("loss") +
                 " is not pairwise (hinge or logistic)");
    if (tp_.accumulate > 1)
      bad_option("--batch-pairs-weight: its pairs span the step's batch, which --accumulate splits into micro-batches");
    if (world_.size > 1)
      bad_option("--batch-pairs-weight: its pairs span the step's batch, which a data-parallel job splits over its "
                 "processes; run it without mpirun (or with -np 1)");
  }
  // The region flags shape a --khops region and mean nothing without one: said, not ignored (a run
  // saved before this check resumes as it was).
  // (Only flags given on the command line: a recipe's own default direction is not the user's choice.)
  if (recipe->kind == "layout" && tp_.khops <= 0 && !plan_.resuming) {
    const std::string region = tp_.khops < 0 ? "every node (--khops -1)" : "only the configurable nodes (--khops 0)";
    if (o_.hparams.count("khops-edges"))
      bad_option("--khops-edges: the edges a --khops region keeps; this run keeps " + region);
    if (o_.hparams.count("khops-direction"))
      bad_option("--khops-direction: the edges a --khops hop follows; this run keeps " + region);
  }
  if (!plan_.resuming) refuse_moot_flags(*recipe, hp, tp_, o_.hparams);
}

// The training and valid files, cut to --max-graphs, and the flags that need a valid split refused without one.
void Run::list_files() {
  const Recipe* recipe = plan_.recipe;
  const HParams& hp = plan_.hp;
  train_files_ = kind_files(plan_.data, recipe->kind, "train");
  valid_files_ = kind_files(plan_.data, recipe->kind, "valid");
  if (plan_.max_graphs > 0) {
    if (int64_t(train_files_.size()) > plan_.max_graphs) train_files_.resize(size_t(plan_.max_graphs));
    if (int64_t(valid_files_.size()) > plan_.max_graphs) valid_files_.resize(size_t(plan_.max_graphs));
  }
  GNN_CHECK(!train_files_.empty(), "--data ", plan_.data, ": no ", recipe->kind, " train files for ", recipe->name);
  // The validation flags mean nothing without a valid split: said, not ignored (a user giving --patience
  // expects the run to stop early).
  if (!plan_.eval_indices.empty() && recipe->kind != "layout")
    bad_option("--eval-indices: the official subsets are of layout graphs, and ", recipe->name, " is a ", recipe->kind,
               " recipe");
  if (valid_files_.empty()) {
    for (const char* flag : {"patience", "val-every", "val-configs"})
      if (o_.hparams.count(flag) && hp.num(flag) > 0)
        bad_option(detail::str_cat("--", flag, ": acts on validation, and --data ", plan_.data, " has no ",
                                   recipe->kind, " valid files"));
    if (!o_.eval_indices.empty())
      bad_option(detail::str_cat("--eval-indices: acts on validation, and --data ", plan_.data, " has no ",
                                 recipe->kind, " valid files"));
  }
  EvalIndices(plan_.eval_indices).check(valid_files_);  // (a missing file found now, not after training)
  if (int64_t(train_files_.size()) * tp_.graph_repeats > kMaxEpochList)  // (before the run directory exists)
    bad_option(detail::str_cat("--graph-repeats ", tp_.graph_repeats, ": ", train_files_.size(),
                               " training graphs listed that many times make an epoch of ",
                               int64_t(train_files_.size()) * tp_.graph_repeats, " graphs, more than ", kMaxEpochList,
                               "; lower it and raise --epochs"));
}

// The training and valid graphs' sources, the epoch's batches and steps, and the rate's schedule.
void Run::open_sources(uint64_t graph_budget) {
  const bool dedup = tp_.dedup;
  for (const DatasetFile& f : train_files_) config_counts_.push_back(file_configs(f, dedup));
  train_src_.emplace(train_files_, prep_, graph_budget, dedup, model_->needs().features);
  valid_src_.emplace(valid_files_, prep_, graph_budget, false, model_->needs().features);
  n_ = int64_t(train_files_.size()) * tp_.graph_repeats, batches_ = (n_ + tp_.batch_graphs - 1) / tp_.batch_graphs;
  total_steps_ = plan_.steps > 0 ? std::min(plan_.steps, plan_.epochs * batches_) : plan_.epochs * batches_;
  GNN_CHECK(st_.batch < batches_, model_path_, ": 'state/batch' ", st_.batch, " is past the ", batches_,
            " batches of an epoch of this run (damaged, or --data now holds fewer training graphs)");
  if (plan_.resuming && lead_) trim_metrics(metrics_path_, st_.epoch, /*keep_partial=*/finished());
  sched_ = nn::LrSchedule::of(tp_.schedule, tp_.lr, tp_.warmup, total_steps_);
  // (--batch-pairs-weight: a merged step runs one micro-batch per pattern of copies, A A | B, and the term
  // pairs configs within a micro-batch only, so its copies stay graphs of one micro-batch)
  merge_copies_ = tp_.graph_repeats > 1 && model_->needs().merge_copies && tp_.segment == 0 && tp_.sample_nodes == 0 &&
                  tp_.edge_dropout == 0 && !plan_.recipe->train_part && tp_.batch_pairs_weight == 0;
}

// The optimiser, and on resume the weights, moments, state and SWA average of model.npz; a new run notes
// what an interrupted start left here (replace_leftovers).
void Run::restore_state() {
  opt_.emplace(nn::one_group(params_, tp_.weight_decay), tp_.lr, /*decoupled=*/true);
  if (plan_.resuming) {
    load_checkpoint(model_path_, params_, &*opt_);
    st_ = plan_.state;
    model_->load_state(plan_.meta.arrays, model_path_);
    // best.npz removed (as the refusal of a damaged one suggests): said, and the best so far kept as it was
    // (--patience counts from it, and the run goes on as the unbroken one would)
    if (st_.best_epoch > 0 && !fs::exists(best_path_) && lead_)
      std::fprintf(stderr,
                   "gnn train: warning: %s is missing: the weights of the best validation so far (epoch %lld, "
                   "score %.6g) are lost; a later validation that scores higher writes it again\n",
                   best_path_.c_str(), (long long)st_.best_epoch, st_.best_score);
  } else if (lead_) {
    for (const std::string& f : {metrics_path_, best_path_, swa_path_})
      if (fs::exists(f)) leftovers_.push_back(f);
  }
  if (tp_.swa > 0) {
    swa_.emplace(tp_.swa);
    if (plan_.resuming) swa_->load("swa/", plan_.meta.arrays, params_, model_path_, st_.epoch);
  }
}

// A new run's directory, made with the parents it lacks (removed again by made_dirs_ if nothing lands
// there), and locked.
void Run::make_directory() {
  if (!plan_.resuming && lead_) {
    std::vector<fs::path> missing;  // dir_ and its parents that do not exist yet, deepest first
    fs::path d = fs::absolute(dir_).lexically_normal();
    if (!d.has_filename()) d = d.parent_path();  // (a trailing slash)
    for (; !d.empty() && !fs::exists(d) && d != d.parent_path(); d = d.parent_path()) missing.push_back(d);
    fs::create_directories(dir_);
    made_dirs_.dirs = std::move(missing);
  }
  if (lead_ && !lock_) {  // a new run: another one may have started here meanwhile and written a run
    lock_.emplace(o_.out);
    GNN_CHECK(!fs::exists(model_path_), "--out ", o_.out,
              ": another gnn train started a run here meanwhile; choose another directory");
    if (lock_->created()) {  // (a lock file that was there, a killed run's or not gnn's, stays)
      made_dirs_.lock = dir_ / "lock";
      until_first_checkpoint_.add_file(made_dirs_.lock.string());
    }
    if (!made_dirs_.dirs.empty())
      until_first_checkpoint_.add_folder(made_dirs_.dirs[0].string(), int(made_dirs_.dirs.size()) - 1);
  }
}

// The copies epochs kept of `f` (EpochFiles): all of them where the run is locked (whatever their pid says: a
// container's gnn is pid 1 each time), else only those no live process may still be writing.
std::vector<std::string> Run::kept_copies(const std::string& f) const {
  const std::string kept = fs::path(EpochFiles::kept_name(f)).filename().string();
  return stale_temporaries_in(
      dir_.string(), [&](const std::string& n) { return n == kept; }, lock_ && lock_->held());
}

// A process killed outright (SIGKILL, a crash) after an epoch wrote best.npz or swa.npz and before its
// model.npz landed left the newer file, out of step with model.npz (out_of_step), and the one it replaced as
// a kept copy: a copy of this run that is in step goes back over a file out of step (or a missing one), so
// that a resume to fewer epochs, or one whose validation scores otherwise, does not end with weights of an
// epoch it has no record of. With no such copy, a newer file goes only where model.npz says there was none
// before (no best yet; SWA's first epoch) and the file is of the epoch after model.npz's; any other is left to
// check_kept_checkpoints, which refuses it, as it judges a symlink (written through, never kept).
void Run::put_back_epoch_files() {
  for (const std::string& f : {best_path_, swa_path_}) {
    const bool swa = f == swa_path_;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(f, ec);
    if (fs::is_symlink(st)) continue;
    // What is out of step in `file` ("" nothing); nothing where this check has no say (damaged, another run's)
    const auto out_of_step_in = [&](const std::string& file) -> std::optional<std::string> {
      try {
        const Meta m = read_meta(file);
        if (!meta_differing(plan_.meta, m).empty()) return std::nullopt;
        return out_of_step(plan_.meta, m, swa);
      } catch (const Error&) {
        return std::nullopt;
      }
    };
    const bool there = fs::exists(st);
    std::string said = f + " is missing";
    if (there) {
      const std::optional<std::string> why = out_of_step_in(f);
      if (!why || why->empty()) continue;
      said = f + ": " + *why;
    }
    std::string back;
    for (const std::string& c : kept_copies(f))
      if (out_of_step_in(c) == std::string()) {
        back = c;
        break;
      }
    if (!back.empty()) {
      fs::rename(back, f, ec);
      GNN_CHECK(!ec, "--resume: ", said, ", and it cannot be put back from ", back, " (", ec.message(), ")");
      std::fprintf(stderr, "gnn train: %s: the copy the run kept of it put back (%s)\n", said.c_str(), back.c_str());
      continue;
    }
    if (!there || stored_i64(plan_.meta, swa ? "state/epoch" : "state/best_epoch") != 0) continue;
    // (and only the file of the epoch after model.npz's, whose metrics line is the last if any: a later epoch's
    // file, or a log gone further, is of a model.npz put back from an earlier time, whose run went on)
    try {
      const int64_t next = stored_i64(plan_.meta, "state/epoch") + 1;
      if (stored_i64(read_meta(f), swa ? "state/epoch" : "state/best_epoch") != next ||
          last_logged_epoch(metrics_path_) > next)
        continue;
    } catch (const Error&) {
      continue;
    }
    fs::remove(f, ec);
    GNN_CHECK(!ec, "--resume: ", said, ", and it cannot be removed (", ec.message(), ")");
    std::fprintf(stderr, "gnn train: %s: removed, as model.npz says there was none before\n", said.c_str());
  }
}

// A resumed run rewrites best.npz only when validation improves, so one damaged (or replaced) since it was
// written would outlive the run unnoticed and fail eval and predict later: each is loaded as they load it
// (every member's CRC, the meta and preprocessing checks, every weight's finiteness) and its weights must
// be this model's (names and shapes), of this run and in step with model.npz.
void Run::check_kept_checkpoints() const {
  const Recipe* recipe = plan_.recipe;
  if (plan_.resuming && lead_)
    for (const std::string& f : {best_path_, swa_path_}) {
      if (!fs::exists(f)) continue;
      try {
        const LoadedModel m = load_model(f);
        GNN_CHECK(m.recipe == recipe, f, ": holds a ", m.recipe->name, " model; the run trains ", recipe->name);
        const std::vector<nn::NamedParam> theirs = m.model->parameters();
        for (size_t i = 0; i < std::max(theirs.size(), params_.size()); ++i) {
          const std::string there =
              i < theirs.size() ? theirs[i].name + " " + theirs[i].var.shape().str() : "nothing";
          const std::string here =
              i < params_.size() ? params_[i].name + " " + params_[i].var.shape().str() : "nothing";
          GNN_CHECK(there == here, f, ": holds the weights of another model than model.npz's: parameter ", i, " is ",
                    there, " there, ", here, " in the run's model");
        }
        // (the same shapes: another run of this recipe and width, or this one's from before model.npz was replaced)
        const Meta meta = read_meta(f);
        const std::string other = meta_differing(plan_.meta, meta),
                          step = out_of_step(plan_.meta, meta, f == swa_path_);
        GNN_CHECK(other.empty(), f, ": is not of the run model.npz holds: ", other);
        GNN_CHECK(step.empty(), f, ": ", step);
      } catch (const MemoryLimitError&) {  // (not damage: the limit's own message says what to do)
        throw;
      } catch (const Error& e) {
        GNN_FAIL("--resume: ", e.message(), "; restore it, or remove it to resume without it (train writes it again ",
                 f == best_path_ ? "at a validation that beats the best so far)"
                                 : "when it next averages the weights)");
      }
    }
}

// The run's first lines: what trains on what, the ranks, and where a resumed run goes on from.
void Run::announce() const {
  const Recipe* recipe = plan_.recipe;
  const bool talk = lead_ && !o_.quiet;
  if (talk)
    std::printf(
        "gnn train: %s on %lld train / %lld valid %s graphs%s; %lld graphs x %lld configs per step, %lld steps "
        "per epoch%s\n",
        recipe->name.c_str(), (long long)train_files_.size(), (long long)valid_files_.size(), recipe->kind.c_str(),
        tp_.graph_repeats > 1 ? detail::str_cat(", each ", tp_.graph_repeats, " times an epoch",
                                                merge_copies_ ? " (a step's copies of a graph run as one)" : "")
                                      .c_str()
                              : "",
        (long long)tp_.batch_graphs, (long long)tp_.configs, (long long)batches_, plan_.resuming ? " (resumed)" : "");
  if (talk && world_.size > 1)
    std::printf(
        "data-parallel over %d ranks (%s): each builds its share of the %lld graphs of a step; %.2f MB "
        "summed per step\n",
        world_.size, dist::built_with_nccl() && o_.device.is_cuda() ? "NCCL" : "MPI", (long long)tp_.batch_graphs,
        double(dp_->bytes_per_step()) / 1e6);
  if (plan_.resuming && talk)
    std::printf("resuming at epoch %lld, batch %lld of %lld (after step %lld)\n", (long long)st_.epoch + 1,
                (long long)st_.batch + 1, (long long)batches_, (long long)st_.step);
  if (lead_)
    for (const std::string& note : plan_.notes) std::printf("resuming with %s\n", note.c_str());
  if (plan_.resuming && lead_) {
    const int64_t before = get_i64(plan_.meta.arrays, "meta/ranks", model_path_, 1, INT32_MAX, 1);
    if (before != world_.size)
      std::printf(
          "resuming a run of %lld rank(s) with %d: the global batches are the same (each rank builds a share "
          "of them), the sums over ranks round differently\n",
          (long long)before, world_.size);
  }
  std::fflush(stdout);
}

void Run::replace_leftovers() {
  if (leftovers_.empty()) return;
  std::string files;
  for (const std::string& f : leftovers_) files += (files.empty() ? "" : ", ") + f, fs::remove(f);
  std::fprintf(stderr, "gnn train: replacing what an interrupted first epoch left: %s\n", files.c_str());
  leftovers_.clear();
}

void Run::save(const std::string& path, bool with_optimizer) {
  // What this rank says if mpirun stops it because another rank died (once the checkpoint is written).
  const auto stop_message = [&] {
    // (rank 0 writes, on its own clock: only it knows which step the file holds)
    if (path == model_path_ && world_.size > 1)
      dist::set_stop_message(
          detail::str_cat("gnn train: ", dist::rank_prefix(), dist::kStoppedByLauncher, "; ", model_path_,
                          lead_ ? detail::str_cat(" holds step ", st_.step) : " holds rank 0's last checkpoint",
                          ": --resume continues from there\n"));
  };
  if (!lead_) return stop_message();  // the ranks hold the same weights and state: rank 0 writes them
  replace_leftovers();
  working_on_ = detail::str_cat("writing ", path);
  std::vector<std::pair<std::string, Tensor>> extra = {
      {"meta/format", i64_tensor(kCheckpointFormat)},
      {"meta/recipe", text_tensor(plan_.recipe->name)},
      {"meta/hparams", text_tensor(plan_.hp.json())},
      {"meta/seed", i64_tensor(int64_t(plan_.seed))},
      {"meta/data", text_tensor(fs::absolute(plan_.data).string())},
      {"meta/epochs", i64_tensor(plan_.epochs)},
      {"meta/steps", i64_tensor(plan_.steps)},
      {"meta/max_graphs", i64_tensor(plan_.max_graphs)},
      {"meta/ranks", i64_tensor(world_.size)},
      {"meta/eval_indices", text_tensor(plan_.eval_indices.empty() ? "" : fs::absolute(plan_.eval_indices).string())}};
  prep_.save(extra);
  st_.save(extra);
  model_->save_state(extra);
  if (swa_ && path == model_path_) swa_->save("swa/", extra);
  // (save_checkpoint makes the same check of the weights and the optimiser's state)
  const std::string bad = first_nonfinite(extra, "state/best_score");
  GNN_CHECK(bad.empty(), "at step ", st_.step, ", before writing ", path, ": ", bad,
            "; a checkpoint holding it could not be read back, so none is written");
  save_checkpoint(path, params_, with_optimizer ? &*opt_ : nullptr, extra);
  if (path == model_path_) {  // (the run's checkpoint landed: a run to resume, its lock and folders its own)
    until_first_checkpoint_.clear();
    made_dirs_.lock.clear(), made_dirs_.dirs.clear();
  }
  stop_message();
}

// Batch bi of an epoch is a function of (seed, epoch, bi) alone, so a resumed run draws what the
// unbroken one drew, and on a GPU the host can build batch bi + 1 on a second thread. In a data-parallel
// job this rank builds its share (dist::shard) of the batch's graphs, each with what it would draw in
// one process; a rank whose share is empty (a last batch of fewer graphs than ranks) gets no graphs.
// With --accumulate A the share is cut into A micro-batches (contiguous, the first ones one graph
// larger), each run through forward and backward on its own. Each graph ranks min(--configs, its own
// count) configs, as the originals draw a kernel's slate (--configs with --draw with, repeats possible); a Batch holds
// one count for all its graphs, so the graphs of a micro-batch that have fewer than --configs are cut again into
// micro-batches of one count each (a batch of real tile kernels, which list from 2 to thousands of configs, would
// otherwise train every kernel on the fewest any of them has). Where every graph has --configs, nothing is cut.
std::vector<Batch> Run::build_batch(int64_t epoch, const std::vector<int64_t>& order, int64_t bi) {
  const auto [lo, hi] = batch_range(bi);
  const dist::Range mine = dist::shard(hi - lo, world_.rank, world_.size);
  std::vector<Batch> micro;
  const int micro_batches = int(tp_.accumulate);  // (its spec caps it at 2^20)
  for (int a = 0; a < micro_batches; ++a) {
    const dist::Range part = dist::shard(mine.size(), a, micro_batches);
    if (part.size() == 0) continue;
    std::vector<std::shared_ptr<const ModelGraph>> held;
    std::vector<const ModelGraph*> graphs;
    std::vector<size_t> file;  // each graph's training file
    std::vector<Rng> rngs;
    std::vector<GraphPart> parts;
    for (int64_t j = mine.begin + part.begin; j < mine.begin + part.end; ++j) {
      file.push_back(file_at(order, lo + j));
      held.push_back(train_src_->get(file.back()));
      graphs.push_back(held.back().get());
      rngs.push_back(graph_rng(plan_.seed, epoch, bi, j));
      GNN_CHECK(!held.back()->target.empty(), held.back()->file.path,
                ": no runtimes (a test file?); a training graph needs them");
      GNN_CHECK(held.back()->num_configs() >= 2, held.back()->file.path, ": ", held.back()->num_configs(), " config",
                tp_.dedup ? " after --dedup on (which keeps one of each set of identical configs)" : "",
                "; a training graph needs at least 2 to rank");
      const int64_t header = config_counts_[file_at(order, lo + j)];
      GNN_CHECK(held.back()->num_configs() >= std::min(tp_.configs, header), held.back()->file.path, ": holds ",
                held.back()->num_configs(), " configs, its header said ", header);
      if (tp_.sample_nodes > 0 &&
          held.back()->num_nodes() > tp_.sample_nodes) {  // its own draw: rngs[] stays as it was
        Rng r(Rng(rngs.back()).next() ^ 0x73616d706c65ull);
        held.back() = std::make_shared<const ModelGraph>(sample_nodes(*held.back(), tp_.sample_nodes, r));
        graphs.back() = held.back().get();
      }
      if (plan_.recipe->train_part) {  // likewise
        Rng r(Rng(rngs.back()).next() ^ 0x70617274ull);
        parts.push_back(plan_.recipe->train_part(plan_.hp, held.back()->num_nodes(), r));
        held.back() =
            std::make_shared<const ModelGraph>(node_range(*held.back(), parts.back().begin, parts.back().end));
        graphs.back() = held.back().get();
      }
    }
    // One micro-batch per count, in the order of each count's first graph (one count: the part itself).
    std::vector<int64_t> counts;
    std::vector<std::vector<size_t>> of_count;
    for (size_t g = 0; g < graphs.size(); ++g) {
      const int64_t n = graphs[g]->num_configs();
      const int64_t c = tp_.draw_with_replacement ? tp_.configs : std::min(tp_.configs, n);
      const size_t at = size_t(std::find(counts.begin(), counts.end(), c) - counts.begin());
      if (at == counts.size()) counts.push_back(c), of_count.emplace_back();
      of_count[at].push_back(g);
    }
    if (counts.size() > 1 && tp_.batch_pairs_weight > 0 && lead_) {
      static std::atomic<bool> told{false};  // (the batches may be built on the prefetch thread)
      if (!told.exchange(true))
        std::fprintf(stderr,
                     "gnn train: --batch-pairs-weight: a step holds graphs with fewer configs than --configs %lld, "
                     "which run as micro-batches of their own; the term pairs configs within each (said once)\n",
                     (long long)tp_.configs);
    }
    if (merge_copies_) {  // and each count's graphs by how often they appear, so that each part merges
      std::vector<int64_t> c;
      std::vector<std::vector<size_t>> of;
      for (size_t k = 0; k < counts.size(); ++k)
        for (std::vector<size_t>& p : by_copies(of_count[k], file)) c.push_back(counts[k]), of.push_back(std::move(p));
      counts = std::move(c), of_count = std::move(of);
    }
    for (size_t k = 0; k < counts.size(); ++k) {
      std::vector<const ModelGraph*> gs;
      std::vector<Rng> rs;
      std::vector<std::vector<int64_t>> configs;
      std::vector<size_t> fs;
      for (size_t g : of_count[k]) {
        gs.push_back(graphs[g]), rs.push_back(rngs[g]), fs.push_back(file[g]);
        const int64_t n = graphs[g]->num_configs();
        configs.push_back(tp_.draw_with_replacement ? sample_with_replacement(n, counts[k], rs.back())
                                                    : sample_without_replacement(n, counts[k], rs.back()));
      }
      const int64_t copies = merge_copies_ ? merge_copies(fs, gs, configs, rs) : 1;
      micro.push_back(make_batch(gs, configs, tp_.segment, rs));
      if (copies > 1) {  // each copy's configs, a ranking group
        std::vector<int64_t> gp;
        for (int64_t i = 0; i <= int64_t(gs.size()) * copies; ++i) gp.push_back(i * counts[k]);
        micro.back().group_ptr = Tensor::from_vector(gp);
      }
      for (size_t g : of_count[k])
        if (!parts.empty()) micro.back().part.push_back(parts[g].index), micro.back().parts.push_back(parts[g].count);
      const int64_t first = mine.begin + part.begin + int64_t(of_count[k][0]);
      micro.back().noise_seed = graph_rng(plan_.seed, epoch, bi, first).next() ^ 0x6e6f697365ull;
      if (tp_.edge_dropout > 0) micro.back().drop_edges(tp_.edge_dropout, micro.back().noise_seed ^ 0x65646765ull);
      micro.back() = micro.back().prepared(model_->needs());  // (on the prefetch thread when there is one)
    }
  }
  return micro;
}

std::string Run::batch_ids(const std::vector<int64_t>& order, int64_t bi) const {
  std::string ids;
  const auto [lo, hi] = batch_range(bi);
  for (int64_t k = lo; k < hi; ++k) ids.append(" ").append(train_files_[file_at(order, k)].id());
  return ids;
}

// --cuda-graphs: what cannot be replayed is refused before the run starts (a batch that never repeats
// would only pay for keeping its structure).
void Run::check_cuda_graphs(const std::string& recipe) const {
  auto refuse = [&](const std::string& why) { throw OptionError("--cuda-graphs: " + why); };
  if (!model_->replayable()) {
    std::string can;
    for (const Recipe& r : recipes()) {
      Rng rng(1);
      if (r.kind == plan_.recipe->kind && r.build(r.defaults(), dims_of(prep_), rng)->replayable())
        can += (can.empty() ? "" : ", ") + r.name;
    }
    refuse(recipe + "'s training forward cannot be replayed from a CUDA graph (it draws dropout or noise, or reads " +
           "per-step values on the host); these can: " + can);
  }
  if (tp_.batch_graphs > 1 && train_files_.size() > 1)
    refuse(
        "needs --batch-graphs 1 with more than one training graph (a batch of several graphs changes with "
        "each epoch's order: it does not repeat)");
  if (tp_.accumulate > 1) refuse("not with --accumulate > 1 (one batch per step is replayed)");
  if (world_.size > 1) refuse("one process only (not in a data-parallel job)");
  if (tp_.edge_dropout > 0) refuse("not with --edge-dropout (the graph changes every step)");
  if (tp_.sample_nodes > 0) refuse("not with --sample-nodes (the graph changes every step)");
}

// --profile's phases of a step: each lap records the time since the previous one under its name.
class Laps {
 public:
  // Starts the first phase at `start`: the step's own clock read, so the phases tile the whole step.
  Laps(StepProfile* p, Clock::time_point start) : profile_(p), t_(start) {}
  // One clock read ends this phase and starts the next, so the phases tile the step: the bookkeeping of
  // phase() falls in the next one, as does every op timed across the boundary (autograd/var.h).
  void operator()(const char* phase) {
    if (!profile_) return;
    profile_->wait();
    const Clock::time_point now = Clock::now();
    profile_->phase(phase, std::chrono::duration<double>(now - t_).count());
    t_ = now;
  }

 private:
  StepProfile* profile_;
  Clock::time_point t_;
};

// Forward, loss, backward and the optimiser; a non-finite loss or gradient stops the run, or with
// --skip-nonfinite skips the batch (counted). The step's loss is the loss of its global batch: with
// several micro-batches (--accumulate) or ranks, each part's loss terms are weighted by its share of the
// counts they average over (loss_counts), the parts' gradients add up in the parameters (and, in a
// data-parallel job, are summed over the ranks by DataParallel before the clipping), so the step is the
// one-batch step up to rounding. One batch in one process runs unweighted, as it always has.
//   counts -> each micro-batch (micro_step) -> reduce over the ranks -> clip -> apply (or skip)
void Run::step(const std::vector<Batch>& micro, int64_t epoch, int64_t bi, Laps& lap) {
  model_->train();
  opt_->zero_grad();
  const std::vector<std::vector<double>> shares = loss_shares(micro);
  MicroStep last;
  double loss = 0;
  int64_t configs = 0;
  for (size_t m = 0; m < micro.size(); ++m) {
    configs += micro[m].graphs * micro[m].configs;
    last = micro_step(micro[m], shares[m], lap);
    loss += last.loss;
    if (!last.finite) break;
  }
  apply(loss, last, configs, epoch, bi);
  lap("update");
}

// Each micro-batch's weight of each loss term: its count over the step's global count (the ranks' sum);
// empty for one batch in one process.
std::vector<std::vector<double>> Run::loss_shares(const std::vector<Batch>& micro) {
  std::vector<std::vector<double>> counts, shares(micro.size());
  std::vector<double> global(losses_.size(), 0.0);
  for (const Batch& b : micro) {
    counts.push_back(loss_counts(losses_, b));
    for (size_t t = 0; t < global.size(); ++t) global[t] += counts.back()[t];
  }
  if (dp_) global = dp_->sum_counts(global, st_.step + 1);
  if (!dp_ && micro.size() <= 1) return shares;
  for (size_t m = 0; m < micro.size(); ++m)
    for (size_t t = 0; t < global.size(); ++t) shares[m].push_back(global[t] > 0 ? counts[m][t] / global[t] : 0.0);
  return shares;
}

// One micro-batch's forward, loss and backward: replayed from CUDA graphs where StepGraphs holds its
// structure (--cuda-graphs), eagerly otherwise, including where StepGraphs hands the batch back (a
// structure not captured yet, or a capture that failed). A non-finite loss leaves no gradient.
Run::MicroStep Run::micro_step(const Batch& host, const std::vector<double>& share, Laps& lap) {
  MicroStep r;
  const auto loss_of = [&](const ag::Var& p) { return batch_loss(losses_, p, host, prep_.log_offset, share); };
  const Batch* eager = &host;  // with --cuda-graphs the batch is the host's
  if (graphs_) {
    StepGraphs::Step from_graphs;
    eager = graphs_->run(*model_, params_, host, loss_of, from_graphs);
    if (!eager) {
      r.pred = from_graphs.pred, r.batch = &host, r.loss = from_graphs.loss, r.finite = std::isfinite(r.loss);
      return r;
    }
  }
  lap("prepare");  // zeroing the gradients, the loss counts, launching the next batch's prefetch (before a
                   // later micro-batch: nothing)
  ag::profile_mark();
  r.pred = model_->forward(*eager), r.batch = eager;
  lap("forward");
  const ag::Var loss = batch_loss(losses_, r.pred, *eager, prep_.log_offset, share);
  r.loss = loss.value().item();
  lap("loss");
  r.finite = std::isfinite(r.loss);
  if (r.finite) ag::backward(loss);
  else ag::clear_tape();
  lap("backward");
  return r;
}

// The end of a step: the loss, finiteness and configs summed over the ranks, the gradient clipped, and
// the optimiser's update; or, for a non-finite loss or gradient, the stop naming its graph (or the skip).
// `last`: the last micro-batch run (the one whose loss was not finite, if one was).
void Run::apply(double loss, const MicroStep& last, int64_t configs, int64_t epoch, int64_t bi) {
  bool finite = last.finite;
  const bool local_finite = finite;
  std::vector<int> culprit_ranks;
  st_configs_step_ = configs;
  if (dp_) {
    const DataParallel::StepSums sums = dp_->reduce(loss, finite, configs, st_.step + 1);
    loss = sums.loss, finite = sums.finite, st_configs_step_ = sums.configs, culprit_ranks = sums.culprits;
  }
  std::string what = "loss";
  if (finite) {
    const double norm = nn::clip_grad_norm(params_, tp_.clip > 0 ? tp_.clip : INFINITY);
    finite = std::isfinite(norm);
    what = "gradient";
  }
  if (!finite) {
    std::string where;
    if (last.batch && (!dp_ || !local_finite || what == "gradient")) {
      where = "graph " + culprit(last.pred, *last.batch);
    } else if (!culprit_ranks.empty()) {  // another rank's loss: that rank's own message names its graph
      where = "the graphs of rank";
      for (int r : culprit_ranks) where += " " + std::to_string(r);
    } else {
      where = "the other ranks' graphs (this rank had none this step)";
    }
    GNN_CHECK(o_.skip_nonfinite, "non-finite ", what, " at step ", st_.step + 1, " (epoch ", epoch + 1, ", batch ",
              bi + 1, ") from ", where, "; lower --lr, set --clip, or pass --skip-nonfinite to skip such batches");
    opt_->zero_grad();
    st_.skipped += 1;
  } else {
    opt_->set_lr(sched_.at(st_.step));
    opt_->step();
    st_.loss_sum += loss, st_.loss_n += 1;
    // (on a GPU save_checkpoint checks the weights before each write instead: a check per step would wait)
    if (!o_.device.is_cuda()) check_finite(st_.step + 1);
  }
}

TrainResult Run::train() {
  bool done = finished();
  const int64_t first_step = st_.step;
  const bool prefetch = o_.prefetch < 0 ? o_.device.is_cuda() : o_.prefetch > 0;
  last_ckpt_ = Clock::now();
  while (!done) {
    const int64_t e = st_.epoch;
    Rng order_rng(stream_seed(plan_.seed, e, -1));
    const std::vector<int64_t> order = sample_without_replacement(n_, n_, order_rng);
    const double epoch_seconds_before = st_.seconds;
    const int64_t epoch_configs_before = st_.configs, first_batch = st_.batch;
    std::future<std::vector<Batch>> next;  // (destroyed before `order`, which it reads)
    for (int64_t bi = st_.batch; bi < batches_; ++bi) {
      throw_if_interrupted();  // (within a caller's CooperativeInterrupt scope, the demo's; else the signal ended it)
      working_on_ = detail::str_cat("step ", st_.step + 1, " (graphs", batch_ids(order, bi), ")");
      const auto t_step = Clock::now();
      const int64_t waits_before = cuda_host_waits();
      if (profile_) profile_->begin_step();
      std::vector<Batch> micro = next.valid() ? next.get() : build_batch(e, order, bi);
      if (!graphs_)  // (StepGraphs moves the batch, or copies it into the graphs' own)
        for (Batch& b : micro) b = b.to(o_.device);
      Laps lap(profile_.get(), t_step);
      lap("batch");
      if (prefetch && bi + 1 < batches_ && st_.step + 1 < total_steps_)
        next = std::async(std::launch::async, [this, e, &order, bi] { return build_batch(e, order, bi + 1); });
      step(micro, e, bi, lap);
      if (o_.device.is_cuda())
        step_waits_ += cuda_host_waits() - waits_before, waited_steps_ += 1, waited_micro_ += int64_t(micro.size());
      st_.step += 1, st_.batch = bi + 1, st_.configs += st_configs_step_;
      st_.seconds += since(t_step);  // training time: batch building, forward, backward, step
      if (profile_) profile_->wait(), profile_->end_step(since(t_step));
      const double epoch_s = st_.seconds - epoch_seconds_before;
      const double cps = double(st_.configs - epoch_configs_before) / std::max(1e-9, epoch_s);
      const double steps_left = double(std::min(total_steps_ - st_.step, (plan_.epochs - e) * batches_ - (bi + 1)));
      progress_.update(e + 1, plan_.epochs, bi + 1, batches_, st_.loss_n ? st_.loss_sum / double(st_.loss_n) : NAN, cps,
                       steps_left * epoch_s / double(bi + 1 - first_batch));
      const bool last_batch = bi + 1 == batches_ || st_.step >= total_steps_;
      if (!last_batch && since(last_ckpt_) >= o_.checkpoint_minutes * 60) {
        save(model_path_, true);
        last_ckpt_ = Clock::now();
      }
      if (o_.kill_after_steps > 0 && st_.step == o_.kill_after_steps && !last_batch) fault();
      if (st_.step >= total_steps_) break;
    }
    progress_.end_line();
    end_epoch(e, st_.seconds - epoch_seconds_before, st_.configs - epoch_configs_before, st_.batch < batches_);
    done = finished();
    if (stopped_early() && lead_ && !o_.quiet)
      std::printf(
          "stopping early: no better valid score in the last %lld %s (--patience); the best was epoch "
          "%lld's, %.4f\n",
          (long long)tp_.patience, tp_.val_every > 0 ? "validations" : "epochs", (long long)st_.best_epoch,
          st_.best_score);
  }
  if (o_.device.is_cuda()) device_peak_bytes_ = cuda_memory_stats(o_.device.index).peak_bytes;
  if (profile_ && lead_ && !o_.quiet) std::fputs(profile_->table().c_str(), stdout);
  // A finished run given a new length, data or eval folder runs no step: record the change all the same.
  if (plan_.resuming && !plan_.notes.empty() && st_.step == first_step) save(model_path_, true);
  return result();
}

// The end of an epoch: validate, log, checkpoint. `partial`: the step budget (--steps) ended the run
// mid-epoch. The weights are validated and logged all the same (the line says "partial_epoch" and how
// many batches ran), but the epoch stays open: the checkpoint holds the next batch, so a resume with a
// larger budget trains the rest of the epoch as the unbroken run does, and drops the partial line
// (trim_metrics) before it logs the whole epoch. A partial validation picks no best epoch.
void Run::end_epoch(int64_t e, double epoch_s, int64_t epoch_configs, bool partial) {
  if (lead_) replace_leftovers();
  Json line = Json::object();
  line.set("epoch", e + 1);
  if (partial) line.set("partial_epoch", true), line.set("batches", st_.batch);
  line.set("step", st_.step);
  line.set("train_loss", st_.loss_n ? st_.loss_sum / double(st_.loss_n) : NAN);
  line.set("lr", opt_->lr());
  line.set("configs_per_s", double(epoch_configs) / std::max(1e-9, epoch_s));
  line.set("train_seconds", epoch_s);
  line.set("skipped", st_.skipped);
  set_host_memory(line);
  // --val-every N: an epoch validates when its steps reach a multiple of N, when it is the run's last or
  // cut short by --steps; decided from the step count alone, so a resumed run validates where the
  // unbroken one does.
  const int64_t n = tp_.val_every, first = st_.step - st_.batch;
  const bool last = partial || st_.step >= total_steps_ || e + 1 >= plan_.epochs;
  const bool cadence = !partial && (n <= 0 || st_.step / n > first / n);  // as the unbroken run would
  const bool validating = !valid_files_.empty() && (cadence || last);
  double valid_score = NAN;
  int64_t nonfinite = 0;  // the validation's predictions that were not finite: then it picks no best.npz
  if (validating) {
    model_->eval();
    working_on_ = detail::str_cat("validation after epoch ", e + 1);
    const auto t_valid = Clock::now();
    // A lookup with --op-max-norm renormalises embedding rows in place. A validation made only because
    // this run ends here (--steps cut the epoch short or ended it, or the last of --epochs, which a
    // resume may raise) is one that a longer unbroken run would not make (under --val-every): it hands
    // the weights back as training left them, so a resume goes on from the same bits.
    const std::vector<Tensor> own = cadence ? std::vector<Tensor>{} : copy_weights();
    const Evaluation ev = evaluate(*model_, *valid_src_, tp_.eval_chunk, plan_.eval_indices, 1, tp_.regression(),
                                   prep_.log_offset, tp_.val_configs);  // one pass: --tta is eval's
    if (!cadence) restore_weights(own);
    line.set("valid_seconds", since(t_valid));
    valid_score = ev.score, nonfinite = ev.nonfinite;
    line.set("valid_score", valid_score);
    line.set("valid", Json::parse(ev.json, "valid metrics"));
  }
  EpochFiles written(lead_, model_path_);  // (best.npz and swa.npz back as they were unless model.npz lands)
  if (!partial) {
    st_.epoch = e + 1, st_.batch = 0, st_.loss_sum = 0, st_.loss_n = 0;
    // (weights that predict NaN rank those configs last, by index, and can score well by chance)
    if (std::isfinite(valid_score) && nonfinite == 0 && valid_score > st_.best_score) {
      st_.best_score = valid_score, st_.best_epoch = st_.epoch;
      written.keep(best_path_);
      save(best_path_, false);
    }
    if (swa_) written.keep(swa_path_), end_epoch_swa(e, validating, line);
  }
  if (dp_) {
    line.set("ranks", world_.size);
    line.set("allreduce_bytes_per_step", dp_->bytes_per_step());
    line.set("sync_seconds_per_step", dp_->sync_seconds_per_step());
    line.set("grad_sum_seconds_per_step", dp_->grad_seconds_per_step());
    dp_->check_same_weights(detail::str_cat("after epoch ", e + 1));
  }
  // The epoch's line, then its checkpoint; a checkpoint that fails to land (a full disk) takes the line back,
  // so the log does not run ahead of the run (a resume would drop it, but gnn plot would draw it).
  std::error_code ec;
  const bool existed = lead_ && fs::exists(metrics_path_, ec);
  const uintmax_t logged = existed ? fs::file_size(metrics_path_, ec) : 0;
  try {
    if (lead_) append_line(metrics_path_, line.dump());  // (a line cut short by a full disk goes too)
    save(model_path_, true);
    written.landed();
  } catch (...) {
    if (lead_ && !ec) existed ? fs::resize_file(metrics_path_, logged, ec) : void(fs::remove(metrics_path_, ec));
    if (lead_ && ec)
      std::fprintf(stderr, "gnn train: warning: %s could not be cut back to the epochs checkpointed (%s)\n",
                   metrics_path_.c_str(), ec.message().c_str());
    throw;
  }
  last_ckpt_ = Clock::now();
  if (!o_.quiet && lead_) {
    const std::string stop =
        partial ? detail::str_cat(" (stopped by --steps after batch ", st_.batch, " of ", batches_, ")") : "";
    std::printf("epoch %lld/%lld%s  step %lld  train_loss %.5f", (long long)(e + 1), (long long)plan_.epochs,
                stop.c_str(), (long long)st_.step, line["train_loss"].is_null() ? NAN : line["train_loss"].as_number());
    if (std::isfinite(valid_score)) std::printf("  valid_score %.4f", valid_score);
    if (nonfinite > 0) std::printf(" (%lld predictions not finite: not a best)", (long long)nonfinite);
    std::printf("  %.0f configs/s  %.1f s\n", line["configs_per_s"].as_number(), epoch_s);
    std::fflush(stdout);
  }
  if (o_.kill_after_steps > 0 && st_.step == o_.kill_after_steps) fault();
}

// Every rank of a data-parallel job must start from the same plan: the same recipe, hyper-parameters,
// seed and data, and the same checkpoint when resuming. A rank that sees another one (RUN or the data
// on a filesystem it does not share, flags that differ) stops the job here, with both plans named,
// instead of hanging in a collective the other ranks never reach.
void Run::agree_on_plan() const {
  const RankFields fields = {{"checkpoint", plan_.resuming ? model_path_ : "none (a new run)"},
                             {"recipe", plan_.recipe->name},
                             {"hyper-parameters", plan_.hp.json()},
                             {"seed", std::to_string(plan_.seed)},
                             {"data", fs::absolute(plan_.data).string()},
                             {"--epochs", std::to_string(plan_.epochs)},
                             {"--steps", std::to_string(plan_.steps)},
                             {"--max-graphs", std::to_string(plan_.max_graphs)},
                             {"--eval-indices", plan_.eval_indices},
                             {"--device", o_.device.is_cuda() ? "cuda" : "cpu"},
                             {"--skip-nonfinite", o_.skip_nonfinite ? "on" : "off"}};
  // (the flag that differs, not every value of both)
  const auto finer = [](const std::string& name, const std::string& v0, const std::string& vr, int r) {
    if (name != "hyper-parameters") return;
    const HParams h0 = HParams::from_json(v0, "rank 0's hyper-parameters"),
                  hr = HParams::from_json(vr, "another rank's hyper-parameters");
    for (const auto* side : {&h0.values, &hr.values})
      for (const auto& [key, unused] : *side) {
        const auto i0 = h0.values.find(key), ir = hr.values.find(key);
        const std::string x0 = i0 == h0.values.end() ? "not set" : i0->second;
        const std::string xr = ir == hr.values.end() ? "not set" : ir->second;
        GNN_CHECK(x0 == xr, "rank ", r, "'s --", key, " is ", xr, ", rank 0's ", x0,
                  ": every rank needs the same flags");
      }
  };
  check_ranks_agree(fields, "the check that every rank starts the same run",
                    "every rank needs the same flags, and RUN and --data on a filesystem every rank sees", finer);
}

// --swa K: the epoch's weights join the last K epochs' snapshots; their average is written to
// RUN/swa.npz and scored on the valid split (swa_valid_score), then training goes on from the epoch's
// own weights. The snapshots travel in model.npz, so a resumed run averages what the unbroken one does.
void Run::end_epoch_swa(int64_t e, bool validating, Json& line) {
  swa_->snapshot(params_);
  const std::vector<Tensor> own = copy_weights();
  swa_->apply(params_);
  if (validating) {
    model_->eval();
    working_on_ = detail::str_cat("validation of the SWA weights after epoch ", e + 1);
    line.set("swa_valid_score",
             evaluate(*model_, *valid_src_, tp_.eval_chunk, plan_.eval_indices, 1, false, 0, tp_.val_configs).score);
  }
  line.set("swa_snapshots", swa_->count());
  save(swa_path_, false);
  restore_weights(own);
}

std::vector<Tensor> Run::copy_weights() const {
  std::vector<Tensor> out;
  for (const nn::NamedParam& p : params_) out.push_back(p.var.value().clone());
  return out;
}

// Into the parameters' own storage, so CUDA graphs captured on it stay valid.
void Run::restore_weights(const std::vector<Tensor>& weights) {
  for (size_t i = 0; i < params_.size(); ++i) Tensor(params_[i].var.value()).copy_from(weights[i]);
}

// Weights (on the host) that an update made non-finite stop the run before anything is written, whatever
// --skip-nonfinite says: the step is already applied (to the weights and to Adam's moments) and cannot be
// skipped. The loss and the gradient were finite: a huge --lr overflowed the update.
void Run::check_finite(int64_t step) const {
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const nn::NamedParam& p : params_) weights.emplace_back(p.name, p.var.value());
  const std::string bad = first_nonfinite(weights);
  GNN_CHECK(bad.empty(), "non-finite weights after the update of step ", step, ": parameter ", bad,
            " (the optimiser's update overflowed); ",
            fs::exists(model_path_) ? model_path_ + " keeps its last finite checkpoint" : "no checkpoint was written",
            "; lower --lr or set --clip");
}

// The test hooks --kill-after-steps / --stall-after-steps: this process (with --fault-rank, only that
// rank of the job) dies of SIGKILL, or stops answering, as a crashed or hung rank would.
void Run::fault() const {
  if (o_.fault_rank >= 0 && o_.fault_rank != world_.rank) return;
  std::fflush(stdout);
  if (o_.stall) {
    std::fprintf(stderr, "gnn train: %sstalling after step %lld (--stall-after-steps)\n", dist::rank_prefix().c_str(),
                 (long long)st_.step);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::raise(SIGKILL);
}

// --patience P: the run ends once P validations have passed without a better score (it needs a valid
// split). Every epoch validates without --val-every, so P epochs. With --val-every N, the validating
// epochs among (best, now] are those that reach a multiple of N steps: all of them when an epoch has N
// steps or more, else one per multiple of N. Derived from the checkpoint's epoch and best epoch, so a
// resumed run stops where the unbroken one did; a stop falls on an epoch that validated.
bool Run::stopped_early() const {
  const int64_t patience = tp_.patience, n = tp_.val_every, b = batches_;
  if (patience <= 0 || valid_files_.empty() || st_.epoch <= 0) return false;
  const int64_t since = n <= 0 || b >= n ? st_.epoch - st_.best_epoch : st_.epoch * b / n - st_.best_epoch * b / n;
  return since >= patience;
}

TrainResult Run::result() const {
  TrainResult r;
  r.seconds = st_.seconds, r.configs = st_.configs;
  Json j = Json::object();
  j.set("run", o_.out);
  j.set("model", plan_.recipe->name);
  j.set("epochs", st_.epoch);
  j.set("steps", st_.step);
  j.set("skipped", st_.skipped);
  j.set("train_seconds", st_.seconds);
  if (stopped_early()) j.set("stopped_early", true);
  if (std::isfinite(st_.best_score)) {
    j.set("best_valid_score", st_.best_score);
    j.set("best_epoch", st_.best_epoch);
  }
  j.set("configs_per_s", double(st_.configs) / std::max(1e-9, st_.seconds));
  if (dp_) {
    j.set("ranks", world_.size);
    j.set("allreduce_bytes_per_step", dp_->bytes_per_step());
    j.set("sync_seconds_per_step", dp_->sync_seconds_per_step());
    j.set("grad_sum_seconds_per_step", dp_->grad_seconds_per_step());
  }
  set_host_memory(j);
  const int64_t device_peak = !o_.device.is_cuda()      ? 0
                              : device_peak_bytes_ >= 0 ? device_peak_bytes_
                                                        : cuda_memory_stats(o_.device.index).peak_bytes;
  if (profile_) j.set("profile", profile_->json());
  if (o_.device.is_cuda()) {
    j.set("device", o_.device.str());
    j.set("peak_device_mb", double(device_peak) / 1e6);
    // (left out under --profile, which waits for every op itself)
    if (waited_steps_ && !profile_) {
      j.set("device_waits_per_step", double(step_waits_) / double(waited_steps_));
      j.set("micro_batches_per_step", double(waited_micro_) / double(waited_steps_));
    }
    if (graphs_) {
      j.set("cuda_graph_steps", graphs_->replayed());
      j.set("cuda_graphs_captured", graphs_->captured());
      j.set("cuda_graph_failures", graphs_->failed());
      // (what the graphs' own pools hold: their activations and gradients, outside peak_device_mb's pool)
      j.set("cuda_graphs_mb", double(cuda_graph_memory_stats(o_.device.index).reserved_bytes) / 1e6);
    }
  }
  r.json = j.dump();
  return r;
}

}  // namespace

ModelPass model_pass(const LoadedModel& m, const ModelGraph& g, const std::vector<int64_t>& configs, bool training) {
  GNN_CHECK(!g.target.empty(), g.file.path, ": has no runtimes, so no loss to take gradients of");
  GNN_CHECK(!configs.empty(), g.file.path, ": no configs to score");
  for (int64_t c : configs)
    GNN_CHECK(c >= 0 && c < g.num_configs(), g.file.path, ": config ", c, " is not in [0, ", g.num_configs(), ")");
  RankModel& model = *m.model;
  const auto params = model.parameters();
  const Device dev = params.empty() ? Device::cpu() : params.front().var.device();
  ModelPass out;
  out.batch = make_batch({&g}, {configs}).prepared(model.needs());
  training ? model.train() : model.eval();
  model.zero_grad();
  for (const nn::NamedParam& p : params) out.params.emplace_back(p.name, p.var.value().to(Device::cpu()));
  const ag::Var pred = model.forward(out.batch.to(dev));
  const ag::Var loss = batch_loss(loss_terms(m.train), pred, out.batch, m.prep.log_offset);
  ag::backward(loss);
  out.score = pred.value().on(Device::cpu());
  out.loss = loss.value().item();
  for (const nn::NamedParam& p : params)
    out.grads.emplace_back(
        p.name, p.var.has_grad() ? p.var.grad().on(Device::cpu()) : Tensor::zeros(p.var.shape(), p.var.dtype()));
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor now = params[i].var.value().to(Device::cpu());  // (a copy, not the live host parameter)
    const Tensor& was = out.params[i].second;
    if (std::memcmp(now.data(), was.data(), was.nbytes()) != 0) out.changed.emplace_back(params[i].name, now);
  }
  model.zero_grad();
  model.eval();
  return out;
}

TrainResult run_training(const TrainOptions& o) {
  std::string working_on = "starting the run";
  try {
    Run run(o, working_on);
    return run.train();
  } catch (const std::bad_alloc&) {  // (a container's allocation, outside the tensors' allocator)
    GNN_FAIL(working_on, " does not fit in the memory this process may use: an allocation failed (a `ulimit -v` or ",
             "`-d`, the cgroup's limit or the machine's memory); give it more memory, or start a new run with lower ",
             "--configs or --batch-graphs");
  } catch (const MemoryLimitError& e) {
    const std::string smaller = "start a new run with lower --configs or --batch-graphs (layout: or --segment)";
    if (e.limit == 0)  // (the system refused, under --memory-limit: the allocator's cache and the rest count too)
      GNN_FAIL(working_on, " does not fit in the memory this process may use: the system refused ", e.requested,
               " bytes with ", e.in_use,
               " bytes of tensors in use (a `ulimit -v` or `-d`, the cgroup's limit or "
               "the machine's memory); ",
               smaller, ", or give it more memory");
    GNN_FAIL(working_on, " does not fit in the memory limit of ", e.limit,
             " bytes (--memory-limit): it needs more than ", e.in_use + e.requested, " bytes of tensors (", e.requested,
             " asked for with ", e.in_use, " in use); raise --memory-limit, or ", smaller);
  }
}

}  // namespace gnn::train
