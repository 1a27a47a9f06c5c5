#include "apps/planetoid.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <memory>
#include <vector>

#include "io/npz.h"
#include "nn/conv.h"
#include "nn/loss.h"
#include "nn/optim.h"

namespace gnn {

namespace {

Tensor require(const std::map<std::string, Tensor>& a, const std::string& path, const std::string& key, int ndim) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end(), path, ": no array '", key, "' (a Planetoid file has x_indptr, x_indices, x_data, x_shape, ",
            "edge_index, labels, idx_train, idx_val, idx_test)");
  GNN_CHECK(it->second.dim() == ndim, path, ": '", key, "' must have ", ndim, " dims, got ", it->second.desc());
  return it->second;
}

std::vector<int64_t> ints(const Tensor& t, const std::string& path, const std::string& key) {
  GNN_CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64 || t.dtype() == DType::U8, path, ": '", key,
            "' must hold integers, got ", t.desc());
  return t.astype(DType::I64).to_vector<int64_t>();
}

Tensor node_ids(const std::map<std::string, Tensor>& a, const std::string& path, const std::string& key, int64_t N) {
  std::vector<int32_t> out;
  std::vector<bool> seen(size_t(N), false);
  for (int64_t v : ints(require(a, path, key, 1), path, key)) {
    GNN_CHECK(v >= 0 && v < N, path, ": '", key, "' lists node ", v, ", outside [0, ", N, ")");
    GNN_CHECK(!seen[size_t(v)], path, ": '", key, "' lists node ", v, " twice");  // (it would count twice)
    seen[size_t(v)] = true;
    out.push_back(int32_t(v));
  }
  GNN_CHECK(!out.empty(), path, ": '", key, "' is empty");
  return Tensor::from_vector(out);
}

}  // namespace

PlanetoidData load_planetoid(const std::string& path) {
  const auto a = NpzReader(path).load_all();
  PlanetoidData d;
  d.path = path;
  const std::vector<int64_t> shape = ints(require(a, path, "x_shape", 1), path, "x_shape");
  GNN_CHECK(shape.size() == 2 && shape[0] > 0 && shape[1] > 0, path, ": 'x_shape' must be [N, F] with both positive");
  const int64_t N = shape[0], F = shape[1];
  const std::vector<int64_t> indptr = ints(require(a, path, "x_indptr", 1), path, "x_indptr");
  const std::vector<int64_t> indices = ints(require(a, path, "x_indices", 1), path, "x_indices");
  const Tensor data = require(a, path, "x_data", 1).astype(DType::F64);
  GNN_CHECK(int64_t(indptr.size()) == N + 1 && indptr[0] == 0 && indptr[size_t(N)] == int64_t(indices.size()) &&
                data.numel() == int64_t(indices.size()),
            path, ": x_indptr / x_indices / x_data do not form a CSR of ", N, " rows");
  // (every row's range checked before any is read: a pointer past the end and back read out of bounds)
  for (int64_t r = 0; r < N; ++r)
    GNN_CHECK(indptr[size_t(r)] <= indptr[size_t(r + 1)], path, ": x_indptr decreases at row ", r, " (",
              indptr[size_t(r)], " then ", indptr[size_t(r + 1)], ")");
  // (dense: Planetoid's features are a few thousand columns; a shape past memory is named, not a bare failure)
  GNN_CHECK(N <= INT64_MAX / 4 / F, path, ": 'x_shape' [", N, ", ", F, "] overflows a dense float matrix");
  try {
    d.x = Tensor::zeros(Shape{N, F}, DType::F32);
  } catch (const Error& e) {
    GNN_FAIL(path, ": 'x_shape' [", N, ", ", F, "] needs a dense feature matrix of ", N * F * 4, " bytes: ",
             e.message());
  }
  float* x = d.x.f32();
  std::vector<double> row(size_t(F), 0.0);  // a row summed and normalised in double, then stored as float
  for (int64_t r = 0; r < N; ++r) {
    double sum = 0;
    for (int64_t p = indptr[size_t(r)]; p < indptr[size_t(r + 1)]; ++p) {
      const int64_t c = indices[size_t(p)];
      const double v = data.f64()[p];
      GNN_CHECK(c >= 0 && c < F, path, ": x_indices holds column ", c, ", outside [0, ", F, ")");
      GNN_CHECK(std::isfinite(v), path, ": x_data holds a non-finite value in row ", r);
      row[size_t(c)] += v, sum += v;
    }
    GNN_CHECK(std::isfinite(sum), path, ": x_data's row ", r, " sums past the range of a double");
    for (int64_t p = indptr[size_t(r)]; p < indptr[size_t(r + 1)]; ++p) {
      const double v = row[size_t(indices[size_t(p)])];
      const float f = float(sum != 0 ? v / sum : v);
      // (1e39 is finite in double and infinite in float: the model would train on inf and NaN)
      GNN_CHECK(std::isfinite(f), path, ": x_data's row ", r, " does not fit float32",
                sum != 0 ? " once normalised to sum 1" : " (its values sum to 0, so they are kept as they are)");
      x[r * F + indices[size_t(p)]] = f;
    }
    for (int64_t p = indptr[size_t(r)]; p < indptr[size_t(r + 1)]; ++p) row[size_t(indices[size_t(p)])] = 0;
  }
  const Tensor ei = require(a, path, "edge_index", 2);
  GNN_CHECK(ei.size(1) == 2, path, ": 'edge_index' must be [E, 2], got ", ei.desc());
  const std::vector<int64_t> e = ints(ei, path, "edge_index");
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (size_t i = 0; i < e.size(); i += 2) {
    const int64_t u = e[i], v = e[i + 1];
    GNN_CHECK(u >= 0 && u < N && v >= 0 && v < N, path, ": edge_index row ", i / 2, " = (", u, ", ", v,
              ") is outside [0, ", N, ")");
    if (u != v) pairs.emplace_back(u, v), pairs.emplace_back(v, u);
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::vector<int64_t> src, dst;
  for (const auto& [u, v] : pairs) src.push_back(u), dst.push_back(v);
  d.graph = Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), N, path + " edge_index");
  const std::vector<int64_t> labels = ints(require(a, path, "labels", 1), path, "labels");
  GNN_CHECK(int64_t(labels.size()) == N, path, ": 'labels' has ", labels.size(), " entries for ", N, " nodes");
  std::vector<int32_t> lab;
  for (int64_t l : labels) {
    GNN_CHECK(l >= -1 && l < 100000, path, ": label ", l, " is not a class id (or -1 for an unlabelled node)");
    lab.push_back(int32_t(l));
    d.classes = std::max(d.classes, l + 1);
  }
  d.labels = Tensor::from_vector(lab);
  d.train = node_ids(a, path, "idx_train", N);
  d.val = node_ids(a, path, "idx_val", N);
  d.test = node_ids(a, path, "idx_test", N);
  // Each class id from 0 up is some node's (a stray id would add classes no node has), there are two or more,
  // and no node is in two splits (a validation or test node trained on would score what it learnt).
  std::vector<int64_t> per_class(size_t(std::max<int64_t>(d.classes, 0)), 0);
  for (int32_t l : lab)
    if (l >= 0) ++per_class[size_t(l)];
  for (size_t c = 0; c < per_class.size(); ++c)
    GNN_CHECK(per_class[c] > 0, path, ": 'labels' runs to class ", d.classes - 1, " but no node has class ", c,
              " (class ids are 0 to C - 1, each some node's)");
  GNN_CHECK(d.classes >= 2, path, ": 'labels' hold ", d.classes, " class", d.classes == 1 ? "" : "es",
            ": there is nothing to classify");
  std::vector<const char*> split_of(size_t(N), nullptr);
  for (const auto& [key, ids] :
       {std::pair{"idx_train", d.train}, std::pair{"idx_val", d.val}, std::pair{"idx_test", d.test}})
    for (int32_t v : ids.to_vector<int32_t>()) {
      GNN_CHECK(lab[size_t(v)] >= 0, path, ": '", key, "' lists node ", v, ", which has no label (-1)");
      GNN_CHECK(!split_of[size_t(v)], path, ": node ", v, " is in both '", split_of[size_t(v)], "' and '", key,
                "' (the splits must not share nodes)");
      split_of[size_t(v)] = key;
    }
  return d;
}

namespace {

// The three published two-layer models. forward() returns logits [N, classes].
class Model : public nn::Module {
 public:
  virtual ag::Var forward(const Graph& g, const ag::Var& x) = 0;
  // Parameter groups: PyG's GCN example decays only the first layer; the others decay everything.
  virtual std::vector<nn::ParamGroup> groups(double wd) const { return nn::one_group(parameters(), wd); }
};

class Gcn : public Model {
 public:
  Gcn(int64_t F, int64_t H, int64_t C, double p, Rng& rng) : c1_(F, H, rng), c2_(H, C, rng), drop_(p, rng) {
    add_child("conv1", &c1_);
    add_child("conv2", &c2_);
    add_child("dropout", &drop_);
  }
  ag::Var forward(const Graph& g, const ag::Var& x) override {
    ag::Var h = ag::relu(c1_.forward(g, drop_.forward(x)));
    return c2_.forward(g, drop_.forward(h));
  }
  std::vector<nn::ParamGroup> groups(double wd) const override {
    std::vector<nn::ParamGroup> out(2);
    for (const nn::NamedParam& p : parameters()) (p.name.rfind("conv1.", 0) == 0 ? out[0] : out[1]).params.push_back(p);
    out[0].weight_decay = wd;
    return out;
  }

 private:
  nn::GCNConv c1_, c2_;
  nn::Dropout drop_;
};

class Gat : public Model {
 public:
  Gat(int64_t F, int64_t H, int64_t heads, int64_t C, double p, double pv, Rng& rng)
      : c1_(F, H, rng, {.heads = heads, .concat = true, .dropout = p, .value_dropout = pv}),
        c2_(H * heads, C, rng, {.heads = 1, .concat = false, .dropout = p, .value_dropout = pv}),
        drop_(p, rng) {
    add_child("conv1", &c1_);
    add_child("conv2", &c2_);
    add_child("dropout", &drop_);
  }
  ag::Var forward(const Graph& g, const ag::Var& x) override {
    ag::Var h = ag::elu(c1_.forward(g, drop_.forward(x)));
    return c2_.forward(g, drop_.forward(h));
  }

 private:
  nn::GATConv c1_, c2_;
  nn::Dropout drop_;
};

class Sage : public Model {
 public:
  Sage(int64_t F, int64_t H, int64_t C, double p, Rng& rng)
      : c1_(F, H, rng, {.act = Act::kRelu}), c2_(H, C, rng), drop_(p, rng) {
    add_child("conv1", &c1_);
    add_child("conv2", &c2_);
    add_child("dropout", &drop_);
  }
  ag::Var forward(const Graph& g, const ag::Var& x) override {
    return c2_.forward(g, drop_.forward(c1_.forward(g, drop_.forward(x))));
  }

 private:
  nn::SAGEConv c1_, c2_;
  nn::Dropout drop_;
};

double accuracy(const Tensor& logits, const Tensor& labels, const Tensor& rows) {
  const int64_t C = logits.size(1);
  const float* l = logits.f32();
  int64_t right = 0;
  for (int32_t r : rows.to_vector<int32_t>()) {
    const float* row = l + int64_t(r) * C;
    right += int64_t(std::max_element(row, row + C) - row) == labels.i32()[r];
  }
  return double(right) / double(rows.numel());
}

}  // namespace

PlanetoidResult train_planetoid(const PlanetoidData& d, const PlanetoidOptions& o,
                                const std::function<void(const PlanetoidEpoch&)>& on_epoch) {
  const bool gat = o.model == "gat";
  GNN_CHECK(o.model == "gcn" || gat || o.model == "sage", "unknown model '", o.model, "' (gcn, gat, sage)");
  GNN_CHECK(o.epochs >= 1, "epochs must be at least 1, got ", o.epochs);
  const double lr = o.lr >= 0 ? o.lr : gat ? 0.005 : 0.01;
  const double wd = o.weight_decay >= 0 ? o.weight_decay : 5e-4;
  const double p = o.dropout >= 0 ? o.dropout : gat ? 0.6 : 0.5;
  const double pv = o.value_dropout >= 0 ? o.value_dropout : gat ? p : 0;  // the GAT authors' code: the same rate
  const int64_t hidden = o.hidden > 0 ? o.hidden : gat ? 8 : 16, heads = o.heads > 0 ? o.heads : 8;
  const int64_t F = d.x.size(1), C = d.classes;
  Rng rng(o.seed);
  std::unique_ptr<Model> m;
  if (o.model == "gcn") m = std::make_unique<Gcn>(F, hidden, C, p, rng);
  else if (gat) m = std::make_unique<Gat>(F, hidden, heads, C, p, pv, rng);
  else m = std::make_unique<Sage>(F, hidden, C, p, rng);
  const Graph graph = d.graph.on(o.device);
  nn::move_parameters(*m, o.device);
  nn::Adam adam(m->groups(wd), lr);
  const ag::Var x(d.x.on(o.device));
  PlanetoidResult res;
  res.parameters = m->num_parameters();
  double best_val = -1, best_loss = INFINITY;
  int64_t since_progress = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    m->train();
    adam.zero_grad();
    ag::Var loss = nn::cross_entropy(m->forward(graph, x), d.labels, d.train);
    const double lv = loss.value().item();
    GNN_CHECK(std::isfinite(lv), "training diverged: the loss is ", lv, " at epoch ", epoch);
    ag::backward(loss);
    adam.step();
    m->eval();
    Tensor logits;
    double val_loss;
    {
      ag::NoGrad ng;
      logits = m->forward(graph, x).value();
      logits = logits.on(Device::cpu());  // one copy serves the loss and the accuracies
      val_loss = nn::cross_entropy(ag::Var(logits), d.labels, d.val).value().item();
    }
    const PlanetoidEpoch e{epoch,
                           lv,
                           accuracy(logits, d.labels, d.train),
                           accuracy(logits, d.labels, d.val),
                           accuracy(logits, d.labels, d.test),
                           val_loss};
    res.epochs_run = epoch;
    if (on_epoch) on_epoch(e);
    if (o.patience <= 0) {
      if (e.val_acc > best_val) {
        best_val = e.val_acc;
        res.train_acc = e.train_acc, res.val_acc = e.val_acc, res.test_acc = e.test_acc, res.best_epoch = epoch;
      }
      continue;
    }
    if (e.val_acc >= best_val || val_loss <= best_loss) {
      if (e.val_acc >= best_val && val_loss <= best_loss)
        res.train_acc = e.train_acc, res.val_acc = e.val_acc, res.test_acc = e.test_acc, res.best_epoch = epoch;
      best_val = std::max(best_val, e.val_acc), best_loss = std::min(best_loss, val_loss);
      since_progress = 0;
    } else if (++since_progress >= o.patience) {
      break;
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace gnn
