// gnn eval and predict's side of the pipeline: a run's files of one kind, the scores of configs, the
// ranking a submission holds, and the competition metrics over a split.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "apps/scoring.h"
#include "apps/train/trainer.h"
#include "dist/comm.h"
#include "io/atomic_file.h"

namespace gnn::train {

std::vector<DatasetFile> kind_files(const std::string& data, const std::string& kind, const std::string& split) {
  WalkOptions wo;
  wo.splits = {split};
  std::vector<DatasetFile> out;
  for (DatasetFile& f : walk_dataset(data, wo))
    if (f.collection.kind == kind) out.push_back(std::move(f));
  return out;
}

std::vector<int64_t> tta_order(int64_t n, int64_t t) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (t == 0) return order;
  Rng rng(0x7474615f6f726465ull ^ (uint64_t(t) * 0x9E3779B97F4A7C15ull));  // fixed: eval is deterministic
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.below(uint64_t(i + 1)))]);
  return order;
}

namespace {

// One pass over `configs` in the fewest near-equal chunks of at most `chunk`, into `all` (on the model's
// device, [n]) at the configs' positions.
void predict_pass(RankModel& model, const ModelGraph& g, const std::vector<int64_t>& configs, int64_t chunk, Device dev,
                  Tensor& all) {
  // Chunks of near-equal size: a model that normalises across the configs of a batch (layout-sage-6th's
  // head) would otherwise score a last chunk of one config against nothing.
  const int64_t n = int64_t(configs.size()), pieces = (n + chunk - 1) / chunk;
  for (int64_t k = 0; k < pieces; ++k) {
    const int64_t at = n * k / pieces, end = n * (k + 1) / pieces;
    const std::vector<int64_t> part(configs.begin() + at, configs.begin() + end);
    const Batch b = make_batch({&g}, {part}).prepared(model.needs()).to(dev);
    const Tensor p = model.forward(b).value();
    if (!all.defined()) all = Tensor::empty(Shape{n}, p.dtype(), p.device());
    all.slice(at, end).copy_from(p);  // (which refuses a prediction of another size or dtype)
  }
}

}  // namespace

std::vector<double> predict_configs(RankModel& model, const ModelGraph& g, const std::vector<int64_t>& configs,
                                    int64_t chunk, int64_t tta) {
  GNN_CHECK(chunk >= 1, "--eval-chunk must be at least 1");
  GNN_CHECK(tta >= 1, "--tta must be at least 1");
  ag::NoGrad no_grad;
  const auto params = model.parameters();
  const Device dev = params.empty() ? Device::cpu() : params.front().var.device();
  // Every chunk's prediction lands in one buffer on the model's device, read back once per pass: on a
  // GPU the host builds chunk k + 1 while the device runs chunk k.
  const int64_t n = int64_t(configs.size());
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (int64_t t = 0; t < tta && n > 0; ++t) {
    const std::vector<int64_t> order = tta_order(n, t);
    std::vector<int64_t> permuted(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) permuted[size_t(i)] = configs[size_t(order[size_t(i)])];
    Tensor all;
    predict_pass(model, g, permuted, chunk, dev, all);
    const std::vector<double> p = all.on(Device::cpu()).astype(DType::F64).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) out[size_t(order[size_t(i)])] += p[size_t(i)] / double(tta);  // un-permuted
  }
  // A diverged model may predict NaN or Inf: those configs rank last (and the score shows it).
  int64_t bad = 0;
  for (double& v : out)
    if (!std::isfinite(v)) v = kNotFinitePrediction, ++bad;
  if (bad)
    std::fprintf(stderr, "gnn: warning: %s: %lld predictions are not finite; ranked last\n", g.file.id().c_str(),
                 (long long)bad);
  return out;
}

namespace {

// A score as one line of text, every number in hexadecimal floating point so it reads back exactly:
// collection, id, layout, tau, opa, mre, non-finite predictions, then K and slowdown@K pairs, tab-separated.
std::string pack_score(const std::pair<std::string, GraphScore>& cs) {
  const GraphScore& g = cs.second;
  std::string line = cs.first + "\t" + g.id + "\t" + (g.layout ? "1" : "0");
  char buf[64];
  for (double v : {g.kendall_tau, g.opa, g.mre}) std::snprintf(buf, sizeof buf, "\t%a", v), line += buf;
  std::snprintf(buf, sizeof buf, "\t%lld", (long long)g.nonfinite), line += buf;
  for (const auto& [k, v] : g.slowdown) std::snprintf(buf, sizeof buf, "\t%lld\t%a", (long long)k, v), line += buf;
  return line + "\n";
}

std::pair<std::string, GraphScore> unpack_score(const std::string& line) {
  std::vector<std::string> f;
  for (size_t at = 0;;) {
    const size_t tab = line.find('\t', at);
    f.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
    if (tab == std::string::npos) break;
    at = tab + 1;
  }
  GNN_CHECK(f.size() >= 7 && f.size() % 2 == 1, "evaluate: a malformed score from another rank: ", line);
  GraphScore g;
  g.id = f[1], g.layout = f[2] == "1";
  g.kendall_tau = std::strtod(f[3].c_str(), nullptr), g.opa = std::strtod(f[4].c_str(), nullptr);
  g.mre = std::strtod(f[5].c_str(), nullptr);  // (%a writes NaN as nan, which strtod reads)
  g.nonfinite = std::stoll(f[6]);
  for (size_t k = 7; k + 1 < f.size(); k += 2) g.slowdown[std::stoll(f[k])] = std::strtod(f[k + 1].c_str(), nullptr);
  return {f[0], g};
}

}  // namespace

std::vector<std::pair<std::string, GraphScore>> gather_scores(
    const std::vector<std::pair<std::string, GraphScore>>& mine, const std::string& what) {
  if (!dist::distributed()) return mine;
  std::string text;
  for (const auto& cs : mine) text += pack_score(cs);
  std::vector<std::pair<std::string, GraphScore>> all;
  for (const std::string& part : dist::allgather(text, what))
    for (size_t at = 0; at < part.size();) {
      const size_t nl = part.find('\n', at);
      all.push_back(unpack_score(part.substr(at, nl - at)));
      at = nl + 1;
    }
  return all;
}

Combine parse_combine(const std::string& name) {
  if (name == "mean-z") return Combine::kMeanZ;
  if (name == "mean-rank") return Combine::kMeanRank;
  if (name == "mean") return Combine::kMean;
  GNN_FAIL("--ensemble: expected mean-z, mean-rank or mean, got '", name, "'");
}

std::vector<double> combine_scores(const std::vector<std::vector<double>>& members, Combine how,
                                   const std::vector<int64_t>& configs) {
  GNN_CHECK(!members.empty(), "combine_scores: no members");
  if (members.size() == 1) return members[0];
  const size_t n = members[0].size();
  std::vector<double> out(n, 0.0);
  for (const std::vector<double>& p : members) {
    GNN_CHECK(p.size() == n, "combine_scores: a member scored ", p.size(), " configs, another ", n);
    std::vector<double> v(n);
    if (how == Combine::kMean) {
      v = p;
    } else if (how == Combine::kMeanRank) {
      std::vector<int64_t> index(configs);
      if (index.empty()) index.resize(n), std::iota(index.begin(), index.end(), 0);
      GNN_CHECK(index.size() == n, "combine_scores: ", index.size(), " config indices for ", n, " scores");
      const std::vector<int64_t> order = ranking_order(p, index);
      for (size_t r = 0; r < n; ++r) v[size_t(order[r])] = double(r);
      // Configs the member could not score share the places after its others (their mean): an order of them
      // by index is no prediction, and a member that scored none is neutral, as under mean-z.
      const size_t finite =
          size_t(std::count_if(p.begin(), p.end(), [](double x) { return x != kNotFinitePrediction; }));
      for (size_t i = 0; i < n; ++i)
        if (p[i] == kNotFinitePrediction) v[i] = double(finite) + double(n - finite - 1) / 2;
    } else {
      double sum = 0, sq = 0, top = -HUGE_VAL;
      size_t k = 0;
      for (double x : p)
        if (x != kNotFinitePrediction) sum += x, ++k;
      const double mean = k ? sum / double(k) : 0;
      for (double x : p)
        if (x != kNotFinitePrediction) sq += (x - mean) * (x - mean);
      const double sd = k ? std::sqrt(sq / double(k)) : 0;
      for (size_t i = 0; i < n; ++i)
        if (p[i] != kNotFinitePrediction) v[i] = sd > 0 ? (p[i] - mean) / sd : 0, top = std::max(top, v[i]);
      for (size_t i = 0; i < n; ++i)
        if (p[i] == kNotFinitePrediction) v[i] = (k ? top : 0) + 1;
    }
    for (size_t i = 0; i < n; ++i)  // only a raw score can be the mark: the config then ranks last
      out[i] = v[i] == kNotFinitePrediction || out[i] == kNotFinitePrediction ? kNotFinitePrediction
                                                                              : out[i] + v[i] / double(members.size());
  }
  return out;
}

Evaluation evaluate(RankModel& model, GraphSource& src, int64_t chunk, const std::string& eval_indices_dir, int64_t tta,
                    bool log_runtime, double log_offset, int64_t max_configs) {
  return evaluate(
      [&](size_t, const ModelGraph& g, const std::vector<int64_t>& configs, int64_t& nonfinite) {
        std::vector<double> p = predict_configs(model, g, configs, chunk, tta);
        nonfinite = std::count(p.begin(), p.end(), kNotFinitePrediction);
        return p;
      },
      src, eval_indices_dir, log_runtime, log_offset, max_configs);
}

namespace {

// max_configs of a graph's n configs, ascending: a draw seeded by the graph's id alone, so every
// validation of every run scores the same subset.
std::vector<int64_t> config_subset(const std::string& id, int64_t n, int64_t max_configs) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the id
  for (unsigned char c : id) h = (h ^ c) * 0x100000001b3ull;
  Rng rng(h);
  std::vector<int64_t> pick = sample_without_replacement(n, max_configs, rng);
  std::sort(pick.begin(), pick.end());
  return pick;
}

}  // namespace

Evaluation evaluate(const ConfigScorer& scorer, GraphSource& src, const std::string& eval_indices_dir, bool log_runtime,
                    double log_offset, int64_t max_configs) {
  Evaluation ev;
  EvalIndices subsets(eval_indices_dir);
  subsets.check(src.files());
  // In a data-parallel job each rank scores its share of the graphs; the scores are gathered in file order.
  const dist::World& w = dist::world();
  const dist::Range mine = dist::shard(int64_t(src.files().size()), w.rank, w.size);
  for (size_t i = size_t(mine.begin); i < size_t(mine.end); ++i) {
    throw_if_interrupted();  // (within a caller's CooperativeInterrupt scope, the demo's; else the signal ended it)
    const DatasetFile& f = src.files()[i];
    const auto g = src.get(i);
    GNN_CHECK(!g->target.empty(), f.path, ": no runtimes, so it cannot be scored (a test file?)");
    std::vector<int64_t> configs = subsets.configs(f, g->num_configs());
    if (configs.empty() && max_configs > 0 && g->num_configs() > max_configs)
      configs = config_subset(f.id(), g->num_configs(), max_configs);
    if (configs.empty()) {
      configs.resize(size_t(g->num_configs()));
      std::iota(configs.begin(), configs.end(), 0);
    }
    int64_t nonfinite = 0;
    const std::vector<double> p = scorer(i, *g, configs, nonfinite);
    std::vector<double> y;
    for (int64_t c : configs) y.push_back(g->target[size_t(c)]);
    // Scored as the ranking gnn predict writes (ties in p broken by config index), each config at its first
    // place in it (a config listed twice ties with itself), so eval, the valid score that picks the best
    // epoch, and a scored submission agree exactly where scores do not depend on the configs scored beside
    // them.
    const std::vector<int64_t> order = ranking_order(p, configs);
    std::vector<double> first(size_t(g->num_configs()), -1.0), rank(p.size());
    for (size_t r = 0; r < order.size(); ++r)
      if (double& at = first[size_t(configs[size_t(order[r])])]; at < 0) at = double(r);
    for (size_t k = 0; k < configs.size(); ++k) rank[k] = first[size_t(configs[k])];
    ev.scores.emplace_back(f.collection.str(),
                           score_predictions(f.id(), f.collection.is_layout(), rank, y, int64_t(p.size())));
    ev.scores.back().second.nonfinite = nonfinite;
    if (log_runtime) {
      std::vector<double> log_pred(p);
      for (double& v : log_pred) v += log_offset;
      ev.scores.back().second.mre = mean_relative_error(log_pred, y);
    }
  }
  ev.scores = gather_scores(ev.scores, "the scores of the validation graphs");
  GNN_CHECK(!ev.scores.empty(), "evaluate: no graphs");
  ev.score = mean_score(ev.scores);
  for (const auto& cs : ev.scores) ev.nonfinite += cs.second.nonfinite;
  ev.json = summary_json(ev.scores);
  return ev;
}

}  // namespace gnn::train
