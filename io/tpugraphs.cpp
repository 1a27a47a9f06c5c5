#include "io/tpugraphs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/parse.h"
#include "io/byte_source.h"
#include "io/json.h"
#include "io/npz.h"
#include "runtime/allocator.h"

namespace gnn {
namespace fs = std::filesystem;

namespace {

struct Schema {
  const char* key;
  const char* kinds;  // npy kinds accepted: "f" float, "iu" integer, "iuf" either
  int ndim;
};
const Schema kCommon[] = {{"node_feat", "f", 2}, {"node_opcode", "iu", 1}, {"edge_index", "iu", 2}};
const Schema kTile[] = {{"config_feat", "f", 2}, {"config_runtime_normalizers", "iuf", 1}};
const Schema kLayout[] = {{"node_config_ids", "iu", 1}, {"node_config_feat", "f", 3}, {"node_splits", "iu", 2}};
const Schema kRuntime = {"config_runtime", "iuf", 1};

std::string where(const std::string& path, const std::string& key) { return path + ": array '" + key + "'"; }

bool is_layout_file(const NpzReader& npz) { return npz.contains("node_config_feat"); }

// Keys, dtypes and shapes from the .npy headers alone; returns the header of each present key.
std::map<std::string, NpyHeader> check_headers(const NpzReader& npz, bool require_runtimes) {
  const std::string& path = npz.path();
  const bool layout = is_layout_file(npz);
  GNN_CHECK(layout || npz.contains("config_feat"), path,
            ": not a TpuGraphs file (neither 'config_feat' (tile) nor 'node_config_feat' (layout))");
  std::vector<Schema> schema(std::begin(kCommon), std::end(kCommon));
  if (layout) schema.insert(schema.end(), std::begin(kLayout), std::end(kLayout));
  else schema.insert(schema.end(), std::begin(kTile), std::end(kTile));
  if (require_runtimes || npz.contains(kRuntime.key)) schema.push_back(kRuntime);
  std::map<std::string, NpyHeader> h;
  for (const Schema& s : schema) {
    GNN_CHECK(npz.contains(s.key), path, ": missing array '", s.key, "' (a ", layout ? "layout" : "tile",
              " file needs it)");
    const NpyHeader hd = npz.info(s.key).header;
    GNN_CHECK(std::strchr(s.kinds, hd.kind) != nullptr && hd.kind != 'b', where(path, s.key), ": dtype '", hd.descr,
              "' is not ",
              std::string(s.kinds) == "f"    ? "a float type"
              : std::string(s.kinds) == "iu" ? "an integer type"
                                             : "numeric");
    GNN_CHECK(int(hd.shape.size()) == s.ndim, where(path, s.key), ": expected ", s.ndim, " dims, got shape ",
              hd.shape_str());
    h[s.key] = hd;
  }
  const int64_t n = h["node_feat"].shape[0];
  auto expect = [&](const char* key, int dim, int64_t want, const char* what) {
    GNN_CHECK(h[key].shape[size_t(dim)] == want, where(path, key), ": shape ", h[key].shape_str(), " does not match ",
              what, " (", want, ")");
  };
  GNN_CHECK(n >= 1, where(path, "node_feat"), ": shape ", h["node_feat"].shape_str(),
            " has no nodes (a graph needs at least one)");
  expect("node_feat", 1, kNodeFeatures, "the 140 node features");
  expect("node_opcode", 0, n, "the node count of node_feat");
  expect("edge_index", 1, 2, "rows [u, v]");
  if (layout) {
    const int64_t c = h["node_config_feat"].shape[0];
    expect("node_config_feat", 1, h["node_config_ids"].shape[0], "the configurable nodes of node_config_ids");
    expect("node_config_feat", 2, kLayoutConfigFeatures, "the 18 layout features");
    expect("node_splits", 0, 1, "shape (1, k)");
    if (h.count(kRuntime.key)) expect(kRuntime.key, 0, c, "the configs of node_config_feat");
  } else {
    const int64_t c = h["config_feat"].shape[0];
    expect("config_feat", 1, kTileConfigFeatures, "the 24 tile config features");
    expect("config_runtime_normalizers", 0, c, "the configs of config_feat");
    if (h.count(kRuntime.key)) expect(kRuntime.key, 0, c, "the configs of config_feat");
  }
  // (A graph with no configs has nothing to rank: predict would write a row naming none, which score and
  // the competition refuse.)
  const char* configs = layout ? "node_config_feat" : "config_feat";
  GNN_CHECK(h[configs].shape[0] > 0, where(path, configs), ": 0 configs; a graph to rank lists at least one");
  return h;
}

void check_finite(const Tensor& t, const std::string& path, const char* key) {
  const float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i)
    GNN_CHECK(std::isfinite(p[i]), where(path, key), ": element ", i, " is ", p[i]);
}

}  // namespace

bool check_tpugraph_header(const std::string& path, bool require_runtimes) {
  const NpzReader npz(path);
  check_headers(npz, require_runtimes);
  return is_layout_file(npz);
}

size_t TpuGraph::bytes() const {
  size_t b = 0;
  for (const Tensor* t : {&node_feat, &node_opcode, &edge_index, &config_feat, &config_runtime_normalizers,
                          &node_config_ids, &node_config_feat, &node_splits, &config_runtime})
    if (t->defined()) b += t->nbytes();
  return b;
}

double TpuGraph::target(int64_t c) const {
  GNN_CHECK(has_runtimes(), path, ": has no runtimes (a test file?)");
  GNN_CHECK(c >= 0 && c < num_configs(), path, ": config ", c, " out of range [0, ", num_configs(), ")");
  const double r = config_runtime.f64()[c];
  return layout ? r : r / config_runtime_normalizers.f64()[c];
}

namespace {
TpuGraph load_checked(const NpzReader& npz, const LoadOptions& options) {
  const std::string& path = npz.path();
  const auto headers = check_headers(npz, options.require_runtimes);
  std::vector<std::string> keys;
  for (const auto& kv : headers) keys.push_back(kv.first);
  std::map<std::string, Tensor> arrays;
  if (options.loaded)
    for (const std::string& k : keys) arrays[k] = options.loaded->at(k);
  else
    arrays = npz.load_keys(keys);

  TpuGraph g;
  g.path = path;
  g.stem = fs::path(path).stem().string();
  g.layout = is_layout_file(npz);
  g.node_feat = arrays["node_feat"].astype(DType::F32);
  g.node_opcode = arrays["node_opcode"].astype(DType::I64);
  g.edge_index = arrays["edge_index"].astype(DType::I64);
  const int64_t n = g.num_nodes();
  check_finite(g.node_feat, path, "node_feat");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t op = g.node_opcode.i64()[i];
    GNN_CHECK(op >= 0 && op < kOpcodes, where(path, "node_opcode"), ": node ", i, " has opcode ", op,
              ", outside the HLO opcode ids [0, ", kOpcodes, ")");
  }
  g.node_opcode = g.node_opcode.astype(DType::I32);
  const int64_t* ei = g.edge_index.i64();
  for (int64_t e = 0; e < g.num_edges(); ++e)
    GNN_CHECK(ei[2 * e] >= 0 && ei[2 * e] < n && ei[2 * e + 1] >= 0 && ei[2 * e + 1] < n, where(path, "edge_index"),
              ": edge ", e, " (", ei[2 * e], ", ", ei[2 * e + 1], ") has a node id outside [0, ", n, ")");

  if (g.layout) {
    g.node_config_ids = arrays["node_config_ids"].astype(DType::I64);
    g.node_config_feat = arrays["node_config_feat"].astype(DType::F32);
    g.node_splits = arrays["node_splits"].astype(DType::I64);
    std::vector<char> seen(size_t(n), 0);
    for (int64_t k = 0; k < g.node_config_ids.numel(); ++k) {
      const int64_t id = g.node_config_ids.i64()[k];
      GNN_CHECK(id >= 0 && id < n, where(path, "node_config_ids"), ": entry ", k, " is node ", id, ", outside [0, ", n,
                ")");
      GNN_CHECK(!seen[size_t(id)], where(path, "node_config_ids"), ": node ", id, " is listed twice");
      seen[size_t(id)] = 1;
    }
    const float* f = g.node_config_feat.f32();
    for (int64_t i = 0; i < g.node_config_feat.numel(); ++i)
      GNN_CHECK(f[i] == std::floor(f[i]) && f[i] >= -1 && f[i] <= 5, where(path, "node_config_feat"), ": element ", i,
                " is ", f[i], ", not a layout dimension in {-1, 0, ..., 5}");
    const int64_t* sp = g.node_splits.i64();
    for (int64_t i = 0; i < g.node_splits.numel(); ++i)
      GNN_CHECK(sp[i] >= 0 && sp[i] <= n && (i == 0 || sp[i] >= sp[i - 1]), where(path, "node_splits"), ": entry ", i,
                " (", sp[i], ") is not a non-decreasing node index in [0, ", n, "]");
  } else {
    g.config_feat = arrays["config_feat"].astype(DType::F32);
    check_finite(g.config_feat, path, "config_feat");
    g.config_runtime_normalizers = arrays["config_runtime_normalizers"].astype(DType::F64);
    for (int64_t c = 0; c < g.config_runtime_normalizers.numel(); ++c) {
      const double v = g.config_runtime_normalizers.f64()[c];
      GNN_CHECK(std::isfinite(v) && v > 0, where(path, "config_runtime_normalizers"), ": config ", c, " has ", v,
                " (must be > 0)");
    }
  }
  if (arrays.count("config_runtime")) {
    const Tensor rt = arrays["config_runtime"].astype(DType::F64);
    bool all_positive = true;
    for (int64_t c = 0; c < rt.numel(); ++c) {
      const double v = rt.f64()[c];
      GNN_CHECK(!std::isnan(v) && !std::isinf(v), where(path, "config_runtime"), ": config ", c, " is ", v);
      all_positive &= v > 0;
      if (options.require_runtimes)
        GNN_CHECK(v > 0, where(path, "config_runtime"), ": config ", c, " has runtime ", v, " (must be > 0)");
    }
    if (all_positive) g.config_runtime = rt;  // test files carry placeholder runtimes: treat them as absent
  }
  return g;
}
}  // namespace

TpuGraph load_tpugraph(const NpzReader& npz, const LoadOptions& options) {
  try {
    return load_checked(npz, options);
  } catch (const MemoryLimitError& e) {  // the limit's message, with the file that did not fit
    throw MemoryLimitError(npz.path() + ": loading it, " + e.message(), e.where(), e.requested, e.in_use, e.limit);
  }
}

TpuGraph load_tpugraph(const std::string& path, const LoadOptions& options) {
  return load_tpugraph(NpzReader(path), options);
}

Tensor gather_config_feat(const TpuGraph& g, const std::vector<int64_t>& configs) {
  const Tensor& src = g.layout ? g.node_config_feat : g.config_feat;
  const int64_t row = src.numel() / std::max<int64_t>(src.size(0), 1);
  std::vector<int64_t> dims = src.shape().vec();
  dims[0] = int64_t(configs.size());
  Tensor out = Tensor::empty(Shape(dims), DType::F32);
  for (size_t i = 0; i < configs.size(); ++i) {
    const int64_t c = configs[i];
    GNN_CHECK(c >= 0 && c < g.num_configs(), g.path, ": config ", c, " out of range [0, ", g.num_configs(), ")");
    std::copy_n(src.f32() + c * row, row, out.f32() + int64_t(i) * row);
  }
  return out;
}

Tensor gather_runtimes(const TpuGraph& g, const std::vector<int64_t>& configs) {
  Tensor out = Tensor::empty({int64_t(configs.size())}, DType::F64);
  for (size_t i = 0; i < configs.size(); ++i) out.f64()[i] = g.target(configs[i]);
  return out;
}

// ---- the dataset tree ----------------------------------------------------------------------------

namespace {

bool is_split(const std::string& s) { return s == "train" || s == "valid" || s == "test"; }

// Collection folders under `dir` with what they are, by the official tree's names.
std::vector<std::pair<CollectionId, fs::path>> find_collections(const fs::path& dir) {
  std::vector<std::pair<CollectionId, fs::path>> out;
  if (fs::is_directory(dir / "tile" / "xla")) out.push_back({{"tile", "xla", ""}, dir / "tile" / "xla"});
  for (const char* source : {"xla", "nlp"}) {
    bool any = false;
    for (const char* search : {"default", "random"})
      if (fs::is_directory(dir / "layout" / source / search)) {
        out.push_back({{"layout", source, search}, dir / "layout" / source / search});
        any = true;
      }
    if (!any && fs::is_directory(dir / "layout" / source))  // a flat folder of one source (search unknown)
      out.push_back({{"layout", source, ""}, dir / "layout" / source});
  }
  return out;
}

// What a --data folder reads: its collection folders, with the one split a split folder names, and the
// root they were looked for in (`dir`, or dir/npz where it has one).
struct DataTree {
  fs::path given, root;
  std::vector<std::pair<CollectionId, fs::path>> collections;
  std::string only_split;
  bool tree = true;  // the collections were found under root (not read from a collection or split folder's path)
};

DataTree data_tree(const std::string& dir_text) {
  GNN_CHECK(fs::is_directory(dir_text), dir_text, ": not a directory");
  DataTree t;
  t.given = t.root = fs::canonical(dir_text);
  if (fs::is_directory(t.root / "npz")) t.root /= "npz";
  t.collections = find_collections(t.root);
  if (t.collections.empty()) {
    t.tree = false;
    // A collection folder or a split folder: read the collection from the path's last components.
    fs::path folder = t.root;
    if (is_split(folder.filename().string())) t.only_split = folder.filename().string(), folder = folder.parent_path();
    const std::string a = folder.parent_path().parent_path().filename().string();
    const std::string b = folder.parent_path().filename().string(), c = folder.filename().string();
    if (b == "tile" && c == "xla") t.collections.push_back({{"tile", "xla", ""}, folder});
    else if (a == "layout" && (b == "xla" || b == "nlp") && (c == "default" || c == "random"))
      t.collections.push_back({{"layout", b, c}, folder});
    else if (b == "layout" && (c == "xla" || c == "nlp"))  // a flat folder of one source, search unknown
      t.collections.push_back({{"layout", c, ""}, folder});
  }
  GNN_CHECK(!t.collections.empty(), dir_text,
            ": not a TpuGraphs tree (expected npz/tile/xla/{train,valid,test}, npz/layout/{xla,nlp}/{default,random}/"
            "{train,valid,test}, one collection folder, or one split folder)");
  return t;
}

// The folders walk_dataset lists .npz files in (not recursively), each with its collection and split.
struct DatasetFolder {
  CollectionId collection;
  std::string split;
  fs::path where;
};
std::vector<DatasetFolder> dataset_folders(const std::string& dir_text, const std::vector<std::string>& splits) {
  const DataTree t = data_tree(dir_text);
  std::vector<DatasetFolder> out;
  for (const auto& [id, folder] : t.collections) {
    // A collection folder holding .npz files and no split folders (as ../shared/data ships the real
    // samples): its files serve as every split asked for.
    const bool flat = t.only_split.empty() && !fs::is_directory(folder / "train") &&
                      !fs::is_directory(folder / "valid") && !fs::is_directory(folder / "test");
    for (const std::string& split : splits) {
      if (!t.only_split.empty() && split != t.only_split) continue;
      const fs::path where = flat ? folder : folder / split;
      if (fs::is_directory(where)) out.push_back({id, split, where});
    }
  }
  return out;
}

}  // namespace

std::string data_folder_holding(const std::string& dir_text, const std::string& path, bool file) {
  DataTree t;
  try {
    t = data_tree(dir_text);
  } catch (const Error&) {
    return "";
  }
  // Where reading the data looks (`below`: that folder and anything under it, which making it would create;
  // `at`: that folder alone, a collection's own, where a flat one's graphs are): each collection's split
  // folders, a collection folder not made yet (a run there would become one) and an npz/ folder not made yet
  // (which would replace the root).
  std::vector<fs::path> below, at;
  for (const auto& c : t.collections) {
    at.push_back(c.second);
    for (const char* split : {"train", "valid", "test"}) below.push_back(c.second / split);
  }
  if (t.tree) {
    if (t.root == t.given) below.push_back(t.given / "npz");
    for (const char* c : {"tile/xla", "layout/xla", "layout/nlp", "layout/xla/default", "layout/xla/random",
                          "layout/nlp/default", "layout/nlp/random"})
      if (!fs::exists(t.root / c)) below.push_back(t.root / c);
  }
  std::error_code ec;
  fs::path p = fs::absolute(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // (a trailing slash)
  if (file) p = p.parent_path();
  p = fs::weakly_canonical(p, ec);
  for (const fs::path& f : at)
    if (p == fs::weakly_canonical(f, ec)) return f.string();
  for (const fs::path& f : below) {
    const fs::path rel = p.lexically_relative(fs::weakly_canonical(f, ec));
    if (!rel.empty() && *rel.begin() != "..") return f.string();
  }
  return "";
}

std::vector<DatasetFile> walk_dataset(const std::string& dir_text, const WalkOptions& options) {
  std::vector<DatasetFile> files;
  std::set<std::string> own;  // bad files warned about (a flat folder's files are walked once a split)
  std::set<std::string>& reported = options.skipped ? *options.skipped : own;
  for (const auto& [id, split, where] : dataset_folders(dir_text, options.splits)) {
    std::vector<fs::path> paths;
    for (const auto& f : fs::directory_iterator(where))
      if (f.path().extension() == ".npz") paths.push_back(f.path());
    std::sort(paths.begin(), paths.end());
    for (const fs::path& p : paths) {
      try {
        // The folder says which kind the file is; a file of the other kind there would fail later,
        // inside preprocessing, with no file named.
        const bool layout = check_tpugraph_header(p.string(), split != "test");
        GNN_CHECK(layout == id.is_layout(), p.string(), ": a ", layout ? "layout" : "tile",
                  " file (its arrays say so) in ", "the ", id.kind, " collection folder ", where.string());
      } catch (const Error& e) {
        if (!options.skip_bad) throw;
        if (reported.insert(p.string()).second)
          std::fprintf(stderr, "gnn: warning: skipping a bad file: %s\n", e.message().c_str());
        continue;
      }
      files.push_back({id, split, p.string(), p.stem().string()});
    }
  }
  return files;
}

std::map<std::string, std::vector<int64_t>> load_eval_indices(const std::string& path) {
  return parse_eval_indices(read_text_file(path, uint64_t(1) << 30), path);
}

std::map<std::string, std::vector<int64_t>> parse_eval_indices(std::string_view text, const std::string& path) {
  const Json j = Json::parse(text, path);
  GNN_CHECK(j.type() == Json::Type::Object, path, ": expected an object of graph name -> config indices");
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [stem, list] : j.items()) {
    // (each message shows the key through shown_field: one of megabytes is cut, the error stays a line)
    GNN_CHECK(list.type() == Json::Type::Array, path, ": '", shown_field(stem), "' is not a list of config indices");
    // An empty list would silently score every config; repeated indices are kept (the official
    // xla_random.json repeats configs), and graphs the data at hand does not hold are no error here (the
    // official files name the valid split's graphs; EvalIndices refuses a scored graph a file leaves out).
    GNN_CHECK(list.size() > 0, path, ": '", shown_field(stem), "' lists no config index");
    // (a repeated name would merge the two lists here, where Python's json keeps the last)
    GNN_CHECK(!out.count(stem), path, ": '", shown_field(stem), "' is listed twice");
    std::vector<int64_t>& v = out[stem];
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& x = list[i];
      GNN_CHECK(x.is_integer() && x.as_int() >= 0, path, ": '", shown_field(stem),
                "' holds something other than a config index (an integer >= 0) at entry ", i, ": ",
                x.dump().substr(0, 40));
      v.push_back(x.as_int());
    }
  }
  return out;
}

}  // namespace gnn
