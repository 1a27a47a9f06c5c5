// TpuGraphs files (../shared/TPUGRAPHS.md section 2) as typed, validated structures, the official
// dataset tree, the eval_indices subsets, and a store that loads graphs lazily under a memory budget.
//
// Loaded arrays are normalised to one dtype each, whatever variant the file used:
//   node_feat f32 [N,140]   node_opcode i32 [N]   edge_index i64 [E,2] (row [u, v]: u consumes v)
//   tile:   config_feat f32 [C,24], config_runtime_normalizers f64 [C]
//   layout: node_config_ids i64 [NC], node_config_feat f32 [C,NC,18], node_splits i64 [1,K]
//   config_runtime f64 [C]
// A file that breaks the schema gives one gnn::Error naming the file, the array and the problem.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/lru_cache.h"
#include "runtime/tensor.h"

namespace gnn {

inline constexpr int kNodeFeatures = 140, kTileConfigFeatures = 24, kLayoutConfigFeatures = 18;
inline constexpr int64_t kOpcodes = 121;  // HLO opcode ids 0..120 (TPUGRAPHS.md section 3)

// "tile:xla", "layout:xla:default", "layout:nlp:random": the prefix of a submission ID.
struct CollectionId {
  std::string kind;  // tile | layout
  std::string source;  // xla | nlp
  std::string search;  // default | random; empty for tile
  std::string str() const { return kind + ":" + source + (search.empty() ? "" : ":" + search); }
  bool is_layout() const { return kind == "layout"; }
  friend bool operator==(const CollectionId&, const CollectionId&) = default;
};

struct TpuGraph {
  std::string path;  // the file
  std::string stem;  // its name without .npz: the graph's ID
  bool layout = false;
  Tensor node_feat, node_opcode, edge_index;
  Tensor config_feat, config_runtime_normalizers;  // tile
  Tensor node_config_ids, node_config_feat, node_splits;  // layout
  Tensor config_runtime;  // undefined when the file has none (test split)

  int64_t num_nodes() const { return node_feat.size(0); }
  int64_t num_edges() const { return edge_index.size(0); }
  int64_t num_configs() const { return layout ? node_config_feat.size(0) : config_feat.size(0); }
  int64_t num_configurable() const { return layout ? node_config_ids.numel() : 0; }
  size_t bytes() const;  // host memory held
  bool has_runtimes() const { return config_runtime.defined(); }
  // runtime / normaliser (tile) or runtime (layout), the quantity to rank; lower is better.
  double target(int64_t config) const;
};

struct LoadOptions {
  bool require_runtimes = true;  // false for test files, whose runtimes are unknown
  // The archive's members already read (gnn inspect reads each for its statistics): taken, not read again.
  const std::map<std::string, Tensor>* loaded = nullptr;
};

TpuGraph load_tpugraph(const std::string& path, const LoadOptions& options = {});
class NpzReader;
TpuGraph load_tpugraph(const NpzReader& npz, const LoadOptions& options = {});  // an archive already open

// Config features of the chosen configs only: tile [k, 24], layout [k, NC, 18]; runtimes [k].
Tensor gather_config_feat(const TpuGraph& g, const std::vector<int64_t>& configs);
Tensor gather_runtimes(const TpuGraph& g, const std::vector<int64_t>& configs);

// ---- the dataset tree ----------------------------------------------------------------------------

struct DatasetFile {
  CollectionId collection;
  std::string split;  // train | valid | test
  std::string path;
  std::string stem;
  std::string id() const { return collection.str() + ":" + stem; }  // as in the submission CSV
};

struct WalkOptions {
  std::vector<std::string> splits = {"train", "valid", "test"};
  bool skip_bad = false;  // warn once per bad file on stderr and leave it out, instead of stopping
  // (with skip_bad) the files left out, each warned about once: a caller that loads the files later adds its
  // own failures here, so a file is said and counted once however many splits serve it
  std::set<std::string>* skipped = nullptr;
};

// dir: the release root (holding npz/), npz/ itself, a collection folder (npz/tile/xla,
// npz/layout/nlp/random) or one split folder of a collection. Every file's schema is checked from
// its headers (keys, dtypes, shapes), which reads no array data; values are checked on load.
std::vector<DatasetFile> walk_dataset(const std::string& dir, const WalkOptions& options = {});
// The folder of the data at `dir` that `path` lies in (at or below), as the data's reader sees them: a split
// folder (made yet or not), where a collection or an npz/ folder would be found, a collection folder itself;
// "" for none, and where `dir` is no data tree (its reader says so). A run or other output made there could be
// read as graphs, or hide them. `file`: `path` names a file, which lies where its folder does (a flat
// collection folder holds its graphs directly).
std::string data_folder_holding(const std::string& dir, const std::string& path, bool file = false);

// Checks keys, dtypes and shapes of a TpuGraphs file without reading array data; true for a layout
// file, false for a tile one.
bool check_tpugraph_header(const std::string& path, bool require_runtimes);

// Official eval_indices JSON: graph stem -> the config indices to evaluate (each list non-empty, each
// index an integer >= 0; repeats kept, as the official files hold them). `where` names the text in errors.
std::map<std::string, std::vector<int64_t>> load_eval_indices(const std::string& path);
std::map<std::string, std::vector<int64_t>> parse_eval_indices(std::string_view text, const std::string& where);

// ---- lazy loading under a memory budget -----------------------------------------------------------

// Loads graphs on first use and keeps the recently used ones up to `budget_bytes` (an nlp layout file
// can be GBs inflated); see LruCache for the eviction rule.
class GraphStore {
 public:
  explicit GraphStore(uint64_t budget_bytes, LoadOptions options = {})
      : cache_(
            budget_bytes, [options](const std::string& p) { return load_tpugraph(p, options); },
            [](const TpuGraph& g) { return uint64_t(g.bytes()); }) {}
  std::shared_ptr<const TpuGraph> get(const std::string& path) { return cache_.get(path); }
  uint64_t resident_bytes() const { return cache_.resident_bytes(); }
  size_t resident_graphs() const { return cache_.resident(); }
  int64_t loads() const { return cache_.builds(); }

 private:
  LruCache<TpuGraph> cache_;
};

}  // namespace gnn
