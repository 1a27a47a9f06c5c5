#include "nn/layers.h"

#include <cmath>

namespace gnn::nn {

Linear::Linear(int64_t in, int64_t out, Rng& rng, bool with_bias, Init init) : in_(in), out_(out) {
  GNN_CHECK(in >= 1 && out >= 1, "Linear: sizes must be positive, got ", in, " -> ", out);
  weight = add_param("weight", init_tensor(Shape{in, out}, init, in, out, rng));
  if (with_bias) {
    const Init bias_init = init == Init::kKaiming ? Init::kKaiming : Init::kZeros;
    bias = add_param("bias", init_tensor(Shape{out}, bias_init, in, out, rng));
  }
}

ag::Var Linear::forward(const ag::Var& x) const { return forward(x, Act::kNone); }

ag::Var Linear::forward(const ag::Var& x, Act act, double slope) const {
  GNN_CHECK(x.value().dim() == 2 && x.size(1) == in_, "Linear: expected [*, ", in_, "] input, got ", x.value().desc());
  if (bias.defined() && act == Act::kNone) return ag::matmul_bias(x, weight, bias);  // the bias in the GEMM's store
  const ag::Var y = ag::matmul(x, weight);
  if (bias.defined()) return ag::bias_act(y, bias, act, slope);
  return act == Act::kNone ? y : ag::activation(y, act, slope);
}

ag::Var Linear::forward_joined(const ag::Var& node, const ag::Var& config, int64_t C) const {
  const int64_t N = node.size(0), A = node.size(1);
  GNN_CHECK(C >= 1 && config.size(0) == N && config.size(1) % C == 0 && A + config.size(1) / C == in_,
            "Linear::forward_joined: node ", node.value().desc(), " and config ", config.value().desc(), " for ", C,
            " configs do not join into ", in_, " inputs");
  const int64_t B = config.size(1) / C;
  const ag::Var nothing(Tensor::empty(Shape{N, 0}, node.dtype(), node.device()));
  if (B == 0) return ag::join_configs(forward(node), nothing, C);
  // Node part [N, out], repeated for every config; config part [N*C, out] in node-major order.
  const ag::Var per_node = ag::matmul(node, ag::slice_rows(weight, 0, A));
  const ag::Var cfg = ag::reshape(config, N * C, B), w_cfg = ag::slice_rows(weight, A, in_);
  const ag::Var y = bias.defined() ? ag::matmul_bias(cfg, w_cfg, bias) : ag::matmul(cfg, w_cfg);
  return ag::join_configs(per_node, nothing, C, ag::reshape(y, N, C * out_));  // the join + y in one pass
}

ag::Var Linear::forward_joined_rows(const ag::Var& node, const ag::Var& config, const ag::Var& constant,
                                    const Tensor& rows, int64_t C) const {
  const int64_t N = node.size(0), A = node.size(1), K = config.size(0);
  GNN_CHECK(C >= 1 && constant.size(0) == 1 && config.size(1) == C * constant.size(1) && A + constant.size(1) == in_ &&
                rows.dim() == 1 && rows.size(0) == N,
            "Linear::forward_joined_rows: node ", node.value().desc(), ", config ", config.value().desc(),
            ", constant ", constant.value().desc(), " and rows ", rows.desc(), " for ", C, " configs do not join into ",
            in_, " inputs");
  const int64_t B = constant.size(1);
  const ag::Var nothing(Tensor::empty(Shape{N, 0}, node.dtype(), node.device()));
  const ag::Var per_node = ag::matmul(node, ag::slice_rows(weight, 0, A)), w_cfg = ag::slice_rows(weight, A, in_);
  auto product = [&](const ag::Var& x) {
    return bias.defined() ? ag::matmul_bias(x, w_cfg, bias) : ag::matmul(x, w_cfg);
  };
  // [K, C*out] for the listed rows, then the constant's one row repeated for the C configs as row K
  const ag::Var repeated =
      ag::reshape(ag::gather_rows(product(constant), Tensor::zeros(Shape{C}, DType::I32)), 1, C * out_);
  const ag::Var table =
      K ? ag::concat_rows({ag::reshape(product(ag::reshape(config, K * C, B)), K, C * out_), repeated}) : repeated;
  const ag::Var cfg = ag::gather_rows(table, rows);
  return ag::join_configs(per_node, nothing, C, cfg);
}

ag::Var Linear::forward_cat(const ag::Var& a, const ag::Var& b, Act act, double slope) const {
  GNN_CHECK(a.value().dim() == 2 && b.value().dim() == 2 && a.size(1) + b.size(1) == in_, "Linear: expected [*, ", in_,
            "] input as two parts, got ", a.value().desc(), " and ", b.value().desc());
  if (act == Act::kNone) return ag::matmul_cat(a, b, weight, bias);
  const ag::Var y = ag::matmul_cat(a, b, weight);
  return bias.defined() ? ag::bias_act(y, bias, act, slope) : ag::activation(y, act, slope);
}

Embedding::Embedding(int64_t num, int64_t dim, Rng& rng) {
  GNN_CHECK(num >= 1 && dim >= 1, "Embedding: sizes must be positive, got ", num, " x ", dim);
  weight = add_param("weight", init_tensor(Shape{num, dim}, Init::kNormal, num, dim, rng));
}

Standardize::Standardize(const std::vector<double>& m, const std::vector<double>& s, double eps) : eps(eps) {
  GNN_CHECK(!m.empty() && m.size() == s.size(), "Standardize: ", m.size(), " means and ", s.size(),
            " standard deviations; one of each per column");
  for (size_t f = 0; f < m.size(); ++f)
    GNN_CHECK(std::isfinite(m[f]) && std::isfinite(s[f]) && s[f] >= 0, "Standardize: column ", f, " has mean ", m[f],
              " and std ", s[f], " (finite, std >= 0)");
  const Shape shape{int64_t(m.size())};
  mean = add_param("mean", Tensor::from_vector(std::vector<float>(m.begin(), m.end()), shape));
  std = add_param("std", Tensor::from_vector(std::vector<float>(s.begin(), s.end()), shape));
}

MLP::MLP(const std::vector<int64_t>& dims, Act act, Rng& rng, double dropout, Init init)
    : act_(act), drop_(dropout, rng) {
  GNN_CHECK(dims.size() >= 2, "MLP: needs at least {in, out} sizes");
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    layers_.push_back(std::make_unique<Linear>(dims[i], dims[i + 1], rng, true, init));
    add_child("layers." + std::to_string(i), layers_.back().get());
  }
  add_child("dropout", &drop_);
}

ag::Var MLP::forward(const ag::Var& x, Act last) {
  ag::Var h = x;
  for (size_t i = 0; i + 1 < layers_.size(); ++i) h = drop_.forward(layers_[i]->forward(h, act_));
  return layers_.back()->forward(h, last);
}

LayerNorm::LayerNorm(int64_t F, double eps) : eps_(eps) {
  Rng unused;
  weight = add_param("weight", init_tensor(Shape{F}, Init::kOnes, F, F, unused));
  bias = add_param("bias", init_tensor(Shape{F}, Init::kZeros, F, F, unused));
}

GraphInstanceNorm::GraphInstanceNorm(int64_t F, double eps) : eps_(eps) {
  Rng unused;
  weight = add_param("weight", init_tensor(Shape{F}, Init::kOnes, F, F, unused));
  bias = add_param("bias", init_tensor(Shape{F}, Init::kZeros, F, F, unused));
}

}  // namespace gnn::nn
