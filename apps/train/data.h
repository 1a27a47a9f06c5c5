// The training pipeline's data side: preprocessing fitted on the training split (saved with the
// model), graphs prepared once and cached, and batches of G graphs x C configs.
//
// A batch is a disjoint union of G graphs sharing C sampled configs each (../shared/DESIGN.md, data
// path step 4). Config-dependent inputs are node-major: tile configs are one row per (graph, config),
// layout configs sit on their configurable nodes as [N, C*18] (zeros on the other nodes), so the
// models below run every layer once for all C configs: a gather reads C*F contiguous values per
// neighbour, a dense layer is one GEMM over (N*C) rows.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "io/lru_cache.h"
#include "io/preprocess.h"
#include "io/tpugraphs.h"
#include "nn/config_share.h"
#include "runtime/graph.h"
#include "runtime/rng.h"

namespace gnn::train {

// Fitted on the training graphs, stored in model.npz under prep/, applied to every split.
struct Preprocessing {
  bool layout = false;
  int khops = -1;  // layout: prune to the k-hop region of the configurable nodes (-1: keep all)
  HopDirection hops = HopDirection::kBoth;  // which edges a hop follows
  RegionEdges edges = RegionEdges::kAll;    // which edges among the kept nodes stay
  ColumnTransform node;  // node_feat [N, 140] -> [N, F]
  ColumnTransform config;  // tile config_feat [C, 24] -> [C, B]; identity for layout (values in -1..5)
  // The mean log runtime of the training configs: a regression (--loss mse | mape) fits model output +
  // log_offset to log runtime, so an untrained model starts at the data's scale (0 in older models).
  double log_offset = 0;
  int64_t node_features() const { return node.out_features(); }
  int64_t config_features() const { return layout ? kLayoutConfigFeatures : config.out_features(); }
  void save(std::vector<std::pair<std::string, Tensor>>& out) const;
  static Preprocessing load(const std::map<std::string, Tensor>& arrays, const std::string& file);
};
Preprocessing fit_preprocessing(const std::vector<DatasetFile>& train, bool layout, FeatureTransform node,
                                FeatureTransform config, int khops, HopDirection hops = HopDirection::kBoth,
                                RegionEdges edges = RegionEdges::kAll);

// An input that only the recipe defining it reads (layout-tgraph's node layouts, layout-attn-violation's
// violation ratios, dnnperf-anee's producer features): defined in the recipe's file and named in its
// BatchNeeds::features. Only then does prepare_graph compute it, once per graph from the graph's raw
// features (after pruning, before any transform), and make_batch gather it into each batch:
//   kPerNode    [N, ...]: row n is node n's, and follows the node through sampling, node ranges, segment
//               views and splits;
//   kPerConfig  [Cg, ...] per graph -> [G*C, ...] per batch, row g*C + c for graph g's c-th config; a
//               split's segments take their graph's rows.
// A float input (f32, read on the model's device) is moved by Batch::to and replaced by
// copy_inputs_from, as x is; any other stays on the host, where the model reads it.
struct GraphFeature {
  enum class Rows { kPerNode, kPerConfig };
  const char* name;  // in messages, and `gnn pass`'s batch/<name>
  Rows rows;
  bool float_input;
  Tensor (*compute)(const TpuGraph& raw);
};
// A graph's or a batch's values of the features it was prepared with, in the order asked for.
struct FeatureValues {
  std::vector<std::pair<const GraphFeature*, Tensor>> values;
  const Tensor* find(const GraphFeature& f) const;  // nullptr when absent
};

// One graph ready for the models.
struct ModelGraph {
  DatasetFile file;
  Tensor x;  // f32 [N, F] transformed node features
  Tensor opcode;  // i32 [N]
  Tensor edges;  // i64 [E, 2] rows [u, v]: u consumes v
  Tensor config;  // tile f32 [Cg, B] transformed; layout f32 [Cg, NC, 18]
  Tensor config_nodes;  // layout: i64 [NC] node ids of the configurable nodes
  FeatureValues features;  // the recipe-only inputs prepare_graph was asked for
  const Tensor& feature(const GraphFeature& f) const;  // fails naming f when it was not asked for
  std::vector<double> target;  // per config, lower is faster; empty when the file has no runtimes
  int64_t num_nodes() const { return x.size(0); }
  int64_t num_configs() const { return config.size(0); }
  uint64_t bytes() const;
};
// A random k-node induced subgraph of m (training's --sample-nodes): every configurable node, then other
// nodes drawn uniformly without replacement up to k in all, kept in their order; the edges between kept
// nodes; configs, targets and per-config features unchanged. m itself when it has at most k nodes.
ModelGraph sample_nodes(const ModelGraph& m, int64_t k, Rng& rng);
// The subgraph induced by nodes [begin, end) of m: their rows, the edges between them, the configurable
// nodes among them (with their columns of each layout config); configs and targets unchanged.
ModelGraph node_range(const ModelGraph& m, int64_t begin, int64_t end);
// Graph Segment Training's cut of n nodes into segments of at most `size` (Cao et al. 2023; kaidic/GST,
// tpu_graphs.py): P = n / size + 1 parts, starting every n / P + 1 nodes, the last one shorter. The
// segment boundaries, i64 values [0, ..., n] (P + 1 of them, or fewer when the step overshoots).
std::vector<int64_t> gst_segments(int64_t n, int64_t size);

// dedup: one config per distinct config-feature row, the fastest (training only: prediction and
// scoring need every config index of the file). features: the recipe-only inputs to compute (a model's
// needs().features).
ModelGraph prepare_graph(const DatasetFile& f, const Preprocessing& p, bool dedup = false,
                         const std::vector<const GraphFeature*>& features = {});
// How many configs the file holds: from its npy header alone, or with dedup the distinct rows of its
// config features (that array alone is read).
int64_t file_configs(const DatasetFile& f, bool dedup = false);

// Prepares each graph once and keeps the results under a memory budget.
class GraphSource {
 public:
  GraphSource(std::vector<DatasetFile> files, Preprocessing prep, uint64_t budget_bytes, bool dedup = false,
              std::vector<const GraphFeature*> features = {});
  const std::vector<DatasetFile>& files() const { return files_; }
  std::shared_ptr<const ModelGraph> get(size_t i);

 private:
  std::vector<DatasetFile> files_;
  Preprocessing prep_;
  bool dedup_ = false;
  std::vector<const GraphFeature*> features_;
  LruCache<ModelGraph> cache_;
};

// What a model reads from a batch beyond its tensors (RankModel::needs): each structure built once, on
// the host, by Batch::prepared (on the trainer's prefetch thread when there is one), then moved with the
// batch by to(). A prepared batch is not changed again: an accessor whose structure the batch was not
// prepared with throws, naming it.
struct BatchNeeds {
  bool gcn = false;  // gcn()
  bool consumers = false;  // consumers(), consumers_mean()
  bool consumers_looped = false;  // consumers_looped()
  bool producers = false;  // producers()
  // The config-sharing plans, by layer count (0: none): over the GCN graph (share_plan), over
  // consumers() (consumers_plan), over A + A^T (graph_plan).
  int64_t share_plan = 0, consumers_plan = 0, graph_plan = 0;
  // The recipe-only inputs (GraphFeature) the model reads through Batch::feature. They come with the
  // graphs (GraphSource and prepare_graph compute them, make_batch gathers them); prepared() checks that
  // the batch holds each.
  std::vector<const GraphFeature*> features;
  // The model scores each config of a graph on its own (nothing mixes configs but the final pooling per
  // config): the trainer may run the copies of one graph in a step as one graph with their configs side
  // by side, each copy's configs a ranking group (group_ptr), so shared rows run once (Run::build_batch).
  bool merge_copies = false;
};

struct Batch {
  int64_t graphs = 0, configs = 0, nodes = 0;  // G, C (the same for every graph), N
  std::vector<std::string> ids;  // per graph, as in a submission
  Tensor x;  // f32 [N, F]
  Tensor opcode;  // i32 [N]
  Tensor graph_ptr;  // i64 [G+1] node rows of each graph
  Tensor node_graph;  // i32 [N] the graph of each node
  Graph graph;  // A + A^T: every edge both ways (the official SAGE aggregation)
  Tensor edges;  // i64 [E, 2] rows [u, v] (u consumes v) in batch numbering, on the host

  // The structures below are built by prepared() when a model's needs() asks for them, on the host, and
  // are on the batch's device after to().
  //
  // The edges against the data's direction: row v lists the nodes that consume v's output, so an
  // aggregation brings each node its consumers (the 6th place's SAGE and GIN layers, PyG's default flow
  // on the files' edge_index).
  const Graph& consumers() const;
  const Tensor& consumers_mean() const;  // f32 [E] per CSR position of consumers(): 1 / the row's degree
  // consumers() with one self-loop per node (any in the data dropped first, as PyG's GATConv does): the
  // 6th place tile GAT's graph.
  const Graph& consumers_looped() const;
  // The data's direction: row u lists the nodes whose output u consumes, its operands (the 5th place's
  // reverse SAGE).
  const Graph& producers() const;
  // The config-sharing plan over consumers() (a mean aggregation) for `steps` layers.
  const nn::SharePlan& consumers_plan(int64_t steps) const;
  // The config-sharing plan over graph (A + A^T, weight 1: the official SAGE's sum) for `steps` layers.
  const nn::SharePlan& graph_plan(int64_t steps) const;
  // A + A^T + I with weight f32 [E'] = 1 / sqrt(deg(u) deg(v)) per CSR position: the GCN recipes'
  // graph (the SAGE and MLP recipes never pay for it), shared by every layer.
  struct Gcn {
    Graph graph;
    Tensor weight;
  };
  const Gcn& gcn() const;
  // The config-sharing plan (nn/config_share.h) of the GCN graph from the configurable nodes over
  // `steps` layers (layout batches).
  const nn::SharePlan& share_plan(int64_t steps) const;
  // This batch with what `needs` asks for built (those it holds already are kept). A host batch.
  Batch prepared(const BatchNeeds& needs) const;
  // What prepared() was given: split() and segment_view() prepare the batches they make the same.
  const BatchNeeds& needs() const { return needs_; }
  const Tensor& keep_grad_host() const { return host_ ? host_->keep_grad : keep_grad; }  // on the host
  Tensor config_feat;  // tile: f32 [G*C, B], graph-major
  Tensor node_config;  // layout: f32 [N, C*18]
  Tensor config_nodes;  // layout: i32 [K] the configurable nodes of every graph, in batch numbering
  Tensor config_ptr;  // layout: i64 [G+1] over config_nodes
  // The recipe-only inputs of the batch's graphs, gathered (GraphFeature); a float input is on the
  // batch's device after to(), any other on the host. feature() fails naming f when the batch lacks it.
  FeatureValues features;
  const Tensor& feature(const GraphFeature& f) const;
  const Tensor& node_config_host() const { return host_ ? host_->node_config : node_config; }
  Tensor target;  // f64 [G*C] (undefined without runtimes)
  // i64 [G+1] = 0, C, 2C, ...: the ranking groups, each graph's configs; in a training batch of merged
  // copies (BatchNeeds::merge_copies) each copy's configs, [G*R+1]
  Tensor group_ptr;
  Tensor keep_grad;  // u8 [N] nodes whose gradient flows (segment training); undefined: all
  Tensor plan_seeds;  // i32: what seeds the config-sharing plans, config_nodes first; undefined: config_nodes
  Tensor config_ids;  // i64 [G*C] each (graph, config)'s config index in its graph, on the host
  // Graph Segment Training: graph g of a training batch is segment part[g] of parts[g] of its file's graph
  // (Run::build_batch, Recipe::train_part); empty when the graphs are whole.
  std::vector<int64_t> part, parts;
  // Seeds what a model draws in training (dropout masks): the trainer sets it from (seed, epoch, batch,
  // first graph), so a resumed run draws what the unbroken one drew.
  uint64_t noise_seed = 0;

  // The batch with its graphs cut into segments, each now a graph of its own: seg_ptr i64 values
  // [0, ..., N], every graph boundary among them. Rows, features and configs stay (the same values, on the
  // same device); edges between segments are dropped, the configurable nodes regrouped by segment, each
  // segment's per-config features are its graph's; no targets (a forward pass, not a loss). Layout only.
  // Prepared with this batch's needs(). Of a device batch: built from the host batch, sharing this
  // batch's device x and node_config (not uploaded again).
  Batch split(const std::vector<int64_t>& seg_ptr) const;

  // Segment training that computes only what its backward reads (SegmentPass, blocks.h): the batch
  // restricted to its segment rows S (keep_grad) and their neighbours H in the GCN graph A + A^T + I, each
  // graph's S rows then its H rows. Its GCN graph holds the entries into S rows at their whole-batch
  // weights, so an S row aggregates exactly what it does in the batch, and none into H rows, whose values a
  // model takes from the whole batch at every layer. The configurable nodes among S and H keep their configs;
  // H's other rows seed the config-sharing plans after them (their values differ per config). For GCN models:
  // the view's SAGE graphs (graph, consumers) hold only the data edges among its rows.
  struct SegmentRows {
    Tensor halo;  // i32 [|H|] the batch rows of H, in the view's order
    Tensor halo_view;  // i32 [|H|] their rows in the view
    Tensor outside;  // u8 [N] the batch rows outside S and H
    std::vector<int64_t> sizes;  // each graph's node count in the batch
  };
  Batch segment_view(SegmentRows* rows) const;  // prepared with this batch's needs()

  // Edge dropout (training): each data edge, both of its directions together, is dropped with probability
  // p, drawn from `seed`; edges and graph are rebuilt. A host batch not prepared yet.
  void drop_edges(double p, uint64_t seed);

  // The batch's float inputs: the values a step reads that may change while its structure repeats: x,
  // config_feat, node_config and the float-input features, the undefined ones too, in that order. to()
  // moves them, copy_inputs_from() copies them, StepGraphs compares only their shapes. Every other array
  // a model reads StepGraphs compares byte for byte (apps/train/step_graph.cpp): in neither, a replay
  // would read the value it was captured with.
  std::vector<const Tensor*> float_inputs() const;
  std::vector<Tensor*> float_inputs();
  // The arrays every batch has (the undefined ones too), by the names `gnn pass` writes them under
  // (batch/NAME), which no recipe-only feature may take.
  std::vector<std::pair<std::string, Tensor>> named_arrays() const;

  // The batch with its float inputs (float_inputs()), graphs (the prepared ones too) and keep_grad (read by
  // every layer's keep_grad_rows) on `device`, in one transfer (Tensor::to_packed), its plans after; the
  // other index arrays (opcode, graph_ptr, node_graph, config_nodes, config_ptr) and the targets stay on
  // the host, where the ops check them (and copy what their kernels read). It keeps the host batch
  // (keep_grad_host(), node_config_host(), split(), segment_view()). Itself for the host.
  Batch to(Device device) const;
  // On a device batch made by to() from a batch of the same structure: host's float inputs
  // copied into this batch's buffers (queued uploads, in place: a CUDA graph reading them sees the new
  // values), and host kept as the host batch. The targets, config_ids and noise_seed stay the first
  // batch's (StepGraphs reads them from host), and so do the prepared structures. split() and
  // segment_view() build from the host batch and upload what they make (split() shares x and node_config):
  // a replayed forward must not call them (StepGraphs takes no batch with a segment, and layout-gst is not replayable).
  void copy_inputs_from(const Batch& host);

 private:
  BatchNeeds needs_;
  std::shared_ptr<const Gcn> gcn_;
  struct Consumers {
    Graph graph;  // the batch's edges with each node's consumers as its in-neighbours
    Tensor mean;  // f32 [E]: 1 / the row's degree
  };
  std::shared_ptr<const Consumers> consumers_;
  std::shared_ptr<const Graph> consumers_looped_, producers_;
  std::shared_ptr<const nn::SharePlan> share_, consumers_plan_, graph_plan_;
  std::shared_ptr<const Batch> host_;  // set by to(): the host batch this one was moved from
  bool prepared_any() const;
};
// configs[g]: the config indices of graphs[g] (all the same length). segment > 0 keeps, in each
// graph larger than it, a random contiguous range of that many nodes for the backward (rng decides).
Batch make_batch(const std::vector<const ModelGraph*>& graphs, const std::vector<std::vector<int64_t>>& configs,
                 int64_t segment = 0, Rng* rng = nullptr);
// The same with one generator per graph (graph g's segment from graph_rngs[g]), so that what a graph
// draws does not depend on the other graphs of its batch: a rank of a data-parallel job builds its
// share of the global batch and draws what one process building all of it would.
Batch make_batch(const std::vector<const ModelGraph*>& graphs, const std::vector<std::vector<int64_t>>& configs,
                 int64_t segment, std::vector<Rng>& graph_rngs);

// k distinct indices from [0, n) (all of them, shuffled, when k >= n).
std::vector<int64_t> sample_without_replacement(int64_t n, int64_t k, Rng& rng);
// k indices from [0, n), each drawn uniformly on its own (repeats possible; any k, n >= 1 when k > 0).
std::vector<int64_t> sample_with_replacement(int64_t n, int64_t k, Rng& rng);

}  // namespace gnn::train
