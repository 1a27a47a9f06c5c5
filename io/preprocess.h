// Preprocessing shared by every recipe: fitted on the training graphs, saved with the model, applied
// to valid and test graphs; run once per graph and cached.
//   feature transforms (per column of a [rows, F] matrix):
//     official     drop columns constant on train, then (x - min) / (max - min) with train statistics
//     log1p        sign(x) * log1p(|x|), no statistics
//     standardize  (x - mean) / std with train statistics (constant columns become 0)
//     trainable    no change here: the model standardises inside its forward, with a mean and std per
//                  column that it trains, started from the train statistics kept here (shift = mean,
//                  scale = population std; the 6th place solution's, over whole graphs)
//     5th          the 5th place solution's reader of the 140 TpuGraphs columns, no statistics: fixed
//                  ranges from its code, logs of the long-tailed columns, dimension numbers one-hot
//                  (191 columns out; io/preprocess.cpp says which)
//   pruning to the k-hop neighbourhood of the configurable nodes (both edge directions; k = 0 keeps
//   only the configurable nodes), duplicate-config removal (identical config features: the config
//   with the lowest runtime stays), and the CSR/CSC graph.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/lru_cache.h"
#include "io/tpugraphs.h"
#include "runtime/graph.h"

namespace gnn {

// (the order is the checkpoint's: a new kind goes at the end)
enum class FeatureTransform { kNone, kOfficial, kLog1p, kStandardize, kTrainable, kFifthPlace };
// none | official | log1p | standardize | trainable | 5th
FeatureTransform parse_feature_transform(const std::string& name);
const char* feature_transform_name(FeatureTransform t);

// Per-column statistics accumulated over training matrices (in double).
class ColumnStats {
 public:
  void add(const Tensor& x);  // f32 [rows, F]; every call must have the same F
  int64_t columns() const { return int64_t(min_.size()); }
  int64_t rows() const { return rows_; }
  // The statistics of another set of rows added to these (of a data-parallel job's other ranks):
  // min and max exact, sums rounded as sums of partial sums.
  void merge(const ColumnStats& other);
  std::vector<double> pack() const;  // [rows, F, min[F], max[F], sum[F], sumsq[F]]
  static ColumnStats unpack(const std::vector<double>& packed);

 private:
  friend class ColumnTransform;
  std::vector<double> min_, max_, sum_, sumsq_;
  int64_t rows_ = 0;
};

// y[:, j] = (x[:, keep[j]] - shift[j]) * scale[j], after sign-log1p for kLog1p; for kTrainable y = x,
// and shift / scale hold each column's mean / population std for the model to start from. kFifthPlace
// has an op per output column (io/preprocess.cpp): that affine map, log(x - shift), or a one-hot test.
class ColumnTransform {
 public:
  ColumnTransform() = default;  // the identity on any width
  ColumnTransform(FeatureTransform kind, const ColumnStats& train);
  FeatureTransform kind() const { return kind_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return int64_t(keep_.size()); }
  Tensor apply(const Tensor& x) const;  // f32 [rows, in] -> f32 [rows, out]
  const std::vector<double>& shift() const { return shift_; }
  const std::vector<double>& scale() const { return scale_; }

  // As named tensors (prefix + "keep" / "shift" / "scale" / "kind"), for the model checkpoint.
  void save(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  static ColumnTransform load(const std::string& prefix, const std::map<std::string, Tensor>& arrays);

 private:
  FeatureTransform kind_ = FeatureTransform::kNone;
  int64_t in_ = -1;  // -1: identity of any width
  std::vector<int32_t> keep_;
  std::vector<double> shift_, scale_;
  std::vector<uint8_t> op_;  // kFifthPlace's, per output column (empty for the others)
};

// Which edges a hop follows from a configurable node: either direction (kBoth), or only from a node to
// the nodes that consume its output (kConsumers: the 6th place solution's 5-hop region, downstream).
enum class HopDirection { kBoth, kConsumers };
HopDirection parse_hop_direction(const std::string& s);  // "both" | "consumers"
// Which edges among the kept nodes a pruned graph keeps: all of them, or only those with a configurable
// end (kConfigurable: the 1st place solution's prune_graph, which drops the edges between two of the
// configurable nodes' neighbours).
enum class RegionEdges { kAll, kConfigurable };
RegionEdges parse_region_edges(const std::string& s);  // "all" | "configurable"

// Keeps the nodes within k hops of a configurable node, following `dir`, and the edges `edges` says;
// node ids keep their order, so edges still point from higher to lower ids. Tile graphs have no
// configurable nodes and come back unchanged; k < 0 means no pruning. `kept`, when given, receives the
// original id of each kept node.
TpuGraph prune_to_configurable(const TpuGraph& g, int k, std::vector<int64_t>* kept = nullptr,
                               HopDirection dir = HopDirection::kBoth, RegionEdges edges = RegionEdges::kAll);

// Indices of the configs to keep: one per distinct config feature row, the one with the lowest
// runtime (lowest index on ties, and when there are no runtimes), ascending.
std::vector<int64_t> distinct_configs(const TpuGraph& g);
TpuGraph select_configs(const TpuGraph& g, const std::vector<int64_t>& configs);

struct PreprocessOptions {
  ColumnTransform node_transform;  // fitted on train
  int khops = -1;  // -1: keep every node
  bool dedup_configs = false;
  HopDirection khops_direction = HopDirection::kBoth;
  RegionEdges khops_edges = RegionEdges::kAll;
};

struct PreprocessedGraph {
  TpuGraph graph;  // pruned, deduplicated; raw features
  Tensor features;  // node features after the transform, f32 [N, F]
  Graph csr;  // messages flow v -> u for each row [u, v]
  std::vector<int64_t> original_config;  // kept config -> its index in the file
  std::vector<int64_t> original_node;  // kept node -> its index in the file
  uint64_t bytes() const;
};

PreprocessedGraph preprocess(const TpuGraph& g, const PreprocessOptions& options);

// Loads and preprocesses each graph once, keeping results under a memory budget.
class PreprocessCache {
 public:
  PreprocessCache(PreprocessOptions options, uint64_t budget_bytes, LoadOptions load = {})
      : cache_(
            budget_bytes, [options, load](const std::string& p) { return preprocess(load_tpugraph(p, load), options); },
            [](const PreprocessedGraph& g) { return g.bytes(); }) {}
  std::shared_ptr<const PreprocessedGraph> get(const std::string& path) { return cache_.get(path); }
  int64_t builds() const { return cache_.builds(); }
  size_t resident() const { return cache_.resident(); }

 private:
  LruCache<PreprocessedGraph> cache_;
};

}  // namespace gnn
