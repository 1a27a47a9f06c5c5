#include "apps/train/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

#include "apps/checkpoint.h"
#include "base/error.h"
#include "dist/comm.h"
#include "io/npz.h"
#include "nn/graph_util.h"

namespace gnn::train {

void Preprocessing::save(std::vector<std::pair<std::string, Tensor>>& out) const {
  out.emplace_back("prep/layout", i64_tensor(layout ? 1 : 0));
  out.emplace_back("prep/khops", i64_tensor(khops));
  out.emplace_back("prep/khops_consumers", i64_tensor(hops == HopDirection::kConsumers ? 1 : 0));
  out.emplace_back("prep/khops_configurable_edges", i64_tensor(edges == RegionEdges::kConfigurable ? 1 : 0));
  node.save("prep/node/", out);
  config.save("prep/config/", out);
  out.emplace_back("prep/log_offset", f64_tensor(log_offset));
}

Preprocessing Preprocessing::load(const std::map<std::string, Tensor>& arrays, const std::string& file) {
  Preprocessing p;
  p.layout = get_i64(arrays, "prep/layout", file, 0, 1) != 0;
  p.khops = int(get_i64(arrays, "prep/khops", file, -1, 1'000'000));
  // Absent from models written before the direction existed: they followed both.
  if (get_i64(arrays, "prep/khops_consumers", file, 0, 1, 0)) p.hops = HopDirection::kConsumers;
  // Absent from models written before the choice existed: they kept every edge.
  if (get_i64(arrays, "prep/khops_configurable_edges", file, 0, 1, 0)) p.edges = RegionEdges::kConfigurable;
  try {  // (the transforms' checks know the arrays, not the file)
    p.node = ColumnTransform::load("prep/node/", arrays);
    p.config = ColumnTransform::load("prep/config/", arrays);
  } catch (const Error& e) {
    std::string m = e.message();
    if (m.rfind("checkpoint: ", 0) == 0) m.erase(0, 12);
    GNN_FAIL(file, ": ", m, "; the checkpoint is damaged");
  }
  // (a width no TpuGraphs file has would fail only when the transform meets a graph, naming no file)
  for (const auto& [t, key, width] : {std::tuple{&p.node, "prep/node/in_features", int64_t(kNodeFeatures)},
                                      std::tuple{&p.config, "prep/config/in_features",
                                                 int64_t(p.layout ? kLayoutConfigFeatures : kTileConfigFeatures)}})
    GNN_CHECK(t->in_features() == -1 || t->in_features() == width, file, ": '", key, "' is ", t->in_features(),
              ", not the ", width, " columns of TpuGraphs files; the checkpoint is damaged");
  if (arrays.count("prep/log_offset")) p.log_offset = get_f64(arrays, "prep/log_offset", file);
  return p;
}

Preprocessing fit_preprocessing(const std::vector<DatasetFile>& train, bool layout, FeatureTransform node,
                                FeatureTransform config, int khops, HopDirection hops, RegionEdges edges) {
  GNN_CHECK(!train.empty(), "no training graphs to fit the preprocessing on");
  ColumnStats node_stats, config_stats;
  double log_sum = 0, log_n = 0;  // over every config with a runtime
  // In a data-parallel job each rank reads its share of the files and the statistics are merged in
  // rank order, so every rank fits the same transform.
  const dist::World& w = dist::world();
  const dist::Range mine = dist::shard(int64_t(train.size()), w.rank, w.size);
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    const TpuGraph raw = load_tpugraph(train[size_t(i)].path);
    const TpuGraph g = prune_to_configurable(raw, layout ? khops : -1, nullptr, hops, edges);
    // A trainable standardisation starts from the statistics of whole graphs, as the 6th place solution's
    // (its pickle of every node of every training graph); the others see the graphs they transform.
    node_stats.add(node == FeatureTransform::kTrainable ? raw.node_feat : g.node_feat);
    if (!layout) config_stats.add(g.config_feat);
    if (g.has_runtimes())
      for (int64_t c = 0; c < g.num_configs(); ++c) log_sum += std::log(g.target(c)), log_n += 1;
  }
  if (w.size > 1) {
    std::vector<double> packed = node_stats.pack(), cp = config_stats.pack();
    packed.insert(packed.end(), cp.begin(), cp.end());
    packed.insert(packed.end(), {log_sum, log_n});
    const std::string mine_bytes(reinterpret_cast<const char*>(packed.data()), packed.size() * sizeof(double));
    node_stats = config_stats = ColumnStats();
    log_sum = log_n = 0;
    for (const std::string& theirs : dist::allgather(mine_bytes, "the preprocessing statistics")) {
      std::vector<double> v(theirs.size() / sizeof(double));
      std::memcpy(v.data(), theirs.data(), v.size() * sizeof(double));
      const size_t split = 2 + 4 * size_t(v.at(1));
      node_stats.merge(ColumnStats::unpack({v.begin(), v.begin() + std::ptrdiff_t(split)}));
      config_stats.merge(ColumnStats::unpack({v.begin() + std::ptrdiff_t(split), v.end() - 2}));
      log_sum += v[v.size() - 2], log_n += v.back();
    }
  }
  Preprocessing p;
  p.layout = layout, p.khops = layout ? khops : -1, p.hops = hops, p.edges = edges;
  p.node = ColumnTransform(node, node_stats);
  if (!layout) p.config = ColumnTransform(config, config_stats);
  p.log_offset = log_n > 0 ? log_sum / log_n : 0.0;
  return p;
}

uint64_t ModelGraph::bytes() const {
  uint64_t b = target.size() * sizeof(double);
  for (const Tensor* t : {&x, &opcode, &edges, &config, &config_nodes})
    if (t->defined()) b += uint64_t(t->nbytes());
  for (const auto& [f, t] : features.values) b += uint64_t(t.nbytes());
  return b;
}

const Tensor* FeatureValues::find(const GraphFeature& f) const {
  for (const auto& [g, t] : values)
    if (g == &f) return &t;
  return nullptr;
}

const Tensor& ModelGraph::feature(const GraphFeature& f) const {
  const Tensor* t = features.find(f);
  GNN_CHECK(t, "graph ", file.id(), ": no feature '", f.name,
            "': it was prepared without it (prepare_graph's features, a model's needs().features)");
  return *t;
}

namespace {

// t's rows `rows`, in that order (any dtype; a device tensor's rows are gathered there, f32 only).
Tensor rows_at(const Tensor& t, const std::vector<int64_t>& rows) {
  if (!t.defined()) return t;
  const int64_t n = int64_t(rows.size());
  if (t.device().is_cuda()) {
    ag::NoGrad ng;
    return ag::gather_rows(ag::Var(t), Tensor::from_vector(std::vector<int32_t>(rows.begin(), rows.end()))).value();
  }
  std::vector<int64_t> shape = t.shape().vec();
  const size_t row = t.nbytes() / size_t(std::max<int64_t>(1, shape[0]));
  shape[0] = n;
  Tensor o = Tensor::empty(Shape(shape), t.dtype());
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(static_cast<char*>(o.data()) + size_t(i) * row,
                static_cast<const char*>(t.data()) + size_t(rows[size_t(i)]) * row, row);
  return o;
}

// The subgraph of m induced by the nodes where keep[v] is set, in their order: their rows, the edges
// between them, and the configurable nodes among them (a layout config's columns of the others dropped);
// configs, targets and per-config features unchanged.
ModelGraph induced_subgraph(const ModelGraph& m, const std::vector<uint8_t>& keep) {
  const int64_t N = m.num_nodes();
  std::vector<int64_t> id(size_t(N), -1), rows;
  for (int64_t v = 0; v < N; ++v)
    if (keep[size_t(v)]) id[size_t(v)] = int64_t(rows.size()), rows.push_back(v);
  ModelGraph s = m;
  s.x = rows_at(m.x, rows), s.opcode = rows_at(m.opcode, rows);
  for (auto& [f, t] : s.features.values)
    if (f->rows == GraphFeature::Rows::kPerNode) t = rows_at(t, rows);
  std::vector<int64_t> e;
  for (int64_t i = 0; i < m.edges.size(0); ++i) {
    const int64_t u = id[size_t(m.edges.i64()[2 * i])], v = id[size_t(m.edges.i64()[2 * i + 1])];
    if (u >= 0 && v >= 0) e.push_back(u), e.push_back(v);
  }
  s.edges = Tensor::from_vector(e, Shape{int64_t(e.size() / 2), 2});
  if (m.config_nodes.defined()) {
    const int64_t NC = m.config_nodes.numel();
    std::vector<int64_t> cn, kept;  // the new ids, and the positions j they had
    for (int64_t j = 0; j < NC; ++j)
      if (id[size_t(m.config_nodes.i64()[j])] >= 0)
        cn.push_back(id[size_t(m.config_nodes.i64()[j])]), kept.push_back(j);
    s.config_nodes = Tensor::from_vector(cn);
    if (int64_t(kept.size()) < NC) {  // config [Cg, NC, 18] -> [Cg, NC', 18]
      const int64_t Cg = m.config.size(0), B = m.config.size(2), K = int64_t(kept.size());
      s.config = Tensor::empty({Cg, K, B}, DType::F32);
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t k = 0; k < K; ++k)
          std::memcpy(s.config.f32() + (c * K + k) * B, m.config.f32() + (c * NC + kept[size_t(k)]) * B,
                      size_t(B) * sizeof(float));
    }
  }
  return s;
}

}  // namespace

ModelGraph sample_nodes(const ModelGraph& m, int64_t k, Rng& rng) {
  const int64_t N = m.num_nodes();
  if (N <= k) return m;
  std::vector<uint8_t> keep(size_t(N), 0);
  int64_t kept = 0;
  if (m.config_nodes.defined())
    for (int64_t j = 0; j < m.config_nodes.numel(); ++j)
      kept += !keep[size_t(m.config_nodes.i64()[j])], keep[size_t(m.config_nodes.i64()[j])] = 1;
  std::vector<int64_t> others;
  for (int64_t v = 0; v < N; ++v)
    if (!keep[size_t(v)]) others.push_back(v);
  for (int64_t i : sample_without_replacement(int64_t(others.size()), std::max<int64_t>(0, k - kept), rng))
    keep[size_t(others[size_t(i)])] = 1;
  return induced_subgraph(m, keep);
}

ModelGraph node_range(const ModelGraph& m, int64_t begin, int64_t end) {
  const int64_t N = m.num_nodes();
  GNN_CHECK(0 <= begin && begin < end && end <= N, "node_range: [", begin, ", ", end, ") of ", N, " nodes");
  if (begin == 0 && end == N) return m;
  std::vector<uint8_t> keep(size_t(N), 0);
  std::fill(keep.begin() + begin, keep.begin() + end, uint8_t(1));
  return induced_subgraph(m, keep);
}

std::vector<int64_t> gst_segments(int64_t n, int64_t size) {
  GNN_CHECK(n > 0 && size > 0, "gst_segments: ", n, " nodes in segments of ", size);
  const int64_t parts = n / size + 1, step = n / parts + 1;
  std::vector<int64_t> ptr;
  for (int64_t v = 0; v < n; v += step) ptr.push_back(v);
  ptr.push_back(n);
  return ptr;
}

namespace {

// A feature's name is its array's under batch/ in `gnn pass`: one feature to a name, none of the batch's own.
void check_feature_names(const std::vector<const GraphFeature*>& features) {
  static const std::vector<std::pair<std::string, Tensor>> kBatchArrays = Batch{}.named_arrays();
  for (size_t i = 0; i < features.size(); ++i) {
    GNN_CHECK(features[i] && features[i]->compute, "prepare_graph: feature ", i, " has no compute function");
    for (const auto& [own, unused] : kBatchArrays)
      GNN_CHECK(features[i]->name != own, "prepare_graph: a feature may not be named '", own,
                "', an array every batch has");
    for (size_t j = 0; j < i; ++j)
      GNN_CHECK(features[j] == features[i] || std::strcmp(features[j]->name, features[i]->name) != 0,
                "prepare_graph: two features are named '", features[i]->name, "'");
  }
}

}  // namespace

ModelGraph prepare_graph(const DatasetFile& f, const Preprocessing& p, bool dedup,
                         const std::vector<const GraphFeature*>& features) {
  check_feature_names(features);
  LoadOptions lo;
  lo.require_runtimes = false;  // test files have none; scoring asks for them where it needs them
  const TpuGraph raw = load_tpugraph(f.path, lo);
  GNN_CHECK(raw.layout == p.layout, f.path, ": a ", raw.layout ? "layout" : "tile", " graph given to a ",
            p.layout ? "layout" : "tile", " model");
  PreprocessOptions o;
  o.node_transform = p.node, o.khops = p.layout ? p.khops : -1, o.khops_direction = p.hops, o.khops_edges = p.edges;
  o.dedup_configs = dedup;
  PreprocessedGraph pg = preprocess(raw, o);
  ModelGraph m;
  m.file = f;
  m.x = pg.features;
  m.opcode = pg.graph.node_opcode;
  m.edges = pg.graph.edge_index;
  if (p.layout) {
    m.config = pg.graph.node_config_feat;
    m.config_nodes = pg.graph.node_config_ids;
  } else {
    m.config = p.config.apply(pg.graph.config_feat);
  }
  for (const GraphFeature* gf : features) {
    if (m.features.find(*gf)) continue;
    Tensor t = gf->compute(pg.graph);
    const int64_t rows = gf->rows == GraphFeature::Rows::kPerNode ? m.num_nodes() : m.num_configs();
    GNN_CHECK(t.defined() && t.dim() >= 1 && t.size(0) == rows && (!gf->float_input || t.dtype() == DType::F32), f.path,
              ": feature '", gf->name, "' must have ", rows, " rows", gf->float_input ? " of f32" : "", ", got ",
              t.defined() ? t.desc() : std::string("none"));
    m.features.values.emplace_back(gf, std::move(t));
  }
  if (pg.graph.has_runtimes()) {
    m.target.resize(size_t(m.num_configs()));
    for (int64_t c = 0; c < m.num_configs(); ++c) m.target[size_t(c)] = pg.graph.target(c);
  }
  return m;
}

int64_t file_configs(const DatasetFile& f, bool dedup) {
  const std::string key = f.collection.is_layout() ? "node_config_feat" : "config_feat";
  NpzReader r(f.path);
  const NpzArrayInfo info = r.info(key);
  GNN_CHECK(!info.header.shape.empty(), f.path, ": ", key, " is a scalar");
  if (!dedup || info.header.shape[0] == 0) return info.header.shape[0];
  const Tensor c = r.load(key);
  const size_t row = c.nbytes() / size_t(c.size(0));
  std::set<std::string> rows;
  for (int64_t i = 0; i < c.size(0); ++i) rows.emplace(static_cast<const char*>(c.data()) + size_t(i) * row, row);
  return int64_t(rows.size());
}

GraphSource::GraphSource(std::vector<DatasetFile> files, Preprocessing prep, uint64_t budget_bytes, bool dedup,
                         std::vector<const GraphFeature*> features)
    : files_(std::move(files)),
      prep_(std::move(prep)),
      dedup_(dedup),
      features_(std::move(features)),
      cache_(
          budget_bytes,
          [this](const std::string& key) { return prepare_graph(files_[std::stoul(key)], prep_, dedup_, features_); },
          [](const ModelGraph& g) { return g.bytes(); }) {}

std::shared_ptr<const ModelGraph> GraphSource::get(size_t i) {
  GNN_CHECK(i < files_.size(), "GraphSource: graph ", i, " of ", files_.size());
  return cache_.get(std::to_string(i));  // keyed by position: the same file may sit in two sources
}

std::vector<int64_t> sample_with_replacement(int64_t n, int64_t k, Rng& rng) {
  GNN_CHECK(n >= 1 || k == 0, "sample_with_replacement: ", k, " draws from nothing");
  std::vector<int64_t> idx(static_cast<size_t>(k));
  for (int64_t& i : idx) i = int64_t(rng.below(uint64_t(n)));
  return idx;
}

std::vector<int64_t> sample_without_replacement(int64_t n, int64_t k, Rng& rng) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  for (int64_t i = 0; i < k; ++i) std::swap(idx[size_t(i)], idx[size_t(i + int64_t(rng.below(uint64_t(n - i))))]);
  idx.resize(size_t(k));
  return idx;
}

namespace {

// The accessor of a structure the batch was not prepared with: what to declare.
[[noreturn]] void not_prepared(const char* what, const char* need) {
  GNN_FAIL("Batch::", what, ": the batch was not prepared with it: the model's needs() must ask for ", need,
           " (Batch::prepared)");
}

const nn::SharePlan& plan_of(const std::shared_ptr<const nn::SharePlan>& p, int64_t steps, const char* what) {
  if (!p) not_prepared(what, what);
  GNN_CHECK(p->steps() == steps, "Batch::", what, ": prepared for ", p->steps(), " layers, asked for ", steps);
  return *p;
}

Batch::Gcn build_gcn(const Graph& graph) {
  Batch::Gcn g;
  g.graph = nn::add_self_loops(graph).graph;
  g.weight = nn::gcn_norm(g.graph);
  return g;
}

}  // namespace

const Batch::Gcn& Batch::gcn() const {
  if (!gcn_) not_prepared("gcn", "gcn");
  return *gcn_;
}
const Graph& Batch::consumers() const {
  if (!consumers_) not_prepared("consumers", "consumers");
  return consumers_->graph;
}
const Tensor& Batch::consumers_mean() const {
  if (!consumers_) not_prepared("consumers_mean", "consumers");
  return consumers_->mean;
}
const Graph& Batch::consumers_looped() const {
  if (!consumers_looped_) not_prepared("consumers_looped", "consumers_looped");
  return *consumers_looped_;
}
const Graph& Batch::producers() const {
  if (!producers_) not_prepared("producers", "producers");
  return *producers_;
}
const nn::SharePlan& Batch::consumers_plan(int64_t steps) const {
  return plan_of(consumers_plan_, steps, "consumers_plan");
}
const nn::SharePlan& Batch::graph_plan(int64_t steps) const { return plan_of(graph_plan_, steps, "graph_plan"); }
const nn::SharePlan& Batch::share_plan(int64_t steps) const { return plan_of(share_, steps, "share_plan"); }

const Tensor& Batch::feature(const GraphFeature& f) const {
  const Tensor* t = features.find(f);
  if (!t)
    GNN_FAIL("Batch::feature: the batch has no '", f.name,
             "': the model's needs().features must name it, so that its graphs are prepared with it");
  return *t;
}

std::vector<const Tensor*> Batch::float_inputs() const {
  std::vector<const Tensor*> out = {&x, &config_feat, &node_config};
  for (const auto& [f, t] : features.values)
    if (f->float_input) out.push_back(&t);
  return out;
}
std::vector<std::pair<std::string, Tensor>> Batch::named_arrays() const {
  return {{"x", x},
          {"opcode", opcode},
          {"edges", edges},
          {"graph_ptr", graph_ptr},
          {"target", target},
          {"config_ids", config_ids},
          {"node_config", node_config},
          {"config_nodes", config_nodes},
          {"config_feat", config_feat}};
}
std::vector<Tensor*> Batch::float_inputs() {
  std::vector<Tensor*> out = {&x, &config_feat, &node_config};
  for (auto& [f, t] : features.values)
    if (f->float_input) out.push_back(&t);
  return out;
}

bool Batch::prepared_any() const {
  return gcn_ || consumers_ || consumers_looped_ || producers_ || share_ || consumers_plan_ || graph_plan_;
}

Batch Batch::prepared(const BatchNeeds& n) const {
  GNN_CHECK(graph.device().is_cpu(), "Batch::prepared: a host batch (prepare it, then move it with to()), got one on ",
            graph.device().str());
  for (const GraphFeature* f : n.features) feature(*f);  // came with the graphs, or fails naming it
  Batch b = *this;
  b.needs_ = n;
  const Tensor& seeds = plan_seeds.defined() ? plan_seeds : config_nodes;
  // A plan only where it has configurable nodes to share from (the models take their plain path elsewhere).
  const bool plans = config_nodes.defined() && config_nodes.numel() > 0;
  BatchNeeds built = n;
  if (!plans) built.share_plan = built.consumers_plan = built.graph_plan = 0;
  if (n.gcn && !b.gcn_) b.gcn_ = std::make_shared<const Gcn>(build_gcn(graph));
  if (built.share_plan > 0 && (!b.share_ || b.share_->steps() != built.share_plan)) {
    const Gcn a = b.gcn_ ? *b.gcn_ : build_gcn(graph);  // (kept only when the model reads it)
    b.share_ = std::make_shared<const nn::SharePlan>(
        nn::SharePlan::build(a.graph, a.weight, seeds, graph_ptr, configs, built.share_plan));
  }
  if ((n.consumers || n.consumers_looped || built.consumers_plan > 0) && !b.consumers_) {
    Consumers c;
    c.graph = Graph::from_edge_index(edges, nodes, EdgeColumns::kSrcDst, "batch edges");
    c.mean = Tensor::empty({c.graph.num_edges}, DType::F32);
    const int32_t* rp = c.graph.csr_indptr.i32();
    for (int64_t v = 0; v < nodes; ++v)
      for (int32_t p = rp[v]; p < rp[v + 1]; ++p) c.mean.f32()[p] = 1.0f / float(rp[v + 1] - rp[v]);
    b.consumers_ = std::make_shared<const Consumers>(std::move(c));
  }
  if (n.consumers_looped && !b.consumers_looped_)
    b.consumers_looped_ = std::make_shared<const Graph>(nn::add_self_loops(b.consumers_->graph).graph);
  if (built.consumers_plan > 0 && (!b.consumers_plan_ || b.consumers_plan_->steps() != built.consumers_plan))
    b.consumers_plan_ = std::make_shared<const nn::SharePlan>(
        nn::SharePlan::build(b.consumers_->graph, b.consumers_->mean, seeds, graph_ptr, configs, built.consumers_plan));
  if (built.graph_plan > 0 && (!b.graph_plan_ || b.graph_plan_->steps() != built.graph_plan))
    b.graph_plan_ = std::make_shared<const nn::SharePlan>(
        nn::SharePlan::build(graph, Tensor(), seeds, graph_ptr, configs, built.graph_plan));
  if (n.producers && !b.producers_)
    b.producers_ =
        std::make_shared<const Graph>(Graph::from_edge_index(edges, nodes, EdgeColumns::kDstSrc, "batch edges"));
  // What a model did not ask for is not carried along (a structure kept from before, when not asked for).
  if (!n.gcn) b.gcn_.reset();
  if (!n.consumers && !built.consumers_plan) b.consumers_.reset();  // (consumers_looped alone: not moved)
  if (!n.consumers_looped) b.consumers_looped_.reset();
  if (!n.producers) b.producers_.reset();
  if (!built.share_plan) b.share_.reset();
  if (!built.consumers_plan) b.consumers_plan_.reset();
  if (!built.graph_plan) b.graph_plan_.reset();
  return b;
}

void Batch::drop_edges(double p, uint64_t seed) {
  GNN_CHECK(p >= 0 && p < 1, "Batch::drop_edges: p must lie in [0, 1), got ", p);
  GNN_CHECK(graph.device().is_cpu() && !prepared_any(), "Batch::drop_edges: needs a host batch not prepared yet");
  Rng rng(seed);
  const int64_t E = edges.size(0);
  const int64_t* e = edges.i64();
  std::vector<int64_t> kept, src, dst;
  for (int64_t i = 0; i < E; ++i) {
    if (rng.uniform() < p) continue;
    kept.push_back(e[2 * i]), kept.push_back(e[2 * i + 1]);
    src.push_back(e[2 * i + 1]), dst.push_back(e[2 * i]);  // row [u, v]: u consumes v; messages both ways
    src.push_back(e[2 * i]), dst.push_back(e[2 * i + 1]);
  }
  edges = Tensor::from_vector(kept, Shape{int64_t(kept.size() / 2), 2});
  graph = Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), nodes, "batch edges");
}

Batch Batch::to(Device device) const {
  if (graph.device() == device) return *this;
  GNN_CHECK(graph.device().is_cpu(), "Batch::to: the batch is already on ", graph.device().str());
  Batch b = *this;
  b.host_ = std::make_shared<const Batch>(*this);
  std::vector<Tensor*> arrays = b.graph.arrays();
  for (Tensor* t : b.float_inputs()) arrays.push_back(t);
  arrays.push_back(&b.keep_grad);
  Gcn gcn = gcn_ ? *gcn_ : Gcn();
  Consumers consumers = consumers_ ? *consumers_ : Consumers();
  Graph looped = consumers_looped_ ? *consumers_looped_ : Graph(), producers = producers_ ? *producers_ : Graph();
  for (Graph* g : {&gcn.graph, &consumers.graph, &looped, &producers})
    for (Tensor* t : g->arrays()) arrays.push_back(t);
  arrays.push_back(&gcn.weight), arrays.push_back(&consumers.mean);
  std::erase_if(arrays, [](const Tensor* t) { return !t->defined(); });
  Tensor::move_packed(arrays, device);  // the batch's graphs and features in one transfer
  if (gcn_) b.gcn_ = std::make_shared<const Gcn>(std::move(gcn));
  if (consumers_) b.consumers_ = std::make_shared<const Consumers>(std::move(consumers));
  if (consumers_looped_) b.consumers_looped_ = std::make_shared<const Graph>(std::move(looped));
  if (producers_) b.producers_ = std::make_shared<const Graph>(std::move(producers));
  for (auto plan : {&Batch::share_, &Batch::consumers_plan_, &Batch::graph_plan_})
    if (this->*plan) b.*plan = std::make_shared<const nn::SharePlan>((this->*plan)->to(device));
  return b;
}

void Batch::copy_inputs_from(const Batch& host) {
  GNN_CHECK(host.graph.device().is_cpu() && !graph.device().is_cpu(),
            "Batch::copy_inputs_from: from a host batch into a device batch, got ", host.graph.device().str(), " into ",
            graph.device().str());
  const std::vector<Tensor*> mine = float_inputs();
  const std::vector<const Tensor*> theirs = host.float_inputs();
  GNN_CHECK(mine.size() == theirs.size(), "Batch::copy_inputs_from: a different structure");
  for (size_t i = 0; i < mine.size(); ++i) {
    GNN_CHECK(mine[i]->defined() == theirs[i]->defined(), "Batch::copy_inputs_from: a different structure");
    if (mine[i]->defined()) Tensor(*mine[i]).copy_from(*theirs[i]);
  }
  host_ = std::make_shared<const Batch>(host);
}

namespace {

// Which batch rows a segment view holds: each graph's segment rows S (keep), then their neighbours H in
// `a` (the GCN graph) outside S, ascending. at[v]: v's row in the view, -1 outside it.
struct ViewRows {
  std::vector<int64_t> at, take, ptr{0};  // take[r]: the batch row of view row r; ptr: per graph
  std::vector<int32_t> halo, halo_view;  // H's batch rows, and their rows in the view
};
ViewRows view_rows(const Tensor& keep, const Tensor& graph_ptr, const Graph& a, int64_t nodes) {
  const int32_t* rp = a.csr_indptr.i32();
  const int32_t* ri = a.csr_indices.i32();
  ViewRows v;
  v.at.assign(static_cast<size_t>(nodes), -1);
  std::vector<char> seen(static_cast<size_t>(nodes), 0);
  for (int64_t g = 0; g + 1 < graph_ptr.numel(); ++g) {
    const int64_t lo = graph_ptr.i64()[g], hi = graph_ptr.i64()[g + 1];
    std::vector<int32_t> h;
    for (int64_t u = lo; u < hi; ++u) {
      if (!keep.u8()[u]) continue;
      v.at[size_t(u)] = int64_t(v.take.size()), v.take.push_back(u);
      for (int32_t p = rp[u]; p < rp[u + 1]; ++p)
        if (!keep.u8()[ri[p]] && !seen[size_t(ri[p])]) seen[size_t(ri[p])] = 1, h.push_back(ri[p]);
    }
    std::sort(h.begin(), h.end());
    for (int32_t u : h) {
      v.at[size_t(u)] = int64_t(v.take.size());
      v.halo.push_back(u), v.halo_view.push_back(int32_t(v.take.size())), v.take.push_back(u);
    }
    v.ptr.push_back(int64_t(v.take.size()));
  }
  return v;
}

// The view's graphs: the entries of `full` (GCN, with weights) into its S rows, at their weights, and
// the same entries without the self-loops as its plain graph (A + A^T, weight 1).
std::pair<Batch::Gcn, Graph> view_graphs(const Batch::Gcn& full, const ViewRows& v, const Tensor& keep) {
  const int32_t* rp = full.graph.csr_indptr.i32();
  const int32_t* ri = full.graph.csr_indices.i32();
  const int64_t n = int64_t(v.take.size());
  std::vector<int64_t> src, dst, psrc, pdst;
  std::vector<float> w;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t u = v.take[size_t(r)];
    if (!keep.u8()[u]) continue;
    for (int32_t p = rp[u]; p < rp[u + 1]; ++p) {
      src.push_back(v.at[size_t(ri[p])]), dst.push_back(r), w.push_back(full.weight.f32()[p]);
      if (ri[p] != u) psrc.push_back(v.at[size_t(ri[p])]), pdst.push_back(r);
    }
  }
  Batch::Gcn g;
  g.graph = Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), n, "segment view");
  g.weight = Tensor::empty({g.graph.num_edges}, DType::F32);  // in CSR order: position p holds edge csr_eid[p]
  for (int64_t p = 0; p < g.graph.num_edges; ++p) g.weight.f32()[p] = w[size_t(g.graph.csr_eid.i32()[p])];
  return {std::move(g), Graph::from_edges(psrc.data(), pdst.data(), int64_t(psrc.size()), n, "segment view")};
}

}  // namespace

Batch Batch::segment_view(SegmentRows* rows) const {
  GNN_CHECK(keep_grad.defined() && node_config.defined(), "Batch::segment_view: a layout batch with a segment");
  if (host_) return host_->segment_view(rows).to(graph.device());  // built on the host, moved in one transfer
  const Tensor& keep = keep_grad;
  const Gcn full = gcn_ ? *gcn_ : build_gcn(graph);  // the whole batch's GCN graph, with its weights
  const ViewRows v = view_rows(keep, graph_ptr, full.graph, nodes);
  const int64_t n = int64_t(v.take.size());
  rows->halo = Tensor::from_vector(v.halo);
  rows->halo_view = Tensor::from_vector(v.halo_view);
  rows->outside = Tensor::empty({nodes}, DType::U8);
  for (int64_t u = 0; u < nodes; ++u) rows->outside.u8()[u] = v.at[size_t(u)] < 0;
  rows->sizes.clear();
  for (int64_t g = 0; g < graphs; ++g) rows->sizes.push_back(graph_ptr.i64()[g + 1] - graph_ptr.i64()[g]);

  Batch out;
  out.graphs = graphs, out.configs = configs, out.nodes = n, out.ids = ids;
  out.graph_ptr = Tensor::from_vector(v.ptr);
  out.node_graph = Tensor::empty({n}, DType::I32);
  for (int64_t g = 0; g < graphs; ++g)
    std::fill(out.node_graph.i32() + v.ptr[size_t(g)], out.node_graph.i32() + v.ptr[size_t(g) + 1], int32_t(g));
  out.x = rows_at(x, v.take), out.node_config = rows_at(node_config, v.take), out.opcode = rows_at(opcode, v.take);
  out.features = features;
  for (auto& [f, t] : out.features.values)
    if (f->rows == GraphFeature::Rows::kPerNode) t = rows_at(t, v.take);
  out.target = target, out.group_ptr = group_ptr, out.config_ids = config_ids;
  out.part = part, out.parts = parts, out.noise_seed = noise_seed;
  std::vector<int64_t> e;  // the data edges among the view's rows (its consumers graph)
  for (int64_t i = 0; i < edges.size(0); ++i) {
    const int64_t a = v.at[size_t(edges.i64()[2 * i])], b = v.at[size_t(edges.i64()[2 * i + 1])];
    if (a >= 0 && b >= 0) e.push_back(a), e.push_back(b);
  }
  out.edges = Tensor::from_vector(e, Shape{int64_t(e.size() / 2), 2});
  // The configurable nodes of the view, in the batch's order; then H's other rows seed its plans.
  std::vector<int32_t> cn;
  std::vector<int64_t> cptr{0};
  for (int64_t g = 0; g < graphs; ++g) {
    for (int64_t k = config_ptr.i64()[g]; k < config_ptr.i64()[g + 1]; ++k)
      if (v.at[size_t(config_nodes.i32()[k])] >= 0) cn.push_back(int32_t(v.at[size_t(config_nodes.i32()[k])]));
    cptr.push_back(int64_t(cn.size()));
  }
  std::vector<int32_t> seeds = cn;
  std::vector<char> seeded(static_cast<size_t>(n), 0);
  for (int32_t r : cn) seeded[size_t(r)] = 1;
  for (int32_t r : v.halo_view)
    if (!seeded[size_t(r)]) seeds.push_back(r);
  out.config_nodes = Tensor::from_vector(cn), out.config_ptr = Tensor::from_vector(cptr);
  out.plan_seeds = Tensor::from_vector(seeds);
  auto [vg, plain] = view_graphs(full, v, keep);
  out.gcn_ = std::make_shared<const Gcn>(std::move(vg));  // (prepared() keeps it: it is the view's own)
  out.graph = std::move(plain);
  return out.prepared(needs_);
}

Batch Batch::split(const std::vector<int64_t>& seg_ptr) const {
  GNN_CHECK(node_config.defined(), "Batch::split: a layout batch only");
  if (host_) {
    // Built on the host; rows, features and configs stay, so the device copies of x, node_config and the
    // per-node features are this batch's own, and only what split() makes goes up (graphs and per-config
    // features in one transfer, then the plans).
    Batch h = host_->split(seg_ptr), shell = h;
    shell.x = Tensor(), shell.node_config = Tensor();
    for (auto& [f, t] : shell.features.values)
      if (f->rows == GraphFeature::Rows::kPerNode) t = Tensor();
    Batch d = shell.to(graph.device());
    d.x = x, d.node_config = node_config;
    for (size_t i = 0; i < features.values.size(); ++i)
      if (features.values[i].first->rows == GraphFeature::Rows::kPerNode)
        d.features.values[i].second = features.values[i].second;
    d.host_ = std::make_shared<const Batch>(std::move(h));
    return d;
  }
  const int64_t S = int64_t(seg_ptr.size()) - 1, G = graphs, C = configs;
  GNN_CHECK(S >= G && seg_ptr.front() == 0 && seg_ptr.back() == nodes, "Batch::split: ", S,
            " segments do not cover the ", nodes, " nodes of ", G, " graphs");
  for (int64_t s = 0; s < S; ++s)
    GNN_CHECK(seg_ptr[size_t(s)] < seg_ptr[size_t(s) + 1], "Batch::split: segment ", s, " is empty");
  std::vector<int32_t> seg_of(static_cast<size_t>(nodes));
  for (int64_t s = 0; s < S; ++s)
    std::fill(seg_of.begin() + seg_ptr[size_t(s)], seg_of.begin() + seg_ptr[size_t(s) + 1], int32_t(s));
  Batch out;
  out.graphs = S, out.configs = C, out.nodes = nodes;
  out.x = x, out.opcode = opcode, out.node_config = node_config, out.features = features;
  out.noise_seed = noise_seed;
  out.graph_ptr = Tensor::from_vector(seg_ptr);
  out.node_graph = Tensor::from_vector(seg_of);
  std::vector<int64_t> first(static_cast<size_t>(G));  // each graph's first segment
  for (int64_t g = 0, s = 0; g < G; ++g) {
    while (seg_ptr[size_t(s)] < graph_ptr.i64()[g]) ++s;
    GNN_CHECK(seg_ptr[size_t(s)] == graph_ptr.i64()[g], "Batch::split: graph ", g, " starts inside a segment");
    first[size_t(g)] = s;
  }
  std::vector<int64_t> gp(static_cast<size_t>(S + 1)), kept;
  std::vector<int64_t> src, dst;
  for (int64_t s = 0; s <= S; ++s) gp[size_t(s)] = s * C;
  out.group_ptr = Tensor::from_vector(gp);
  for (int64_t s = 0, g = 0; s < S; ++s) {
    while (g + 1 < G && first[size_t(g) + 1] <= s) ++g;
    out.ids.push_back(ids[size_t(g)] + "#" + std::to_string(s - first[size_t(g)]));
  }
  const int64_t* e = edges.i64();
  for (int64_t i = 0; i < edges.size(0); ++i) {
    const int64_t u = e[2 * i], v = e[2 * i + 1];
    if (seg_of[size_t(u)] != seg_of[size_t(v)]) continue;
    kept.push_back(u), kept.push_back(v);
    src.push_back(v), dst.push_back(u), src.push_back(u), dst.push_back(v);  // both ways, as assemble
  }
  out.edges = Tensor::from_vector(kept, Shape{int64_t(kept.size() / 2), 2});
  Graph host = Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), nodes, "segment edges");
  // The configurable nodes by segment (stable), and the config rows of each segment from its graph's.
  const int64_t K = config_nodes.numel();
  std::vector<int32_t> cn(static_cast<size_t>(K));
  std::vector<int64_t> cptr(static_cast<size_t>(S + 1), 0);
  for (int64_t k = 0; k < K; ++k) cptr[size_t(seg_of[size_t(config_nodes.i32()[k])]) + 1] += 1;
  for (int64_t s = 0; s < S; ++s) cptr[size_t(s) + 1] += cptr[size_t(s)];
  std::vector<int64_t> fill(cptr.begin(), cptr.end() - 1);
  for (int64_t k = 0; k < K; ++k)
    cn[size_t(fill[size_t(seg_of[size_t(config_nodes.i32()[k])])]++)] = config_nodes.i32()[k];
  out.config_nodes = Tensor::from_vector(cn);
  out.config_ptr = Tensor::from_vector(cptr);
  for (auto& [f, t] : out.features.values) {  // a segment's config rows are its graph's
    if (f->rows != GraphFeature::Rows::kPerConfig) continue;
    std::vector<int64_t> rows;
    for (int64_t s = 0, g = 0; s < S; ++s) {
      while (g + 1 < G && first[size_t(g) + 1] <= s) ++g;
      for (int64_t c = 0; c < C; ++c) rows.push_back(g * C + c);
    }
    t = rows_at(t, rows);
  }
  out.graph = std::move(host);
  return out.prepared(needs_);
}

namespace {

// below(g, n): graph g's draw from [0, n) for its segment's start.
template <class Below>
Batch assemble(const std::vector<const ModelGraph*>& graphs, const std::vector<std::vector<int64_t>>& configs,
               int64_t segment, bool can_draw, Below below) {
  GNN_CHECK(!graphs.empty() && graphs.size() == configs.size(), "make_batch: ", graphs.size(), " graphs and ",
            configs.size(), " config lists");
  Batch b;
  b.graphs = int64_t(graphs.size());
  b.configs = int64_t(configs[0].size());
  GNN_CHECK(b.configs > 0, "make_batch: no configs");
  const bool layout = graphs[0]->config.dim() == 3;
  const int64_t F = graphs[0]->x.size(1), C = b.configs, G = b.graphs;
  int64_t E = 0, K = 0;
  bool targets = true;
  std::vector<int64_t> ptr{0};
  for (size_t g = 0; g < graphs.size(); ++g) {
    const ModelGraph& m = *graphs[g];
    GNN_CHECK(int64_t(configs[g].size()) == C, "make_batch: graph ", m.file.id(), " has ", configs[g].size(),
              " configs, graph 0 has ", C);
    GNN_CHECK(m.x.size(1) == F && (m.config.dim() == 3) == layout, "make_batch: ", m.file.id(),
              " does not match the batch's first graph (features or collection)");
    for (int64_t c : configs[g])
      GNN_CHECK(c >= 0 && c < m.num_configs(), "make_batch: config ", c, " of ", m.file.id(), " (", m.num_configs(),
                " configs)");
    ptr.push_back(ptr.back() + m.num_nodes());
    E += m.edges.size(0);
    if (layout) K += m.config_nodes.numel();
    targets = targets && !m.target.empty();
    b.ids.push_back(m.file.id());
  }
  const int64_t N = ptr.back();
  b.nodes = N;
  b.graph_ptr = Tensor::from_vector(ptr);
  b.x = Tensor::empty({N, F}, DType::F32);
  b.opcode = Tensor::empty({N}, DType::I32);
  b.node_graph = Tensor::empty({N}, DType::I32);
  std::vector<int64_t> src, dst;
  src.reserve(size_t(2 * E)), dst.reserve(size_t(2 * E));
  b.edges = Tensor::empty({E, 2}, DType::I64);
  int64_t* be = b.edges.i64();
  for (int64_t g = 0; g < G; ++g) {
    const ModelGraph& m = *graphs[size_t(g)];
    const int64_t off = ptr[size_t(g)], n = m.num_nodes();
    if (n > 0) {  // (a --khops region of a graph without configurable nodes holds none: no data pointers)
      std::memcpy(b.x.f32() + off * F, m.x.f32(), size_t(n * F) * sizeof(float));
      std::memcpy(b.opcode.i32() + off, m.opcode.i32(), size_t(n) * sizeof(int32_t));
    }
    std::fill(b.node_graph.i32() + off, b.node_graph.i32() + off + n, int32_t(g));
    const int64_t* e = m.edges.i64();
    for (int64_t i = 0; i < m.edges.size(0); ++i) {  // row [u, v]: u consumes v; messages both ways
      *be++ = off + e[2 * i], *be++ = off + e[2 * i + 1];
      src.push_back(off + e[2 * i + 1]), dst.push_back(off + e[2 * i]);
      src.push_back(off + e[2 * i]), dst.push_back(off + e[2 * i + 1]);
    }
  }
  b.graph = Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), N, "batch edges");

  if (!layout) {
    const int64_t B = graphs[0]->config.size(1);
    b.config_feat = Tensor::empty({G * C, B}, DType::F32);
    // B is 0 where preprocessing kept no config column (every one constant over the train split).
    for (int64_t g = 0; g < G && B > 0; ++g)
      for (int64_t c = 0; c < C; ++c)
        std::memcpy(b.config_feat.f32() + (g * C + c) * B,
                    graphs[size_t(g)]->config.f32() + configs[size_t(g)][size_t(c)] * B, size_t(B) * sizeof(float));
  } else {
    const int64_t D = kLayoutConfigFeatures;
    b.node_config = Tensor::zeros({N, C * D}, DType::F32);
    b.config_nodes = Tensor::empty({K}, DType::I32);
    std::vector<int64_t> cptr{0};
    for (int64_t g = 0, k = 0; g < G; ++g) {
      const ModelGraph& m = *graphs[size_t(g)];
      const int64_t nc = m.config_nodes.numel();
      for (int64_t j = 0; j < nc; ++j, ++k) {
        const int64_t v = ptr[size_t(g)] + m.config_nodes.i64()[j];
        b.config_nodes.i32()[k] = int32_t(v);
        for (int64_t c = 0; c < C; ++c)
          std::memcpy(b.node_config.f32() + v * C * D + c * D,
                      m.config.f32() + (configs[size_t(g)][size_t(c)] * nc + j) * D, size_t(D) * sizeof(float));
      }
      cptr.push_back(cptr.back() + nc);
    }
    b.config_ptr = Tensor::from_vector(cptr);
  }
  // The recipe-only features, as the first graph lists them: per node stacked, per config gathered.
  for (const auto& [f, first] : graphs[0]->features.values) {
    std::vector<int64_t> shape = first.shape().vec();
    shape[0] = f->rows == GraphFeature::Rows::kPerNode ? N : G * C;
    Tensor t = Tensor::empty(Shape(shape), first.dtype());
    size_t row = dtype_size(first.dtype());  // (from the shape: graph 0 may have no rows, a layout graph
    for (size_t d = 1; d < shape.size(); ++d) row *= size_t(shape[d]);  // without configurable nodes)
    char* o = static_cast<char*>(t.data());
    for (int64_t g = 0; g < G; ++g) {
      const ModelGraph& m = *graphs[size_t(g)];
      const Tensor& v = m.feature(*f);
      GNN_CHECK(v.dtype() == first.dtype() && size_t(v.nbytes()) == row * size_t(v.size(0)), "make_batch: feature '",
                f->name, "' of ", m.file.id(), " is ", v.desc(), ", graph 0's ", first.desc());
      const char* src = static_cast<const char*>(v.data());
      if (f->rows == GraphFeature::Rows::kPerNode) {
        if (v.nbytes() > 0) std::memcpy(o + size_t(ptr[size_t(g)]) * row, src, size_t(v.nbytes()));
      } else {
        for (int64_t c = 0; c < C && row > 0; ++c)
          std::memcpy(o + size_t(g * C + c) * row, src + size_t(configs[size_t(g)][size_t(c)]) * row, row);
      }
    }
    b.features.values.emplace_back(f, std::move(t));
  }
  if (targets) {
    b.target = Tensor::empty({G * C}, DType::F64);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t c = 0; c < C; ++c)
        b.target.f64()[g * C + c] = graphs[size_t(g)]->target[size_t(configs[size_t(g)][size_t(c)])];
  }
  b.config_ids = Tensor::empty({G * C}, DType::I64);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < C; ++c) b.config_ids.i64()[g * C + c] = configs[size_t(g)][size_t(c)];
  std::vector<int64_t> gp(static_cast<size_t>(G + 1));
  for (int64_t g = 0; g <= G; ++g) gp[size_t(g)] = g * C;
  b.group_ptr = Tensor::from_vector(gp);
  if (segment > 0 && N > 0) {
    GNN_CHECK(can_draw, "make_batch: segment training needs an rng");
    bool any = false;
    for (int64_t g = 0; g < G; ++g) any = any || ptr[size_t(g) + 1] - ptr[size_t(g)] > segment;
    if (any) {
      b.keep_grad = Tensor::zeros({N}, DType::U8);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = ptr[size_t(g) + 1] - ptr[size_t(g)];
        const int64_t lo = n > segment ? below(g, n - segment + 1) : 0;
        std::fill(b.keep_grad.u8() + ptr[size_t(g)] + lo, b.keep_grad.u8() + ptr[size_t(g)] + lo + std::min(n, segment),
                  1);
      }
    }
  }
  return b;
}

}  // namespace

Batch make_batch(const std::vector<const ModelGraph*>& graphs, const std::vector<std::vector<int64_t>>& configs,
                 int64_t segment, Rng* rng) {
  return assemble(graphs, configs, segment, rng != nullptr,
                  [&](int64_t, int64_t n) { return int64_t(rng->below(uint64_t(n))); });
}

Batch make_batch(const std::vector<const ModelGraph*>& graphs, const std::vector<std::vector<int64_t>>& configs,
                 int64_t segment, std::vector<Rng>& graph_rngs) {
  GNN_CHECK(graph_rngs.size() == graphs.size(), "make_batch: ", graph_rngs.size(), " generators for ", graphs.size(),
            " graphs");
  return assemble(graphs, configs, segment, true,
                  [&](int64_t g, int64_t n) { return int64_t(graph_rngs[size_t(g)].below(uint64_t(n))); });
}

}  // namespace gnn::train
