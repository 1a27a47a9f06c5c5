#include "apps/scoring.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "base/parse.h"
#include "io/byte_source.h"
#include "io/json.h"
#include "io/npz.h"
#include "nn/metrics.h"

namespace gnn {

namespace {

// The rows of a CSV whose first line must be `header`: row(line number, text) for each non-empty line
// after it, a Windows line end removed. `what` names the file's content in the error that it cannot open.
template <class Row>
void read_csv_lines(const std::string& path, const char* what, const std::string& header, Row row) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const Error& e) {
    GNN_FAIL(e.message(), " (", what, ")");
  }
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  GNN_CHECK(line.rfind("\xEF\xBB\xBF", 0) != 0, path,
            ": starts with a UTF-8 byte order mark; save it without one (line 1 must be the header '", header, "')");
  GNN_CHECK(line == header, path, ": line 1 must be the header '", header, "', got '", line.substr(0, 60), "'");
  for (int64_t ln = 2; std::getline(in, line); ++ln) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) row(ln, line);
  }
}

}  // namespace

std::map<std::string, std::vector<int64_t>> read_submission(const std::string& path,
                                                            std::map<std::string, int64_t>* lines) {
  std::map<std::string, std::vector<int64_t>> rows;
  read_csv_lines(path, "the submission", "ID,TopConfigs", [&](int64_t ln, const std::string& line) {
    const size_t comma = line.find(',');
    GNN_CHECK(comma != std::string::npos && comma > 0, path, ": line ", ln, " is not 'ID,i1;i2;...'");
    const std::string id = line.substr(0, comma);
    std::vector<int64_t> list;
    // Indices as the sample submission writes them: digits only, separated by one ';' each.
    const std::string text = line.substr(comma + 1);
    for (size_t at = 0; at <= text.size() && !text.empty();) {
      const size_t end = std::min(text.find(';', at), text.size());
      const std::string item = text.substr(at, end - at);
      int64_t v = -1;
      GNN_CHECK(parse_int64(item, &v) && v >= 0, path, ": line ", ln, " (", shown_field(id), "): '",
                shown_field(item, 40), "' is not a config index");
      list.push_back(v);
      at = end + 1;
    }
    GNN_CHECK(!list.empty(), path, ": line ", ln, " (", shown_field(id), ") lists no configs");
    GNN_CHECK(rows.emplace(id, std::move(list)).second, path, ": line ", ln, ": ID ", shown_field(id),
              " appears twice");
    if (lines) (*lines)[id] = ln;
  });
  return rows;
}

namespace {
std::string eval_key(const DatasetFile& f) { return f.collection.source + "_" + f.collection.search; }
}  // namespace

const std::map<std::string, std::vector<int64_t>>* EvalIndices::file_of(const DatasetFile& f) {
  if (dir_.empty() || !f.collection.is_layout() || f.collection.search.empty()) return nullptr;
  const std::string key = eval_key(f);
  auto file = files_.find(key);
  if (file == files_.end()) {
    const std::string p = path(f);
    GNN_CHECK(std::filesystem::exists(p), "--eval-indices ", dir_, ": no ", key, ".json for the ", f.collection.str(),
              " graphs (the official folder holds xla_default.json, xla_random.json, nlp_default.json and "
              "nlp_random.json); give a folder that has it");
    file = files_.emplace(key, load_eval_indices(p)).first;
  }
  return &file->second;
}

std::string EvalIndices::path(const DatasetFile& f) const {
  return (std::filesystem::path(dir_) / (eval_key(f) + ".json")).string();
}

void EvalIndices::check(const std::vector<DatasetFile>& files) {
  bool layout = false;
  for (const DatasetFile& f : files) layout = listed(f) != nullptr || layout;
  GNN_CHECK(dir_.empty() || files.empty() || layout, "--eval-indices ", dir_, ": the official subsets are of layout ",
            "graphs of a search (xla_default, ...), and none of the ", files.size(), " graphs scored is one");
}

// A layout graph of a search that its file does not list is refused, not scored on every config beside the
// listed graphs' subsets (a renamed file would change what is measured, unsaid)
const std::vector<int64_t>* EvalIndices::listed(const DatasetFile& f) {
  const auto* file = file_of(f);
  if (!file) return nullptr;
  const auto it = file->find(f.stem);
  GNN_CHECK(it != file->end(), path(f), ": lists no subset for the graph ", f.stem, " (", f.path, "; it lists ",
            file->size(), " graphs); give --eval-indices a folder that lists every graph scored, or leave it out to ",
            "score every config");
  return &it->second;
}

std::vector<int64_t> EvalIndices::configs(const DatasetFile& f, int64_t n) {
  const std::vector<int64_t>* it = listed(f);
  if (!it) return {};
  for (int64_t c : *it)
    GNN_CHECK(c < n, path(f), ": eval index ", c, " for ", f.stem, " is outside its ", n, " configs");
  return *it;
}

std::map<std::string, std::map<int64_t, double>> read_runtimes(const std::string& path) {
  std::map<std::string, std::map<int64_t, double>> rows;
  read_csv_lines(path, "the predicted runtimes", "ID,Config,Runtime", [&](int64_t ln, const std::string& line) {
    const size_t c1 = line.find(','), c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    GNN_CHECK(c2 != std::string::npos && c1 > 0, path, ": line ", ln, " is not 'ID,config,runtime'");
    const std::string id = line.substr(0, c1), config = line.substr(c1 + 1, c2 - c1 - 1), rt = line.substr(c2 + 1);
    int64_t k = -1;
    double v = NAN;
    GNN_CHECK(parse_int64(config, &k) && k >= 0, path, ": line ", ln, " (", shown_field(id), "): '",
              shown_field(config, 40), "' is not a config index");
    GNN_CHECK(parse_finite(rt, &v) && v > 0, path, ": line ", ln, " (", shown_field(id), ", config ", k, "): '",
              shown_field(rt, 40), "' is not a runtime (a finite number > 0)");
    GNN_CHECK(rows[id].emplace(k, v).second, path, ": line ", ln, ": ", shown_field(id), " config ", k,
              " appears twice");
  });
  return rows;
}

std::vector<int64_t> ranking_order(const std::vector<double>& p, const std::vector<int64_t>& configs) {
  GNN_CHECK(p.size() == configs.size(), "ranking_order: ", p.size(), " scores for ", configs.size(), " configs");
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  // No NaN reaches here (predict_configs makes a non-finite score the largest double, read_runtimes
  // refuses one), so this is a strict weak order.
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return p[size_t(a)] < p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && configs[size_t(a)] < configs[size_t(b)]);
  });
  return order;
}

GraphScore score_runtimes(const std::string& id, bool layout, const std::map<int64_t, double>& predicted,
                          const std::vector<double>& y, const std::vector<int64_t>& eval_subset,
                          const std::string& file) {
  const int64_t n = int64_t(y.size());
  for (int64_t i = 0; i < n; ++i)
    GNN_CHECK(predicted.count(i), file, ": ", id, " has no predicted runtime for config ", i, " (of ", n, ")");
  GNN_CHECK(predicted.empty() || predicted.rbegin()->first < n, file, ": ", id, " has a prediction for config ",
            predicted.rbegin()->first, ", but only ", n, " configs");
  std::vector<double> p(static_cast<size_t>(n));
  std::vector<int64_t> configs(static_cast<size_t>(n));
  for (const auto& [k, v] : predicted) p[size_t(k)] = v;
  std::iota(configs.begin(), configs.end(), 0);
  // Ranked as a submission of them would list (5 configs of a tile kernel), so the metrics are those of
  // the CSV that gnn predict writes beside the runtimes.
  std::vector<int64_t> ranking = ranking_order(p, configs);
  if (!layout && ranking.size() > 5) ranking.resize(5);
  GraphScore s = score_ranking(id, layout, ranking, y, eval_subset);
  // The MRE over the configs eval scores: the subset as listed (as evaluate() takes it), else all.
  std::vector<double> log_p, yy;
  for (int64_t c : eval_subset.empty() ? configs : eval_subset) {
    GNN_CHECK(c >= 0 && c < n, id, ": eval_indices config ", c, " is out of range (", n, " configs)");
    log_p.push_back(std::log(p[size_t(c)])), yy.push_back(y[size_t(c)]);
  }
  s.mre = mean_relative_error(log_p, yy);
  return s;
}

std::vector<double> scored_runtimes(const DatasetFile& f) {
  NpzReader r(f.path);
  GNN_CHECK(r.contains("config_runtime"), f.path, ": no config_runtime (a test file cannot be scored)");
  std::vector<double> rt = r.load("config_runtime").astype(DType::F64).to_vector<double>();
  if (!f.collection.is_layout()) {
    GNN_CHECK(r.contains("config_runtime_normalizers"), f.path, ": no config_runtime_normalizers");
    const auto norm = r.load("config_runtime_normalizers").astype(DType::F64).to_vector<double>();
    GNN_CHECK(norm.size() == rt.size(), f.path, ": config_runtime_normalizers has ", norm.size(), " values for ",
              rt.size(), " runtimes");
    for (size_t i = 0; i < rt.size(); ++i) {
      GNN_CHECK(norm[i] > 0 && std::isfinite(norm[i]), f.path, ": config_runtime_normalizers[", i, "] is ", norm[i]);
      rt[i] /= norm[i];
    }
  }
  for (size_t i = 0; i < rt.size(); ++i)
    GNN_CHECK(rt[i] > 0 && std::isfinite(rt[i]), f.path, ": config_runtime[", i, "] is ", rt[i], " (must be > 0)");
  return rt;
}

GraphScore score_ranking(const std::string& id, bool layout, const std::vector<int64_t>& ranking,
                         const std::vector<double>& runtime, const std::vector<int64_t>& eval_subset,
                         const std::string& where) {
  const int64_t n = int64_t(runtime.size());
  const std::string& src = where.empty() ? id : where;
  // (the competition's tile rows are the predicted top 5: a longer row would count more at @10 than any
  // submission can)
  GNN_CHECK(layout || ranking.size() <= 5, src, ": a tile row lists at most 5 configs (the predicted top 5), got ",
            ranking.size());
  std::vector<double> rank(size_t(n), std::numeric_limits<double>::infinity());
  for (size_t r = 0; r < ranking.size(); ++r) {
    const int64_t c = ranking[r];
    GNN_CHECK(c >= 0 && c < n, src, ": config index ", c, " is outside the graph's ", n, " configs");
    GNN_CHECK(std::isinf(rank[size_t(c)]), src, ": config ", c, " is listed twice");
    rank[size_t(c)] = double(r);
  }
  GNN_CHECK(!layout || int64_t(ranking.size()) == n, src, ": a layout row must list all ", n, " configs, got ",
            ranking.size());
  // Unlisted configs (tile rows list 5) rank after every listed one, in index order.
  std::vector<double> pred = rank;
  for (int64_t c = 0, next = int64_t(ranking.size()); c < n; ++c)
    if (std::isinf(pred[size_t(c)])) pred[size_t(c)] = double(next++);
  std::vector<double> p = pred, y = runtime;
  if (layout && !eval_subset.empty()) {
    p.clear(), y.clear();
    for (int64_t c : eval_subset) {
      GNN_CHECK(c >= 0 && c < n, id, ": eval index ", c, " is outside the graph's ", n, " configs");
      p.push_back(pred[size_t(c)]), y.push_back(runtime[size_t(c)]);
    }
  }
  // A tile row lists 5 configs: K beyond that counts only the listed ones.
  return score_predictions(id, layout, p, y, layout ? int64_t(p.size()) : int64_t(ranking.size()));
}

GraphScore score_predictions(const std::string& id, bool layout, const std::vector<double>& p,
                             const std::vector<double>& y, int64_t listed) {
  GNN_CHECK(p.size() == y.size() && !p.empty(), id, ": ", p.size(), " predictions for ", y.size(), " runtimes");
  GraphScore s;
  s.id = id, s.layout = layout;
  const int64_t m = int64_t(p.size());
  if (layout) {
    s.kendall_tau = nn::kendall_tau_b(p.data(), y.data(), m);
    s.opa = nn::opa(p.data(), y.data(), m);
  }
  for (int64_t k : layout ? std::vector<int64_t>{1, 10, 100} : std::vector<int64_t>{1, 5, 10})
    s.slowdown[k] = nn::slowdown_at_k(p.data(), y.data(), m, std::min(k, listed));
  return s;
}

double mean_relative_error(const std::vector<double>& log_p, const std::vector<double>& y) {
  GNN_CHECK(log_p.size() == y.size() && !y.empty(), "mean_relative_error: ", log_p.size(), " predictions for ",
            y.size(), " runtimes");
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    GNN_CHECK(y[i] > 0, "mean_relative_error: runtime ", i, " is ", y[i], " (must be positive)");
    sum += std::fabs(std::exp(log_p[i] - std::log(y[i])) - 1);
  }
  return sum / double(y.size());
}

namespace {

// A metric as the score lines print it: six decimals, or null where it is not defined (the tau of a graph
// whose runtimes all tie), so that every line stays JSON.
std::string metric_text(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o.precision(6);
  o << std::fixed << v;
  return o.str();
}

}  // namespace

std::string graph_score_json(const GraphScore& s) {
  std::string out = "{\"id\": " + Json(s.id).dump();
  if (s.layout) out += ", \"kendall_tau\": " + metric_text(s.kendall_tau) + ", \"opa\": " + metric_text(s.opa);
  for (const auto& [k, v] : s.slowdown) out += ", \"slowdown@" + std::to_string(k) + "\": " + metric_text(1 - v);
  return out + "}";
}

double mean_score(const std::vector<std::pair<std::string, GraphScore>>& scores) {
  std::map<std::string, std::pair<double, int64_t>> by;  // collection -> (sum, count) of the defined scores
  for (const auto& [c, s] : scores) {
    const double v = s.layout ? s.kendall_tau : 1 - s.slowdown.at(5);
    if (std::isfinite(v)) by[c].first += v, by[c].second += 1;
  }
  double sum = 0;
  for (const auto& [c, v] : by) sum += v.first / double(v.second);
  return by.empty() ? std::nan("") : sum / double(by.size());
}

std::string summary_json(const std::vector<std::pair<std::string, GraphScore>>& scores) {
  std::map<std::string, std::vector<const GraphScore*>> by;
  for (const auto& [c, s] : scores) by[c].push_back(&s);
  std::ostringstream out, top;
  out << "\"collections\": {";
  double score_sum = 0;
  bool first = true;
  int64_t scored_collections = 0, nonfinite_all = 0;
  for (const auto& [c, list] : by) {
    // Each metric the mean of the graphs where it is defined: a graph whose runtimes all tie (or that has one
    // config) has no tau or OPA, and is left out of theirs (counted as "unscored"), not made null for all.
    std::map<std::string, std::pair<double, int64_t>> sums;  // metric -> (sum, count)
    const auto add = [&](const std::string& k, double v) {
      if (std::isfinite(v)) sums[k].first += v, sums[k].second += 1;
    };
    int64_t unscored = 0, nonfinite = 0;
    for (const GraphScore* s : list) {
      nonfinite += s->nonfinite;
      if (s->layout) add("kendall_tau", s->kendall_tau), add("opa", s->opa);
      for (const auto& [k, v] : s->slowdown) add("slowdown@" + std::to_string(k), 1 - v);
      unscored += !std::isfinite(s->layout ? s->kendall_tau : 1 - s->slowdown.at(5));
    }
    std::map<std::string, double> mean;
    for (const auto& [k, v] : sums) mean[k] = v.first / double(v.second);
    const auto defined = [&](const char* k) { return mean.count(k) ? mean[k] : std::nan(""); };
    const bool layout = list.front()->layout;
    mean["score"] = defined(layout ? "kendall_tau" : "slowdown@5");
    for (const char* k : {"kendall_tau", "opa", "slowdown@1", "slowdown@5", "slowdown@10", "slowdown@100"})
      mean[k] = defined(k);
    bool mre = true;
    for (const GraphScore* s : list) mre = mre && std::isfinite(s->mre), mean["mre"] += s->mre / double(list.size());
    if (std::isfinite(mean["score"])) score_sum += mean["score"], ++scored_collections;
    std::ostringstream o;
    o << "\"graphs\": " << list.size();
    if (unscored > 0) o << ", \"unscored\": " << unscored;
    if (nonfinite > 0) o << ", \"nonfinite_predictions\": " << nonfinite;
    nonfinite_all += nonfinite;
    for (const char* k :
         layout ? std::vector<const char*>{"kendall_tau", "opa", "slowdown@1", "slowdown@10", "slowdown@100", "score"}
                : std::vector<const char*>{"slowdown@1", "slowdown@5", "slowdown@10", "score"})
      o << ", \"" << k << "\": " << metric_text(mean[k]);
    if (mre) o << ", \"mre\": " << metric_text(mean["mre"]);
    out << (first ? "" : ", ") << "\"" << c << "\": {" << o.str() << "}";
    if (by.size() == 1) top << o.str() << ", ";
    first = false;
  }
  out << "}";
  if (by.size() > 1) {
    top << "\"score\": " << metric_text(scored_collections ? score_sum / double(scored_collections) : std::nan(""))
        << ", ";
    // (a collection none of whose graphs has a score is left out of that mean: said, as its graphs are)
    if (scored_collections < int64_t(by.size()))
      top << "\"unscored_collections\": " << int64_t(by.size()) - scored_collections << ", ";
    if (nonfinite_all > 0) top << "\"nonfinite_predictions\": " << nonfinite_all << ", ";
  }
  std::string json = "{";
  json += top.str();
  json += out.str();
  json += "}";
  return json;
}

}  // namespace gnn
