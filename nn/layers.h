// Dense layers: Linear, Embedding, MLP, Dropout, LayerNorm, GraphInstanceNorm.
// Weights are stored [in, out] so y = x W + b needs no transpose.
#pragma once
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "nn/module.h"

namespace gnn::nn {

class Linear : public Module {
 public:
  // weight [in, out] by `init` (kaiming: torch's default; glorot: PyG's convolutions), bias [out] zeros
  // for glorot, U(-1/sqrt(in), 1/sqrt(in)) for kaiming, as the two libraries do.
  Linear(int64_t in, int64_t out, Rng& rng, bool bias = true, Init init = Init::kKaiming);
  ag::Var forward(const ag::Var& x) const;
  // act(x W + b), the bias and activation in one epilogue (ag::bias_act)
  ag::Var forward(const ag::Var& x, Act act, double slope = 0.01) const;
  // The layer on per_config(join_configs(node, config, C)) without building the join: node [N, A] times
  // the weight's first A rows once per node, config [N, C*B] times the other B rows per config, the two
  // added for each config (and the bias). Returns node-major [N, C*out]; equal to the joined product up to
  // the order of the sums (the node part's and the config part's are added last).
  ag::Var forward_joined(const ag::Var& node, const ag::Var& config, int64_t C) const;
  // The same when the config part differs between configs on K of the N rows only (a layout config sets
  // the configurable nodes): config [K, C*B] is theirs, constant [1, B] what every other row has for every
  // config, and rows (i32 [N], on the host) maps each row to its row of config, or to K for the constant.
  // The constant's product is computed once rather than (N - K) * C times; the same function as
  // forward_joined on the full config part, up to the order of the gradient sums (the weight's, the bias's
  // and the constant's); on a GPU the constant's product may also round differently (cuBLAS picks its
  // kernel by the row count).
  ag::Var forward_joined_rows(const ag::Var& node, const ag::Var& config, const ag::Var& constant, const Tensor& rows,
                              int64_t C) const;
  // The layer on concat_cols({a, b}) [R, in], the concatenation never built (ag::matmul_cat): [R, out],
  // the same bits as forward(concat_cols({a, b}), act, slope) on the host (on a GPU, two cuBLAS products).
  ag::Var forward_cat(const ag::Var& a, const ag::Var& b, Act act = Act::kNone, double slope = 0.01) const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  ag::Var weight, bias;  // bias undefined without one

 private:
  int64_t in_, out_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Rng& rng);  // N(0, 1), as torch.nn.Embedding
  // With max_norm > 0, as torch.nn.Embedding(max_norm=...): the rows the index looks up are first
  // renormalised in place to an l2 norm of at most max_norm (ag::embedding_renorm_), in training and
  // in eval alike, so the weight itself changes. (const as every forward: the Var is a handle, and
  // what it writes through is the parameter's storage, as an optimiser step does.)
  ag::Var forward(const Tensor& index) const {
    if (max_norm > 0) ag::embedding_renorm_(weight, index, max_norm);
    return ag::embedding(weight, index);
  }
  ag::Var weight;
  double max_norm = 0;  // 0: a plain lookup
};

// (x - mean) / (std + eps) per column, with mean and std trainable (ag::standardize), started from the
// given statistics: the 6th place TpuGraphs solution's in-forward standardisation of its features.
class Standardize : public Module {
 public:
  Standardize(const std::vector<double>& mean, const std::vector<double>& std, double eps = 1e-4);
  ag::Var forward(const ag::Var& x) const { return ag::standardize(x, mean, std, eps); }
  ag::Var mean, std;
  double eps;
};

class Dropout : public Module {
 public:
  Dropout(double p, Rng& rng) : p_(p), rng_(rng.split()) {}
  ag::Var forward(const ag::Var& x) { return ag::dropout(x, p_, rng_, training()); }

 private:
  double p_;
  Rng rng_;
};

// dims = {in, hidden..., out}: Linear layers with `act` (and dropout p) between them, none after the last.
class MLP : public Module {
 public:
  MLP(const std::vector<int64_t>& dims, Act act, Rng& rng, double dropout = 0, Init init = Init::kKaiming);
  // Every layer but the last is followed by act (and dropout); the last by `last` (none by default, no dropout).
  ag::Var forward(const ag::Var& x, Act last = Act::kNone);

 private:
  std::vector<std::unique_ptr<Linear>> layers_;
  Act act_;
  Dropout drop_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t F, double eps = 1e-5);
  ag::Var forward(const ag::Var& x) const { return ag::layer_norm(x, weight, bias, eps_); }
  ag::Var weight, bias;

 private:
  double eps_;
};

// Normalises each graph's nodes per channel (graph_ptr i64 [G+1] over the rows of x).
class GraphInstanceNorm : public Module {
 public:
  explicit GraphInstanceNorm(int64_t F, double eps = 1e-5);
  ag::Var forward(const ag::Var& x, const Tensor& graph_ptr) const {
    return ag::instance_norm(x, weight, bias, graph_ptr, eps_);
  }
  ag::Var weight, bias;

 private:
  double eps_;
};

}  // namespace gnn::nn
