// gnn inspect FILE: the arrays of an .npz (or one .npy) and, for TpuGraphs files, the collection
// kind and graph statistics. --json adds min, max and sum of every numeric array.
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <type_traits>

#include "apps/commands.h"
#include "io/json.h"
#include "io/npz.h"
#include "io/tpugraphs.h"

namespace gnn::cli {
namespace {

// min and max as JSON numbers: an integer array's exact (a double holds int64 to 2^53 only: 2^63 - 1 read
// as 2^63, past int64), a float array's as doubles; the sum a double for both
struct Stats {
  Json min, max;
  double sum = 0;
};

template <class T>
void accumulate(const T* p, int64_t n, Stats& s) {
  if (n == 0) return;
  if constexpr (std::is_integral_v<T>) {
    T lo = p[0], hi = p[0];
    for (int64_t i = 0; i < n; ++i) lo = p[i] < lo ? p[i] : lo, hi = p[i] > hi ? p[i] : hi, s.sum += double(p[i]);
    s.min = Json(int64_t(lo)), s.max = Json(int64_t(hi));
  } else {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;  // (NaN skipped by the comparisons)
    for (int64_t i = 0; i < n; ++i) {
      const double v = double(p[i]);
      lo = std::min(lo, v), hi = std::max(hi, v), s.sum += v;
    }
    s.min = Json(lo), s.max = Json(hi);
  }
}

Stats stats_of(const Tensor& t) {
  Stats s;
  switch (t.dtype()) {
    case DType::F32:
      accumulate(t.f32(), t.numel(), s);
      break;
    case DType::F64:
      accumulate(t.f64(), t.numel(), s);
      break;
    case DType::I32:
      accumulate(t.i32(), t.numel(), s);
      break;
    case DType::I64:
      accumulate(t.i64(), t.numel(), s);
      break;
    case DType::U8:
      accumulate(t.u8(), t.numel(), s);
      break;
    case DType::Bool:
      accumulate(t.b8(), t.numel(), s);
      break;
  }
  return s;
}

Json shape_json(const std::vector<int64_t>& shape) {
  Json a = Json::array();
  for (int64_t d : shape) a.push_back(d);
  return a;
}

// TpuGraphs: which collection the keys say, and the statistics a user checks first.
Json tpugraphs_summary(const NpzReader& npz, const std::map<std::string, Tensor>& arrays) {
  for (const char* k : {"node_feat", "node_opcode", "edge_index", "config_runtime"})
    if (!npz.contains(k)) return Json();
  const bool layout = npz.contains("node_config_feat"), tile = npz.contains("config_feat");
  if (layout == tile) return Json();
  Json j = Json::object();
  j.set("collection", layout ? "layout" : "tile");
  const auto dims = [&](const char* k) { return npz.info(k).header.shape; };
  j.set("nodes", dims("node_feat").empty() ? int64_t(0) : dims("node_feat")[0]);
  j.set("edges", dims("edge_index").empty() ? int64_t(0) : dims("edge_index")[0]);
  j.set("configs", npz.info("config_runtime").header.numel());
  if (layout)
    j.set("configurable_nodes",
          npz.contains("node_config_ids") ? npz.info("node_config_ids").header.numel() : int64_t(0));
  const Stats rt = stats_of(arrays.at("config_runtime"));
  if (npz.info("config_runtime").header.numel() > 0) {
    j.set("runtime_min", rt.min);
    j.set("runtime_max", rt.max);
  }
  return j;
}

// A row of the arrays' table; keys get the width of the longest (`key_width`), so the columns stay in line.
std::string format_row(size_t key_width, const std::string& key, const std::string& dtype, const std::string& shape,
                       const std::string& order, const std::string& method, const std::string& compressed,
                       const std::string& raw) {
  const auto left = [](const std::string& s, size_t w) {
    return s + std::string(w > s.size() ? w - s.size() : 0, ' ');
  };
  const auto right = [](const std::string& s, size_t w) {
    return std::string(w > s.size() ? w - s.size() : 0, ' ') + s;
  };
  return left(key, key_width) + " " + left(dtype, 6) + " " + left(shape, 20) + " " + left(order, 5) + " " +
         left(method, 11) + " " + right(compressed, 14) + " " + right(raw, 14) + "\n";
}

int inspect_npy(const std::string& path, bool json) {
  auto src = open_file(path);
  RangeStream in(src, 0, src->size());
  NpyHeader h;
  const Tensor t = read_npy(in, &h);
  const Stats s = stats_of(t);
  if (json) {
    Json a = Json::object();
    a.set("key", path), a.set("dtype", h.descr), a.set("shape", shape_json(h.shape));
    a.set("order", h.fortran_order ? "F" : "C"), a.set("compression", "none");
    a.set("compressed_bytes", src->size()), a.set("raw_bytes", src->size());
    if (t.numel()) a.set("min", s.min), a.set("max", s.max);
    a.set("sum", s.sum);
    Json arrays = Json::array();
    arrays.push_back(a);
    Json j = Json::object();
    j.set("file", path), j.set("format", "npy"), j.set("arrays", arrays);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s: npy %s %s %s-order, %llu bytes\n", path.c_str(), h.descr.c_str(), h.shape_str().c_str(),
                h.fortran_order ? "F" : "C", static_cast<unsigned long long>(src->size()));
  }
  return 0;
}

// A dataset tree: every file walked and fully validated, then counts per collection and split.
int inspect_dataset(const std::string& dir, bool json, bool skip_bad, const ZipLimits& limits) {
  std::set<std::string> failed;  // the files the walk left out (a bad header), then those that failed to load
  WalkOptions w;
  w.skip_bad = skip_bad, w.skipped = &failed;
  struct Totals {
    int64_t graphs = 0, nodes = 0, edges = 0, configs = 0, configurable = 0, max_nodes = 0;
  };
  std::map<std::string, Totals> totals;
  for (const DatasetFile& f : walk_dataset(dir, w)) {
    TpuGraph g;
    try {
      g = load_tpugraph(NpzReader(f.path, limits), {.require_runtimes = f.split != "test"});
    } catch (const Error& e) {
      if (!skip_bad) throw;
      if (failed.insert(f.path).second)  // (a flat folder serves each file as every split: said once)
        std::fprintf(stderr, "gnn: warning: skipping a bad file: %s\n", e.message().c_str());
      continue;
    }
    Totals& t = totals[f.collection.str() + " " + f.split];
    t.graphs += 1, t.nodes += g.num_nodes(), t.edges += g.num_edges(), t.configs += g.num_configs();
    t.configurable += g.num_configurable(), t.max_nodes = std::max(t.max_nodes, g.num_nodes());
  }
  // (every file bad: a table of nothing would read as a dataset checked and found empty)
  GNN_CHECK(!totals.empty() || !skip_bad, dir,
            ": no TpuGraphs file of it could be read (--skip-bad left out every one; the warnings above say why)");
  const int64_t skipped = int64_t(failed.size());
  Json groups = Json::array();
  if (!json)
    std::printf("%-28s %7s %12s %12s %12s %12s %10s\n", "collection split", "graphs", "nodes", "edges", "configs",
                "configurable", "max nodes");
  for (const auto& [name, t] : totals) {
    if (!json) {
      std::printf("%-28s %7lld %12lld %12lld %12lld %12lld %10lld\n", name.c_str(), (long long)t.graphs,
                  (long long)t.nodes, (long long)t.edges, (long long)t.configs, (long long)t.configurable,
                  (long long)t.max_nodes);
      continue;
    }
    Json j = Json::object();
    j.set("collection", name.substr(0, name.find(' '))), j.set("split", name.substr(name.find(' ') + 1));
    j.set("graphs", t.graphs), j.set("nodes", t.nodes), j.set("edges", t.edges), j.set("configs", t.configs);
    j.set("configurable_nodes", t.configurable), j.set("max_nodes", t.max_nodes);
    groups.push_back(j);
  }
  if (json) {
    Json j = Json::object();
    j.set("dataset", dir), j.set("groups", groups), j.set("skipped_files", skipped);
    std::printf("%s\n", j.dump().c_str());
  } else if (skipped) {
    std::printf("%lld bad files skipped\n", (long long)skipped);
  }
  return 0;
}

}  // namespace

Command inspect_command() {
  Command c;
  c.name = "inspect";
  c.summary = "the arrays of an .npz or .npy file, and TpuGraphs statistics";
  c.positionals = {{"PATH", "an .npz archive, an .npy array, or a TpuGraphs dataset directory"}};
  c.flags = {
      {"json", "", "one JSON object with an `arrays` list (with min, max, sum of each array)"},
      {"max-member-bytes", "N",
       "refuse .npz members larger than this uncompressed (zip bombs), in a directory's files too", "34359738368"},
      {"skip-bad", "", "for a directory: warn about bad files and leave them out instead of stopping"},
      kThreadsFlag};
  c.details =
      "For each array: key, dtype as written, shape, order (C or F), compression (stored or deflated),\n"
      "compressed and raw sizes. TpuGraphs files (tile or layout, by their keys) also get the\n"
      "collection kind, nodes, edges, configs, configurable nodes and the runtime range.\n"
      "For a directory (the official tree, its npz/ folder, a collection or a split folder): every file\n"
      "is loaded and validated, and the counts per collection and split are printed.";
  c.run = [](const Args& a) {
    const std::string path = a.positional(0);
    const bool json = a.on("json");
    ZipLimits limits;  // (a bad flag is a usage error before any I/O)
    limits.max_member_bytes = uint64_t(a.integer("max-member-bytes", 0, INT64_MAX));
    const bool dir = std::filesystem::is_directory(path), npy = !dir && path.size() > 4 &&
                                                                 path.compare(path.size() - 4, 4, ".npy") == 0;
    if (!dir && a.on("skip-bad")) throw UsageError("--skip-bad: for a directory; " + path + " is not one");
    if (npy && a.on("max-member-bytes"))
      throw UsageError("--max-member-bytes: for an .npz archive's members; " + path + " is one .npy array");
    if (dir) return inspect_dataset(path, json, a.on("skip-bad"), limits);
    if (npy) return inspect_npy(path, json);
    const NpzReader npz(path, limits);
    // Everything is read and checked before anything is printed: every member's data (so its CRC-32),
    // and for a TpuGraphs file every schema rule `inspect DIR` applies. A bad file prints one error line.
    // A TpuGraphs file's members are read once, for the statistics and the schema's checks; another
    // archive's one at a time.
    const bool tpugraphs = npz.contains("config_feat") || npz.contains("node_config_feat");
    std::map<std::string, Tensor> loaded;
    if (tpugraphs) loaded = npz.load_keys(npz.keys());
    Json arrays = Json::array();
    size_t key_width = 24;
    for (const std::string& key : npz.keys()) key_width = std::max(key_width, key.size());
    std::string table =
        json ? "" : format_row(key_width, "key", "dtype", "shape", "order", "compression", "compressed", "raw");
    for (const std::string& key : npz.keys()) {
      const NpzArrayInfo info = npz.info(key);
      const NpyHeader& h = info.header;
      const Stats s = stats_of(tpugraphs ? loaded.at(key) : npz.load(key));
      if (!json) {
        table += format_row(key_width, key, h.descr, h.shape_str(), h.fortran_order ? "F" : "C",
                            zip_method_name(info.entry.method), std::to_string(info.entry.compressed_size),
                            std::to_string(info.entry.uncompressed_size));
        continue;
      }
      Json e = Json::object();
      e.set("key", key), e.set("dtype", h.descr), e.set("shape", shape_json(h.shape));
      e.set("order", h.fortran_order ? "F" : "C"), e.set("compression", zip_method_name(info.entry.method));
      e.set("compressed_bytes", info.entry.compressed_size), e.set("raw_bytes", info.entry.uncompressed_size);
      if (h.numel()) e.set("min", s.min), e.set("max", s.max);
      e.set("sum", s.sum);
      arrays.push_back(std::move(e));
    }
    if (tpugraphs)  // (a test file's runtimes may be placeholders)
      (void)load_tpugraph(npz, {.require_runtimes = false, .loaded = &loaded});
    const Json tpu = tpugraphs ? tpugraphs_summary(npz, loaded) : Json();
    std::fputs(table.c_str(), stdout);
    if (json) {
      Json j = Json::object();
      j.set("file", path), j.set("format", "npz"), j.set("arrays", arrays);
      if (!tpu.is_null()) j.set("tpugraphs", tpu);
      std::printf("%s\n", j.dump().c_str());
    } else if (!tpu.is_null()) {
      std::printf("\nTpuGraphs %s file:", tpu["collection"].as_string().c_str());
      for (const auto& [k, v] : tpu.items())
        if (k != "collection") std::printf(" %s=%s", k.c_str(), v.dump().c_str());
      std::printf("\n");
    }
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
