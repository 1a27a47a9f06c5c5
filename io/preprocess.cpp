#include "io/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace gnn {

namespace {

// The 5th place solution's node feature reader (knshnb/kaggle-tpu-graph-5th-place at 3f2dfb8: src/dataset.py
// FeatureReader; the ranges are src/constants.py's, {column, lo, hi, logged}). Each listed column is mapped
// from its fixed range [lo, hi] onto [-1, 1], or, where it is long-tailed, read as log(x + 1 - lo) and left
// unscaled; a group's plain columns come first, then its logged ones, each in the table's order. The
// per-dimension group (nine properties of six dimensions, 54 values) is then cut into six rows of nine
// (which, after that reordering, are not the six dimensions: the original's reshape), and each row d is
// followed by the 14 convolution dimension numbers one-hot on d: 1 where the number equals d, never for
// d = 0, which the original skips. So 53 + 6 * (9 + 14) = 191 columns;
// the other element types and the six layout columns (134-139: the recipes read those raw) are dropped.
// A value below a logged column's lo (none in the release's files) reads as lo: the original's log is
// negative there, and -inf or NaN at or below lo - 1. A dimension number outside 0-5, which the
// original's indexing would reject or wrap, is an error.
struct FifthColumn {
  int32_t col;
  double lo, hi;
  bool log;
};
constexpr FifthColumn kFifthNormal[] = {
    {0, 0, 1, false},      {3, 0, 1, false},         {6, 0, 1, false},          {7, 0, 1, false},
    {10, 0, 1, false},     {13, 0, 1, false},        {15, 0, 1, false},         {18, 0, 1, false},
    {20, 0, 1, false},     {27, 0, 184320000, true}, {28, 1, 2949120000, true}, {29, 0, 3503, true},
    {30, 0, 35, false},    {43, 0, 1024, true},      {44, 1, 2097152, true},    {51, 0, 8, true},
    {52, 1, 16, true},     {59, 0, 127, true},       {60, 0, 16, true},         {67, -2, 8, true},
    {68, 0, 18, true},     {75, 0, 8, true},         {76, 1, 16, true},         {83, 0, 8, true},
    {84, 1, 16, true},     {91, 0, 3, false},        {92, 0, 5, false},         {107, 0, 3840, true},
    {108, 0, 3840, true},  {109, 0, 1024, true},     {110, 0, 119646, true},    {111, 0, 119646, true},
    {112, 0, 1024, true},  {113, 0, 1, false},       {114, 0, 1, false},        {115, 0, 5, false},
    {117, 0, 12375, true}, {118, 0, 196608, true},   {119, 0, 196614, true},    {120, 1, 805306400, true},
    {121, 0, 12, true},    {122, 0, 2048, true},     {123, 0, 33784, true},     {124, 1, 25887744, true},
    {125, 0, 1, false},    {126, 0, 64, true},       {127, -39, 448, true},     {128, 0, 1, false},
    {129, 0, 3072, true},  {130, 0, 1023, true},     {131, -24, 33784, true},   {132, 0, 25887744, true},
    {133, 0, 1, false}};
constexpr FifthColumn kFifthDims[] = {
    {21, 0, 184320000, true}, {22, 0, 184320000, true}, {23, 0, 184320000, true}, {24, 0, 184320000, true},
    {25, 0, 184320000, true}, {26, 0, 184320000, true}, {31, 0, 5, false},        {32, 0, 5, false},
    {33, 0, 5, false},        {34, 0, 5, false},        {35, 0, 5, false},        {36, 0, 5, false},
    {37, 0, 512, true},       {38, 0, 512, true},       {39, 0, 512, true},       {40, 0, 512, true},
    {41, 0, 512, true},       {42, 0, 512, true},       {45, 0, 4, false},        {46, 0, 4, false},
    {47, 0, 4, false},        {48, 0, 4, false},        {49, 0, 4, false},        {50, 0, 4, false},
    {53, 0, 127, true},       {54, 0, 127, true},       {55, 0, 127, true},       {56, 0, 127, true},
    {57, 0, 127, true},       {58, 0, 127, true},       {61, -1, 4, false},       {62, -1, 4, false},
    {63, -1, 4, false},       {64, -1, 4, false},       {65, -1, 4, false},       {66, -1, 4, false},
    {69, 0, 4, false},        {70, 0, 4, false},        {71, 0, 4, false},        {72, 0, 4, false},
    {73, 0, 4, false},        {74, 0, 4, false},        {77, 0, 4, false},        {78, 0, 4, false},
    {79, 0, 4, false},        {80, 0, 4, false},        {81, 0, 4, false},        {82, 0, 4, false},
    {85, 0, 1, false},        {86, 0, 1, false},        {87, 0, 1, false},        {88, 0, 1, false},
    {89, 0, 1, false},        {90, 0, 1, false}};
constexpr int32_t kFifthDimNumbers[] = {93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106};
constexpr int64_t kFifthIn = 140, kFifthRank = 6;
enum FifthOp : uint8_t { kAffine, kLog, kOneHot };

struct FifthMap {
  std::vector<int32_t> keep;
  std::vector<double> shift, scale;
  std::vector<uint8_t> op;
  void add(int32_t col, double shift_, double scale_, FifthOp o) {
    keep.push_back(col), shift.push_back(shift_), scale.push_back(scale_), op.push_back(o);
  }
  // (x - lo) / (hi - lo) * 2 - 1 as (x - mid) * scale, or log(x - (lo - 1))
  void add(const FifthColumn& c) {
    if (c.log) add(c.col, c.lo - 1, 1, kLog);
    else add(c.col, (c.lo + c.hi) / 2, 2 / (c.hi - c.lo), kAffine);
  }
};

FifthMap fifth_place_map() {
  FifthMap m;
  for (bool logged : {false, true})
    for (const FifthColumn& c : kFifthNormal)
      if (c.log == logged) m.add(c);
  std::vector<FifthColumn> dims;
  for (bool logged : {false, true})
    for (const FifthColumn& c : kFifthDims)
      if (c.log == logged) dims.push_back(c);
  const size_t per_row = dims.size() / kFifthRank;
  for (int64_t d = 0; d < kFifthRank; ++d) {
    for (size_t k = 0; k < per_row; ++k) m.add(dims[size_t(d) * per_row + k]);
    for (int32_t col : kFifthDimNumbers) m.add(col, double(d), 1, kOneHot);
  }
  return m;
}

}  // namespace

FeatureTransform parse_feature_transform(const std::string& name) {
  if (name == "none") return FeatureTransform::kNone;
  if (name == "official") return FeatureTransform::kOfficial;
  if (name == "log1p") return FeatureTransform::kLog1p;
  if (name == "standardize") return FeatureTransform::kStandardize;
  if (name == "trainable") return FeatureTransform::kTrainable;
  if (name == "5th") return FeatureTransform::kFifthPlace;
  GNN_FAIL("unknown feature transform '", name, "' (none, official, log1p, standardize, trainable, 5th)");
}

const char* feature_transform_name(FeatureTransform t) {
  switch (t) {
    case FeatureTransform::kNone:
      return "none";
    case FeatureTransform::kOfficial:
      return "official";
    case FeatureTransform::kLog1p:
      return "log1p";
    case FeatureTransform::kStandardize:
      return "standardize";
    case FeatureTransform::kTrainable:
      return "trainable";
    case FeatureTransform::kFifthPlace:
      return "5th";
  }
  return "?";
}

void ColumnStats::add(const Tensor& x) {
  check_tensor(x, "feature matrix", DType::F32, 2);
  const int64_t rows = x.size(0), F = x.size(1);
  if (min_.empty()) {
    min_.assign(size_t(F), std::numeric_limits<double>::infinity());
    max_.assign(size_t(F), -std::numeric_limits<double>::infinity());
    sum_.assign(size_t(F), 0), sumsq_.assign(size_t(F), 0);
  }
  GNN_CHECK(F == columns(), "feature matrix has ", F, " columns, earlier ones had ", columns());
  const float* p = x.f32();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double v = p[r * F + j];
      min_[size_t(j)] = std::min(min_[size_t(j)], v), max_[size_t(j)] = std::max(max_[size_t(j)], v);
      sum_[size_t(j)] += v, sumsq_[size_t(j)] += v * v;
    }
  }
  rows_ += rows;
}

void ColumnStats::merge(const ColumnStats& o) {
  if (o.min_.empty()) return;
  if (min_.empty()) {
    *this = o;
    return;
  }
  GNN_CHECK(o.columns() == columns(), "ColumnStats::merge: ", o.columns(), " columns into ", columns());
  for (size_t j = 0; j < min_.size(); ++j) {
    min_[j] = std::min(min_[j], o.min_[j]), max_[j] = std::max(max_[j], o.max_[j]);
    sum_[j] += o.sum_[j], sumsq_[j] += o.sumsq_[j];
  }
  rows_ += o.rows_;
}

std::vector<double> ColumnStats::pack() const {
  std::vector<double> out = {double(rows_), double(min_.size())};
  for (const std::vector<double>* v : {&min_, &max_, &sum_, &sumsq_}) out.insert(out.end(), v->begin(), v->end());
  return out;
}

ColumnStats ColumnStats::unpack(const std::vector<double>& p) {
  GNN_CHECK(p.size() >= 2 && p[1] >= 0 && p.size() == 2 + 4 * size_t(p[1]), "ColumnStats::unpack: ", p.size(),
            " values do not hold packed statistics");
  ColumnStats s;
  s.rows_ = int64_t(p[0]);
  const size_t F = size_t(p[1]);
  std::vector<double>* parts[] = {&s.min_, &s.max_, &s.sum_, &s.sumsq_};
  for (size_t k = 0; k < 4; ++k)
    parts[k]->assign(p.begin() + 2 + std::ptrdiff_t(k * F), p.begin() + 2 + std::ptrdiff_t((k + 1) * F));
  return s;
}

ColumnTransform::ColumnTransform(FeatureTransform kind, const ColumnStats& s) : kind_(kind), in_(s.columns()) {
  if (kind == FeatureTransform::kFifthPlace) {  // fixed ranges: the statistics only say the width
    GNN_CHECK(s.rows() == 0 || s.columns() == kFifthIn, "the '5th' feature transform reads TpuGraphs' ", kFifthIn,
              " node feature columns; these rows have ", s.columns());
    FifthMap m = fifth_place_map();
    in_ = kFifthIn, keep_ = std::move(m.keep), shift_ = std::move(m.shift), scale_ = std::move(m.scale);
    op_ = std::move(m.op);
    return;
  }
  GNN_CHECK(s.rows() > 0 || kind == FeatureTransform::kNone || kind == FeatureTransform::kLog1p, "cannot fit the '",
            feature_transform_name(kind), "' transform on no training rows");
  for (int64_t j = 0; j < in_; ++j) {
    const size_t c = size_t(j);
    double shift = 0, scale = 1;
    if (kind == FeatureTransform::kOfficial) {
      if (s.max_[c] == s.min_[c]) continue;  // constant on train: dropped
      shift = s.min_[c], scale = 1.0 / (s.max_[c] - s.min_[c]);
    } else if (kind == FeatureTransform::kStandardize) {
      const double mean = s.sum_[c] / double(s.rows_);
      const double var = std::max(0.0, s.sumsq_[c] / double(s.rows_) - mean * mean);
      shift = mean, scale = var > 0 ? 1.0 / std::sqrt(var) : 0.0;
    } else if (kind == FeatureTransform::kTrainable) {  // the statistics themselves, for the model
      // (a constant column exactly: its value and 0, where the sums could leave a rounding)
      const double mean = s.max_[c] == s.min_[c] ? s.min_[c] : s.sum_[c] / double(s.rows_);
      const double var = s.max_[c] == s.min_[c] ? 0.0 : std::max(0.0, s.sumsq_[c] / double(s.rows_) - mean * mean);
      shift = mean, scale = std::sqrt(var);
    }
    keep_.push_back(int32_t(j)), shift_.push_back(shift), scale_.push_back(scale);
  }
}

Tensor ColumnTransform::apply(const Tensor& x) const {
  check_tensor(x, "feature matrix", DType::F32, 2);
  if (in_ < 0 || kind_ == FeatureTransform::kTrainable) {
    GNN_CHECK(in_ < 0 || x.size(1) == in_, "feature transform fitted on ", in_, " columns, applied to ", x.size(1));
    return x.clone();
  }
  GNN_CHECK(x.size(1) == in_, "feature transform fitted on ", in_, " columns, applied to ", x.size(1));
  const int64_t rows = x.size(0), F = out_features();
  const float* p = x.f32();
  if (kind_ == FeatureTransform::kFifthPlace)
    for (int32_t c : kFifthDimNumbers)
      for (int64_t r = 0; r < rows; ++r) {
        const float v = p[r * in_ + c];
        GNN_CHECK(v > -1.0f && v < float(kFifthRank), "node feature column ", c,
                  " (a convolution dimension number) is ", v, " in row ", r,
                  ": the '5th' transform one-hot encodes dimension numbers 0-", kFifthRank - 1);
      }
  Tensor y = Tensor::empty({rows, F}, DType::F32);
  float* q = y.f32();
  const bool log = kind_ == FeatureTransform::kLog1p;
#pragma omp parallel for schedule(static) if (rows * F > 100000)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      double v = p[r * in_ + keep_[size_t(j)]];
      const uint8_t op = op_.empty() ? uint8_t(kAffine) : op_[size_t(j)];
      if (op == kLog) {  // log(x + 1 - lo), x below lo read as lo
        q[r * F + j] = float(std::log(std::max(v - shift_[size_t(j)], 1.0)));
      } else if (op == kOneHot) {  // the original's int32 cast truncates
        const int64_t d = int64_t(v);
        q[r * F + j] = d != 0 && double(d) == shift_[size_t(j)] ? 1.0f : 0.0f;
      } else {
        if (log) v = std::copysign(std::log1p(std::fabs(v)), v);
        q[r * F + j] = float((v - shift_[size_t(j)]) * scale_[size_t(j)]);
      }
    }
  }
  return y;
}

void ColumnTransform::save(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  out.emplace_back(prefix + "kind", Tensor::from_vector<int32_t>({int32_t(kind_)}));
  out.emplace_back(prefix + "in_features", Tensor::from_vector<int64_t>({in_}));
  out.emplace_back(prefix + "keep", Tensor::from_vector(keep_));
  out.emplace_back(prefix + "shift", Tensor::from_vector(shift_));
  out.emplace_back(prefix + "scale", Tensor::from_vector(scale_));
}

ColumnTransform ColumnTransform::load(const std::string& prefix, const std::map<std::string, Tensor>& a) {
  // Each array as save() writes it (dtype, one dimension), checked before any value is converted: a
  // damaged checkpoint is refused by name, never cast out of range.
  auto get = [&](const char* k, DType dtype, int64_t numel) -> const Tensor& {
    auto it = a.find(prefix + k);
    GNN_CHECK(it != a.end(), "checkpoint has no '", prefix, k, "'");
    GNN_CHECK(it->second.dtype() == dtype && it->second.dim() == 1 && (numel < 0 || it->second.numel() == numel),
              "checkpoint: '", prefix, k, "' is ", it->second.desc(), ", not the ", dtype_name(dtype), " vector it writes");
    return it->second;
  };
  ColumnTransform t;
  const int32_t kind = get("kind", DType::I32, 1).i32()[0];
  GNN_CHECK(kind >= 0 && kind <= int32_t(FeatureTransform::kFifthPlace), "checkpoint: bad transform kind ", kind);
  t.kind_ = FeatureTransform(kind);
  t.in_ = get("in_features", DType::I64, 1).i64()[0];
  // (-1: a transform never fitted, as a layout run's config transform)
  GNN_CHECK(t.in_ >= -1 && t.in_ <= (int64_t(1) << 31), "checkpoint: '", prefix, "in_features' is ", t.in_);
  t.keep_ = get("keep", DType::I32, -1).to_vector<int32_t>();
  t.shift_ = get("shift", DType::F64, -1).to_vector<double>();
  t.scale_ = get("scale", DType::F64, -1).to_vector<double>();
  GNN_CHECK(t.keep_.size() == t.shift_.size() && t.keep_.size() == t.scale_.size(), "checkpoint: transform '", prefix,
            "' has keep/shift/scale of different lengths");
  for (int32_t j : t.keep_) GNN_CHECK(j >= 0 && j < t.in_, "checkpoint: transform '", prefix, "' keeps column ", j);
  for (size_t j = 0; j < t.shift_.size(); ++j)
    GNN_CHECK(std::isfinite(t.shift_[j]) && std::isfinite(t.scale_[j]), "checkpoint: transform '", prefix,
              "' has a non-finite shift or scale at ", j);
  if (t.kind_ == FeatureTransform::kTrainable) {  // the identity on every column
    bool all = int64_t(t.keep_.size()) == t.in_;
    for (size_t j = 0; all && j < t.keep_.size(); ++j) all = t.keep_[j] == int32_t(j);
    GNN_CHECK(all, "checkpoint: transform '", prefix, "' is trainable but does not keep every column in order");
  }
  if (t.kind_ == FeatureTransform::kFifthPlace) {  // the fixed map again, its ops with it
    FifthMap m = fifth_place_map();
    GNN_CHECK(t.in_ == kFifthIn && t.keep_ == m.keep && t.shift_ == m.shift && t.scale_ == m.scale,
              "checkpoint: transform '", prefix, "' is the 5th place's reader but not its columns and ranges");
    t.op_ = std::move(m.op);
  }
  return t;
}

// ---- pruning -------------------------------------------------------------------------------------

HopDirection parse_hop_direction(const std::string& s) {
  if (s == "both") return HopDirection::kBoth;
  if (s == "consumers") return HopDirection::kConsumers;
  GNN_FAIL("unknown hop direction '", s, "' (both, consumers)");
}

RegionEdges parse_region_edges(const std::string& s) {
  if (s == "all") return RegionEdges::kAll;
  if (s == "configurable") return RegionEdges::kConfigurable;
  GNN_FAIL("unknown region edges '", s, "' (all, configurable)");
}

TpuGraph prune_to_configurable(const TpuGraph& g, int k, std::vector<int64_t>* kept_out, HopDirection dir,
                               RegionEdges which) {
  if (!g.layout || k < 0) {
    if (kept_out) {
      kept_out->resize(size_t(g.num_nodes()));
      for (int64_t v = 0; v < g.num_nodes(); ++v) (*kept_out)[size_t(v)] = v;
    }
    return g;
  }
  const int64_t n = g.num_nodes(), E = g.num_edges();
  const Graph csr = Graph::from_edge_index(g.edge_index, n, EdgeColumns::kDstSrc, g.path + ": edge_index");
  std::vector<int32_t> depth(size_t(n), -1), frontier;
  for (int64_t i = 0; i < g.node_config_ids.numel(); ++i) {
    const int64_t v = g.node_config_ids.i64()[i];
    depth[size_t(v)] = 0, frontier.push_back(int32_t(v));
  }
  // Breadth-first: CSR rows hold a node's inputs, CSC rows its consumers.
  const int32_t *rp = csr.csr_indptr.i32(), *ri = csr.csr_indices.i32();
  const int32_t *cp = csr.csc_indptr.i32(), *ci = csr.csc_indices.i32();
  const bool inputs = dir == HopDirection::kBoth;
  for (int d = 1; d <= k && !frontier.empty(); ++d) {
    std::vector<int32_t> next;
    for (int32_t v : frontier) {
      for (int32_t p = rp[v]; inputs && p < rp[v + 1]; ++p)
        if (depth[size_t(ri[p])] < 0) depth[size_t(ri[p])] = d, next.push_back(ri[p]);
      for (int32_t q = cp[v]; q < cp[v + 1]; ++q)
        if (depth[size_t(ci[q])] < 0) depth[size_t(ci[q])] = d, next.push_back(ci[q]);
    }
    frontier.swap(next);
  }
  std::vector<int64_t> new_id(size_t(n), -1), kept;
  for (int64_t v = 0; v < n; ++v)
    if (depth[size_t(v)] >= 0) new_id[size_t(v)] = int64_t(kept.size()), kept.push_back(v);
  const int64_t m = int64_t(kept.size());

  TpuGraph out = g;
  out.node_feat = Tensor::empty({m, kNodeFeatures}, DType::F32);
  out.node_opcode = Tensor::empty({m}, DType::I32);
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(g.node_feat.f32() + kept[size_t(i)] * kNodeFeatures, kNodeFeatures,
                out.node_feat.f32() + i * kNodeFeatures);
    out.node_opcode.i32()[i] = g.node_opcode.i32()[kept[size_t(i)]];
  }
  std::vector<int64_t> edges;
  const int64_t* ei = g.edge_index.i64();
  const bool configurable_end = which == RegionEdges::kConfigurable;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t u = new_id[size_t(ei[2 * e])], v = new_id[size_t(ei[2 * e + 1])];
    if (u < 0 || v < 0) continue;
    if (configurable_end && depth[size_t(ei[2 * e])] != 0 && depth[size_t(ei[2 * e + 1])] != 0) continue;
    edges.push_back(u), edges.push_back(v);
  }
  out.edge_index = Tensor::from_vector(edges, Shape{int64_t(edges.size() / 2), 2});
  out.node_config_ids = Tensor::empty({g.node_config_ids.numel()}, DType::I64);
  for (int64_t i = 0; i < g.node_config_ids.numel(); ++i)
    out.node_config_ids.i64()[i] = new_id[size_t(g.node_config_ids.i64()[i])];
  // A split boundary b becomes the number of kept nodes below b.
  out.node_splits = Tensor::empty(g.node_splits.shape(), DType::I64);
  for (int64_t i = 0; i < g.node_splits.numel(); ++i) {
    const int64_t b = g.node_splits.i64()[i];
    out.node_splits.i64()[i] = int64_t(std::lower_bound(kept.begin(), kept.end(), b) - kept.begin());
  }
  if (kept_out) *kept_out = std::move(kept);
  return out;
}

// ---- duplicate configs ---------------------------------------------------------------------------

std::vector<int64_t> distinct_configs(const TpuGraph& g) {
  const Tensor& f = g.layout ? g.node_config_feat : g.config_feat;
  const int64_t C = g.num_configs(), row = f.numel() / std::max<int64_t>(C, 1);
  const size_t row_bytes = size_t(row) * sizeof(float);
  const auto* base = reinterpret_cast<const unsigned char*>(f.f32());
  std::vector<uint64_t> hash(static_cast<size_t>(C));
#pragma omp parallel for schedule(static) if (C * row > 100000)
  for (int64_t c = 0; c < C; ++c) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the row's bytes
    for (size_t b = 0; b < row_bytes; ++b) h = (h ^ base[size_t(c) * row_bytes + b]) * 1099511628211ull;
    hash[size_t(c)] = h;
  }
  auto runtime = [&](int64_t c) { return g.has_runtimes() ? g.config_runtime.f64()[c] : 0.0; };
  std::unordered_multimap<uint64_t, int64_t> first;  // hash -> the representative of each distinct row
  std::vector<int64_t> keep;
  for (int64_t c = 0; c < C; ++c) {
    bool merged = false;
    auto range = first.equal_range(hash[size_t(c)]);
    for (auto it = range.first; it != range.second; ++it) {
      const int64_t r = it->second;
      const int64_t rep = keep[size_t(r)];
      // (row_bytes 0: a layout graph without configurable nodes, every config alike, base null)
      if (row_bytes == 0 || std::memcmp(base + size_t(rep) * row_bytes, base + size_t(c) * row_bytes, row_bytes) == 0) {
        if (runtime(c) < runtime(rep)) keep[size_t(r)] = c;
        merged = true;
        break;
      }
    }
    if (!merged) first.emplace(hash[size_t(c)], int64_t(keep.size())), keep.push_back(c);
  }
  std::sort(keep.begin(), keep.end());
  return keep;
}

TpuGraph select_configs(const TpuGraph& g, const std::vector<int64_t>& configs) {
  TpuGraph out = g;
  (g.layout ? out.node_config_feat : out.config_feat) = gather_config_feat(g, configs);
  auto gather_f64 = [&](const Tensor& t) {
    Tensor o = Tensor::empty({int64_t(configs.size())}, DType::F64);
    for (size_t i = 0; i < configs.size(); ++i) o.f64()[i] = t.f64()[configs[i]];
    return o;
  };
  if (g.has_runtimes()) out.config_runtime = gather_f64(g.config_runtime);
  if (!g.layout) out.config_runtime_normalizers = gather_f64(g.config_runtime_normalizers);
  return out;
}

// ---- the whole step ------------------------------------------------------------------------------

uint64_t PreprocessedGraph::bytes() const {
  uint64_t b = graph.bytes() + features.nbytes();
  for (const Tensor* t :
       {&csr.csr_indptr, &csr.csr_indices, &csr.csr_eid, &csr.csc_indptr, &csr.csc_indices, &csr.csc_to_csr})
    b += t->nbytes();
  return b + (original_config.size() + original_node.size()) * sizeof(int64_t);
}

PreprocessedGraph preprocess(const TpuGraph& g, const PreprocessOptions& options) {
  PreprocessedGraph p;
  p.graph = prune_to_configurable(g, options.khops, &p.original_node, options.khops_direction, options.khops_edges);
  if (options.dedup_configs) {
    p.original_config = distinct_configs(p.graph);
    p.graph = select_configs(p.graph, p.original_config);
  } else {
    p.original_config.resize(size_t(g.num_configs()));
    for (int64_t c = 0; c < g.num_configs(); ++c) p.original_config[size_t(c)] = c;
  }
  p.features = options.node_transform.apply(p.graph.node_feat);
  p.csr =
      Graph::from_edge_index(p.graph.edge_index, p.graph.num_nodes(), EdgeColumns::kDstSrc, g.path + ": edge_index");
  return p;
}

}  // namespace gnn
