#include "apps/train/run_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "apps/checkpoint.h"
#include "io/atomic_file.h"
#include "io/byte_source.h"
#include "io/json.h"
#include "io/npz.h"
#include "kernels/gemm.h"

namespace gnn::train {

namespace fs = std::filesystem;

Meta read_meta(const std::string& path) {
  GNN_CHECK(fs::exists(path), path, ": no such checkpoint");
  NpzReader r(path);
  std::vector<std::string> keys;
  for (const std::string& k : r.keys())
    if (k.rfind("params/", 0) != 0 && k.rfind("optim/", 0) != 0) keys.push_back(k);
  Meta m;
  m.arrays = r.load_keys(keys);
  // Every floating-point array a checkpoint holds (preprocessing, state, SWA snapshots, a recipe's own
  // state) is finite when gnn writes it (Run::save checks); one that is not was damaged, and would turn
  // into NaN scores.
  const std::string bad = first_nonfinite({m.arrays.begin(), m.arrays.end()}, "state/best_score");
  GNN_CHECK(bad.empty(), path, ": ", bad, "; the checkpoint is damaged");
  const int64_t format = get_i64(m.arrays, "meta/format", path);
  GNN_CHECK(format == kCheckpointFormat, path, ": checkpoint format ", format, ", this build reads ",
            kCheckpointFormat);
  const std::string recipe = tensor_text(m.arrays, "meta/recipe", path);
  m.recipe = lookup_recipe(recipe);
  GNN_CHECK(m.recipe, path, ": 'meta/recipe' is '", recipe, "', a recipe this build does not have (gnn models)");
  // The run's length as --epochs and --steps bound it (checkpoints written before it was recorded lack it).
  m.epochs = get_i64(m.arrays, "meta/epochs", path, 1, kMaxEpochs, m.epochs);
  m.steps = get_i64(m.arrays, "meta/steps", path, 0, INT64_MAX, m.steps);
  m.hparams = HParams::from_json(tensor_text(m.arrays, "meta/hparams", path), path + ": meta/hparams");
  // Numbers as older gnn stored them from the command line (strtod read "+0.01" and " 1"): read as they
  // were then; the flags themselves are plain decimal now.
  for (auto& [name, value] : m.hparams.values) {
    std::string t = value;
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(0, 1);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    if (!t.empty() && t[0] == '+') t.erase(0, 1);
    double d = 0;
    if (t != value && !t.empty() && std::from_chars(t.data(), t.data() + t.size(), d).ptr == t.data() + t.size())
      value = t;
  }
  // A checkpoint written before a hyper-parameter existed runs with the value that matches what it ran
  // (--dropout-mask: a mask per config, as every recipe drew before the flag; tile-mlp's --pool: mean and
  // max, its only readout before the flag; dnnperf-anee's --readout: mean, likewise), else the recipe's
  // default (--share, which changes nothing of the results); --graph-repeats: 1, each graph once an epoch;
  // layout-sage-5th's --opcode-groups and --own-layout: the inputs it read before them; layout-tgraph's
  // --sage-order: aggregate-first, the order its SAGE blocks summed in before the flag.
  // Keyed by recipe ("" for every recipe) and flag, so another recipe's flag of the same name is untouched.
  static const std::map<std::pair<std::string, std::string>, std::string> kBeforeTheFlag = {
      {{"", "dropout-mask"}, "config"},
      {{"", "graph-repeats"}, "1"},
      {{"tile-mlp", "pool"}, "mean-max"},
      {{"dnnperf-anee", "readout"}, "mean"},
      {{"layout-sage-5th", "opcode-groups"}, "none"},
      {{"layout-sage-5th", "own-layout"}, "rank"},
      {{"layout-tgraph", "sage-order"}, "aggregate-first"}};
  for (const auto& [name, value] : m.recipe->defaults().values) {
    auto before = kBeforeTheFlag.find({m.recipe->name, name});
    if (before == kBeforeTheFlag.end()) before = kBeforeTheFlag.find({"", name});
    m.hparams.values.emplace(name, before == kBeforeTheFlag.end() ? value : before->second);
  }
  // Each value as a flag's own check would take it: a damaged one is named here, not by a layer's sizes
  // (eval) or as a flag the user never gave (--resume). Not those a resume may change (validation's), which
  // eval does not read and plan_run checks after a change: an older gnn took values since refused
  // (--val-configs 1), and a resume must be able to set them anew.
  HParams stored = m.hparams;
  for (const HParamSpec& s : m.recipe->hparams)
    if (!s.resume_change.empty()) stored.values.erase(s.name);
  if (const std::string e = check_hparams(m.recipe->hparams, stored, m.recipe->name); !e.empty())
    GNN_FAIL(path, ": meta/hparams: ", e.rfind("--", 0) == 0 ? e.substr(2) : e, "; the checkpoint is damaged");
  m.prep = Preprocessing::load(m.arrays, path);
  // A trainable transform keeps its features for the model's own standardisation (its parameters): the
  // preprocessing and the hyper-parameter must say the same, or the model would run on features nobody
  // standardised (or standardise what was already transformed).
  for (const auto& [flag, t] :
       {std::pair{"node-transform", &m.prep.node}, std::pair{"config-transform", &m.prep.config}}) {
    const auto it = m.hparams.values.find(flag);
    if (it == m.hparams.values.end()) continue;
    GNN_CHECK((it->second == "trainable") == (t->kind() == FeatureTransform::kTrainable), path, ": meta/hparams has ",
              flag, " ", it->second, " but the stored preprocessing is ", feature_transform_name(t->kind()),
              "; the checkpoint is damaged");
  }
  return m;
}

ModelDims dims_of(const Preprocessing& p) {
  ModelDims d{p.node_features(), p.config_features()};
  if (p.node.kind() == FeatureTransform::kTrainable) d.node_mean = p.node.shift(), d.node_std = p.node.scale();
  if (p.config.kind() == FeatureTransform::kTrainable)
    d.config_mean = p.config.shift(), d.config_std = p.config.scale();
  return d;
}

void State::save(std::vector<std::pair<std::string, Tensor>>& out) const {
  for (auto [k, v] : {std::pair<const char*, int64_t>{"epoch", epoch},
                      {"batch", batch},
                      {"step", step},
                      {"skipped", skipped},
                      {"loss_n", loss_n},
                      {"configs", configs},
                      {"best_epoch", best_epoch}})
    out.emplace_back(std::string("state/") + k, i64_tensor(v));
  for (auto [k, v] :
       {std::pair<const char*, double>{"loss_sum", loss_sum}, {"seconds", seconds}, {"best_score", best_score}})
    out.emplace_back(std::string("state/") + k, f64_tensor(v));
}

void State::load(const std::map<std::string, Tensor>& a, const std::string& f) {
  epoch = get_i64(a, "state/epoch", f), batch = get_i64(a, "state/batch", f), step = get_i64(a, "state/step", f);
  skipped = get_i64(a, "state/skipped", f), loss_n = get_i64(a, "state/loss_n", f),
  configs = get_i64(a, "state/configs", f);
  best_epoch = get_i64(a, "state/best_epoch", f);
  loss_sum = get_f64(a, "state/loss_sum", f), seconds = get_f64(a, "state/seconds", f);
  best_score = get_f64(a, "state/best_score", f);
  // Written by gnn these hold; anything else was damaged, and would train a run that is not the one saved.
  auto in_range = [&](const char* key, int64_t v, int64_t lo, int64_t hi) {
    check_stored(f, std::string("state/") + key, v, lo, hi);
  };
  in_range("epoch", epoch, 0, kMaxEpochs), in_range("step", step, 0, INT64_MAX), in_range("batch", batch, 0, step);
  in_range("skipped", skipped, 0, step), in_range("loss_n", loss_n, 0, step),
      in_range("configs", configs, 0, INT64_MAX);
  in_range("best_epoch", best_epoch, 0, epoch);
  GNN_CHECK(std::isfinite(loss_sum) && std::isfinite(seconds) && seconds >= 0, f,
            ": 'state/loss_sum' or 'state/seconds' is not a finite time or sum; the checkpoint is damaged");
  GNN_CHECK(std::isfinite(best_score) == (best_epoch > 0), f, ": 'state/best_score' ", best_score,
            " does not match 'state/best_epoch' ", best_epoch, "; the checkpoint is damaged");
}

namespace {

std::string stored_text(const Meta& m, const std::string& key, const std::string& file) {
  return m.arrays.count(key) ? tensor_text(m.arrays, key, file) : "";
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
    bad_option("--model ", o.recipe, ": the run in ", run, " trains ", p.recipe->name,
               "; a resumed run keeps its recipe");
  for (const auto& [k, v] : o.hparams) {
    const std::string was = p.hp.values.count(k) ? p.hp.values.at(k) : "";
    const HParamSpec* spec = find_spec(p.recipe->hparams, k);
    if (was == v || (spec && same_hparam_value(*spec, was, v))) continue;  // (--lr 0.001 for 1e-3: its text kept)
    if (spec && !spec->resume_change.empty()) {
      p.notes.push_back("--" + k + " " + v + ": the run was started with " + (was.empty() ? "0" : was) + "; " +
                        spec->resume_change);
      p.hp.values[k] = v;
      continue;
    }
    bad_option("--", k, " ", v, ": the run in ", run, " was started with ", was.empty() ? "no such flag" : was,
               "; a resumed run keeps its hyper-parameters");
  }
  p.seed = uint64_t(get_i64(p.meta.arrays, "meta/seed", model_path, 0, INT64_MAX));  // (--seed's range)
  if (o.seed && *o.seed != p.seed)
    bad_option("--seed ", *o.seed, ": the run in ", run, " was started with seed ", p.seed,
               "; a resumed run keeps its seed");
  // Checkpoints written before these were recorded lack them: the command line's values are taken.
  const bool recorded = p.meta.arrays.count("meta/epochs") > 0;
  const std::string older = " (not recorded: the checkpoint was written by an older gnn)";
  const int64_t max_graphs = get_i64(p.meta.arrays, "meta/max_graphs", model_path, 0, INT64_MAX, o.max_graphs);
  if (o.max_graphs > 0 && o.max_graphs != max_graphs)
    bad_option("--max-graphs ", o.max_graphs, ": the run in ", run, " was started with ",
               max_graphs ? std::to_string(max_graphs) : "every graph", "; a resumed run keeps its graphs");
  p.max_graphs = max_graphs;

  // The rest may change: each change is said in the output.
  const std::string data = stored_text(p.meta, "meta/data", model_path);
  p.data = o.data.empty() ? data : o.data;
  if (p.data.empty())
    bad_option("--data: the run in ", run, " does not record its dataset (written by an older gnn); pass --data");
  if (!o.data.empty() && !data.empty() && !same_path(o.data, data))
    p.notes.push_back("--data " + o.data + ": the run was started on " + data + "; its preprocessing is kept");
  p.epochs = o.epochs > 0 ? o.epochs : p.meta.epochs;
  p.steps = o.steps > 0 ? o.steps : o.steps < 0 ? 0 : p.meta.steps;
  // A run cannot be made shorter than what it has trained: its weights would not be the ones it claims.
  // (state/epoch counts whole epochs; a run stopped within one has trained part of the next.)
  p.state.load(p.meta.arrays, model_path);
  const int64_t done_steps = p.state.step, begun_epochs = p.state.epoch + (p.state.batch > 0 ? 1 : 0);
  // (the run's own length too: an older gnn's checkpoint records none, and 10 epochs is then assumed)
  const std::string own = recorded ? "the length it records" : "the 10 epochs assumed (it records no length)";
  if (p.epochs < begun_epochs)
    bad_option("--epochs ", p.epochs, o.epochs > 0 ? "" : " (" + own + ")", ": the run in ", run,
               " has already trained ", begun_epochs, begun_epochs == 1 ? " epoch" : " epochs",
               " (in part or whole); give --epochs ", begun_epochs, " or more");
  if (p.steps > 0 && p.steps < done_steps)
    bad_option("--steps ", p.steps, o.steps > 0 ? "" : " (the run's own)", ": the run in ", run,
               " has already trained ", done_steps, " steps; give --steps ", done_steps,
               " or more, or 0 for no step limit");
  const int64_t epochs = p.meta.epochs, steps = p.meta.steps;
  if (p.epochs != epochs || !recorded)
    p.notes.push_back("--epochs " + std::to_string(p.epochs) + ": the run was started with " +
                      (recorded ? std::to_string(epochs) : "?" + older) + "; it now ends after epoch " +
                      std::to_string(p.epochs) + (p.steps > 0 ? " or step " + std::to_string(p.steps) : ""));
  if (p.steps != steps && recorded)
    p.notes.push_back("--steps " + (p.steps ? std::to_string(p.steps) : std::string("0 (no limit)")) +
                      ": the run was started with " + (steps ? std::to_string(steps) : "no step limit"));
  const std::string eval_indices = stored_text(p.meta, "meta/eval_indices", model_path);
  p.eval_indices = o.eval_indices.empty() ? eval_indices : o.eval_indices;
  if (!o.eval_indices.empty() && !same_path(o.eval_indices, eval_indices))
    p.notes.push_back("--eval-indices " + o.eval_indices + ": the run was started with " +
                      (eval_indices.empty() ? (recorded ? "none" : "?" + older) : eval_indices));
  return p;
}

}  // namespace

RunPlan plan_run(const TrainOptions& o, const std::string& model_path) {
  const bool resuming = o.resume && fs::exists(model_path);
  if (o.resume && !resuming && o.recipe.empty())
    bad_option("--resume: ",
               fs::exists(o.out) ? model_path + " does not exist, so " + o.out + " holds no run to resume"
                                 : "--out " + o.out + " does not exist, so there is no run to resume",
               "; a new run needs --model and --data");
  RunPlan p = resuming ? plan_resumed_run(o, model_path) : plan_new_run(o);
  if (std::string e = check_hparams(p.recipe->hparams, p.hp, p.recipe->name); !e.empty()) bad_option(e);
  const std::string recorded = p.resuming ? " (recorded in the run's model.npz; pass it again to change it)" : "";
  if (!fs::exists(p.data)) bad_option("--data ", p.data, ": no such file or directory", o.data.empty() ? recorded : "");
  if (!p.eval_indices.empty() && !fs::is_directory(p.eval_indices))
    bad_option("--eval-indices ", p.eval_indices, ": not a directory", o.eval_indices.empty() ? recorded : "");
  if (o.memory_limit < 0) bad_option("--memory-limit: must be >= 0 bytes, got ", o.memory_limit);
  return p;
}

std::vector<std::string> run_files(const std::string& run) {
  std::vector<std::string> out;
  for (const char* f : {"model.npz", "best.npz", "swa.npz", "metrics.jsonl", "lock"})
    out.push_back((fs::path(run) / f).string());
  return out;
}

RunLock::RunLock(const std::string& run) {
  const std::string path = (fs::path(run) / "lock").string();
  // A writer that fails or is stopped before the run's first checkpoint removes the lock file it made, while
  // holding the lock: one who opened that file before and locks it after holds a removed file, so the lock
  // is taken again until the file locked is the one the path names.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    int err = errno;
    created_ = fd_ >= 0;
    // (the folder removed in between by a failing writer that made it, or the file: made anew)
    if (fd_ < 0 && err == ENOENT && attempt < 100) {
      std::error_code ec;
      fs::create_directories(run, ec);
      if (!ec) continue;
    }
    if (fd_ < 0 && err == EEXIST) {
      fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      err = errno;
      if (fd_ < 0 && err == ENOENT && attempt < 100) continue;
      if (fd_ < 0 && err == EACCES) {  // another user's
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        err = fd_ < 0 ? errno : err;
      }
    }
    GNN_CHECK(fd_ >= 0 || err != ELOOP, "--out ", run, ": its lock file ", path,
              " is a symbolic link, which train does not follow (the lock is the run's own file); remove the link");
    GNN_CHECK(fd_ >= 0, "--out ", run, ": cannot create its lock file ", path, " (", std::strerror(err), ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {  // a filesystem without flock (some Lustre, NFS and FUSE mounts): as before locks
        std::fprintf(stderr,
                     "gnn train: warning: %s cannot be locked here (%s); nothing stops a second writer of this run\n",
                     path.c_str(), std::strerror(err));
        return;
      }
      char buf[32] = {};
      const ssize_t got = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      fd_ = -1;
      std::string pid = got > 0 ? std::string(buf, size_t(got)) : "";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      GNN_FAIL("--out ", run, ": another gnn train", pid.empty() ? "" : " (pid " + pid + ")",
               " is writing this run; wait for it to end, or choose another directory");
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::lstat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      held_ = true;
      break;
    }
    ::close(fd_);
    fd_ = -1;
    GNN_CHECK(attempt < 100, "--out ", run, ": its lock file ", path,
              " keeps being replaced; is another program "
              "removing it?");
  }
  // A file named lock that was there: a killed run's (its pid, or empty; zeros where a crash of the machine
  // kept the file's size but not the pid written into it), else not gnn's.
  if (!created_) {
    char buf[64] = {};
    const ssize_t got = ::pread(fd_, buf, sizeof buf, 0);
    const std::string text = got > 0 ? std::string(buf, size_t(got)) : "";
    constexpr std::string_view kPidBytes("0123456789\n\0", 12);
    if (text.find_first_not_of(kPidBytes) != std::string::npos || got == ssize_t(sizeof buf)) {
      ::close(fd_);
      fd_ = -1;
      GNN_FAIL("--out ", run,
               ": holds a file named lock that is not a gnn train lock (it holds more than a pid); "
               "train would overwrite it: move it, or choose another directory");
    }
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if ((::fcntl(fd_, F_GETFL) & O_ACCMODE) == O_RDWR &&
      (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())))
    std::fprintf(stderr, "gnn train: warning: cannot record this process's pid in %s (%s)\n", path.c_str(),
                 std::strerror(errno));
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // (closing drops the lock)
}

void check_leftovers(const std::string& run) {
  std::vector<std::string> later;
  const std::string metrics = (fs::path(run) / "metrics.jsonl").string();
  if (fs::exists(metrics)) {
    int64_t last = 0;
    std::istringstream in(read_text_file(metrics));
    for (std::string line; std::getline(in, line);) try {
        const Json j = Json::parse(line, metrics);
        last = std::max(last, j["epoch"].as_int());
      } catch (const Error&) {  // (a line cut short: what the others say decides)
      }
    if (last > 1) later.push_back(detail::str_cat(metrics, " (", last, " epochs)"));
  }
  for (const char* name : {"best.npz", "swa.npz"}) {
    const std::string f = (fs::path(run) / name).string();
    if (!fs::exists(f)) continue;
    int64_t epoch = -1;  // (unreadable: kept, as a later epoch's would be)
    try {
      const Tensor t = NpzReader(f).load("state/epoch");
      if (t.dtype() == DType::I64 && t.numel() == 1) epoch = t.i64()[0];
    } catch (const Error&) {
    }
    if (epoch < 0 || epoch > 1)
      later.push_back(epoch < 0 ? f + " (its epoch unreadable)" : detail::str_cat(f, " (epoch ", epoch, ")"));
  }
  if (later.empty()) return;
  std::string files;
  for (const std::string& f : later) files += (files.empty() ? "" : ", ") + f;
  bad_option("--out ", run, ": has no model.npz but holds an earlier run's ", files,
             ", which a new run would replace: restore its model.npz (and pass --resume), or choose another "
             "directory");
}

void trim_metrics(const std::string& path, int64_t epochs, bool keep_partial) {
  if (!fs::exists(path)) {
    if (epochs > 0)
      std::fprintf(stderr,
                   "gnn train: warning: %s is missing; the log of the %lld epochs before the checkpoint is lost\n",
                   path.c_str(), (long long)epochs);
    return;
  }
  const std::string text = read_text_file(path);
  std::istringstream in(text);
  std::string keep, line;
  int64_t unreadable = 0;
  std::set<int64_t> logged;  // the epochs whose lines are kept (a line repeated by hand counts once)
  while (std::getline(in, line)) {
    try {
      const Json j = Json::parse(line, path);
      // (an object whose epoch is a whole number from 1, as train writes them: another line, say
      // {"epoch": -5} appended by hand, is dropped and said, not kept for gnn plot to refuse)
      GNN_CHECK(
          j.type() == Json::Type::Object && j.contains("epoch") && j["epoch"].is_integer() && j["epoch"].as_int() >= 1,
          path, ": not an epoch's line");
      const int64_t e = j["epoch"].as_int();
      const bool partial = j.contains("partial_epoch");
      if ((e <= epochs && !partial) || (keep_partial && partial && e == epochs + 1)) {
        keep += line + "\n";
        if (!partial) logged.insert(e);
      }
    } catch (const Error&) {
      // A last line cut short by the interruption is dropped as expected; a bad line before it is said.
      unreadable += in.peek() != std::char_traits<char>::eof() || text.back() == '\n';
    }
  }
  const std::string dropped = detail::str_cat(unreadable, " line(s) that are not an epoch's record, dropped");
  const int64_t kept = int64_t(logged.size());
  if (kept < epochs)
    std::fprintf(stderr,
                 "gnn train: warning: %s holds the lines of %lld of the %lld epochs before the checkpoint%s; "
                 "the rest of its history is lost\n",
                 path.c_str(), (long long)kept, (long long)epochs, unreadable ? (" and " + dropped).c_str() : "");
  else if (unreadable > 0)
    std::fprintf(stderr, "gnn train: warning: %s holds %s; the %lld epochs before the checkpoint are all there\n",
                 path.c_str(), dropped.c_str(), (long long)epochs);
  write_file_atomic(path, keep);
}

void append_line(const std::string& path, const std::string& line) {
  FILE* f = std::fopen(path.c_str(), "a");
  GNN_CHECK(f, path, ": cannot append (", std::strerror(errno), ")");
  // A full disk shows here, not as a silently missing line.
  const bool ok = std::fprintf(f, "%s\n", line.c_str()) >= 0 && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  GNN_CHECK(ok, path, ": cannot append (", std::strerror(err), ")");
}

int64_t stored_i64(const Meta& m, const std::string& key) {
  const auto it = m.arrays.find(key);
  return it == m.arrays.end() || it->second.dtype() != DType::I64 || it->second.numel() != 1 ? int64_t(-1)
                                                                                             : it->second.i64()[0];
}

// What a checkpoint of another run (best.npz or swa.npz beside a model.npz that was replaced, or the other
// way round) holds otherwise than model.npz, of what every checkpoint of one run shares: its seed, its
// preprocessing (fitted once, kept on resume) and the hyper-parameters a resume may not change that both
// files record; "" if none differs. ours: model.npz's.
std::string meta_differing(const Meta& ours, const Meta& theirs) {
  const int64_t seed = stored_i64(theirs, "meta/seed");
  if (seed >= 0 && seed != stored_i64(ours, "meta/seed"))  // (not recorded by an older gnn: not compared)
    return detail::str_cat("its seed is ", seed, ", model.npz's ", stored_i64(ours, "meta/seed"));
  // (as loaded, each field in its current form: one that an older gnn did not record reads as its default)
  std::vector<std::pair<std::string, Tensor>> own, other;
  ours.prep.save(own), theirs.prep.save(other);
  for (size_t i = 0; i < std::max(own.size(), other.size()); ++i) {
    const bool same = i < own.size() && i < other.size() && own[i].first == other[i].first &&
                      own[i].second.dtype() == other[i].second.dtype() &&
                      own[i].second.shape() == other[i].second.shape() &&
                      (own[i].second.nbytes() == 0 ||  // (an empty array has no data pointer)
                       std::memcmp(own[i].second.data(), other[i].second.data(), own[i].second.nbytes()) == 0);
    if (!same)
      return "its preprocessing (fitted on the training graphs when the run started) differs in '" +
             (i < own.size() ? own[i].first : other[i].first) + "'";
  }
  // Only the flags both files store: one that a file from an older gnn lacks reads as what that gnn ran, which
  // may differ from what a later checkpoint of the same run records.
  const HParams stored = HParams::from_json(tensor_text(theirs.arrays, "meta/hparams", ""), "meta/hparams"),
                mine = HParams::from_json(tensor_text(ours.arrays, "meta/hparams", ""), "meta/hparams");
  for (const auto& [key, unused] : stored.values) {
    const HParamSpec* spec = find_spec(ours.recipe->hparams, key);
    if (!mine.values.count(key) || (spec && !spec->resume_change.empty())) continue;  // (a resume may change it)
    const std::string &a = ours.hparams.values.at(key), &b = theirs.hparams.values.at(key);
    if (a != b && !(spec && same_hparam_value(*spec, a, b)))
      return detail::str_cat("--", key, " is ", b, " there, ", a, " in model.npz");
  }
  return "";
}

int64_t last_logged_epoch(const std::string& metrics) {
  std::error_code ec;
  if (!fs::exists(metrics, ec)) return 0;
  std::istringstream in(read_text_file(metrics));
  int64_t last = 0;
  for (std::string line; std::getline(in, line);) try {
      const Json j = Json::parse(line, metrics);
      if (j.type() == Json::Type::Object && j.contains("epoch") && j["epoch"].is_integer())
        last = std::max(last, j["epoch"].as_int());
    } catch (const Error&) {  // (a line cut short, or not train's: not an epoch's record)
    }
  return last;
}

std::string out_of_step(const Meta& model, const Meta& file, bool swa) {
  const char* key = swa ? "state/epoch" : "state/best_epoch";
  const int64_t mine = stored_i64(model, key), theirs = stored_i64(file, key);
  if (mine < 0 || theirs < 0 || mine == theirs) return "";  // (not recorded by an older gnn: not compared)
  const std::string what =
      swa ? detail::str_cat("it averages the weights up to epoch ", theirs, ", model.npz is at epoch ", mine)
          : detail::str_cat("it holds the best of epoch ", theirs, ", model.npz's best is ",
                            mine > 0 ? detail::str_cat("epoch ", mine) : std::string("none yet"));
  // (an epoch past the one after model.npz's: the run went on past model.npz, which was put back since)
  const int64_t next = stored_i64(model, "state/epoch") + 1;
  if (theirs > mine && next > 0 && theirs > next)
    return what + ": newer than the epoch after model.npz's (model.npz put back from an earlier time?)";
  return what + (theirs > mine ? ": written by an epoch whose model.npz has not landed (a run writing it now, or "
                                 "one killed between the two)"
                               : ": older than the run's record (put back from an earlier time?)");
}

std::string run_checkpoint(const std::string& run, const std::string& which) {
  GNN_CHECK(fs::is_directory(run), "--run ", run, ": not a directory");
  const std::string best = (fs::path(run) / "best.npz").string(), last = (fs::path(run) / "model.npz").string();
  // best.npz or swa.npz beside a model.npz: of the same run, as --resume checks them (a file copied from
  // another run would be scored under this run's name)
  auto of_the_run = [&](const std::string& f) {
    if (!fs::exists(last)) return f;  // (an interrupted first epoch: nothing to set it against)
    const Meta ours = read_meta(last), theirs = read_meta(f);
    const char* way_out = "; score --checkpoint last, or remove it (train writes it again)";
    GNN_CHECK(theirs.recipe == ours.recipe, "--checkpoint ", which, ": ", f, ": holds a ", theirs.recipe->name,
              " model; the run's model.npz ", ours.recipe->name, way_out);
    const std::string other = meta_differing(ours, theirs);
    GNN_CHECK(other.empty(), "--checkpoint ", which, ": ", f, ": is not of the run model.npz holds: ", other, way_out);
    const std::string step = out_of_step(ours, theirs, which == "swa");
    GNN_CHECK(step.empty(), "--checkpoint ", which, ": ", f, ": ", step,
              "; score --checkpoint last (a resume of a run killed so puts back the file it replaced)");
    return f;
  };
  if (which == "swa") {
    const std::string swa = (fs::path(run) / "swa.npz").string();
    GNN_CHECK(fs::exists(swa), "--checkpoint swa: ", swa, " does not exist (the run was trained without --swa?)");
    return of_the_run(swa);
  }
  if (which == "best") {
    GNN_CHECK(fs::exists(best), "--checkpoint best: ", best,
              " does not exist (the run had no valid split, or it was removed)");
    return of_the_run(best);
  }
  GNN_CHECK(which == "last" || which == "auto", "--checkpoint: expected best, last, swa or auto, got '", which, "'");
  if (which == "auto" && fs::exists(best)) return of_the_run(best);
  GNN_CHECK(fs::exists(last), "--run ", run, ": no model.npz (not a gnn train run directory?)");
  return last;
}

LoadedModel load_model(const std::string& checkpoint, Device device) {
  Meta m = read_meta(checkpoint);
  LoadedModel out;
  out.recipe = m.recipe;
  out.hparams = m.hparams;
  out.train = TrainHParams::read(m.hparams, m.recipe->kind == "layout");
  if (!device.is_cuda()) {  // scored on the CPU with the products it trained with: the process-wide setting
    GNN_CHECK(!out.train.matmul_bf16 || gemm_bf16_supported(), checkpoint,
              ": trained with --matmul-precision bf16, whose products this CPU cannot compute (no AVX512-BF16); "
              "score it on a GPU (--device cuda) or on a CPU that has it");
    set_gemm_cpu_precision(out.train.matmul_bf16 ? GemmPrecision::kBf16 : GemmPrecision::kF32);
  }
  out.prep = m.prep;
  Rng rng(0);
  out.model = m.recipe->build(m.hparams, dims_of(m.prep), rng);
  load_checkpoint(checkpoint, out.model->parameters(), nullptr);
  out.model->eval();
  out.path = checkpoint;
  out.epoch = get_i64(m.arrays, "state/epoch", checkpoint, 0, kMaxEpochs);
  return out;
}

}  // namespace gnn::train
