#include "nn/conv.h"

namespace gnn::nn {

GINConv::GINConv(const std::vector<int64_t>& mlp_dims, Rng& rng, bool train_eps, double eps0)
    : mlp_(mlp_dims, Act::kRelu, rng) {
  Tensor e = Tensor::full(Shape{1}, eps0, DType::F32);
  eps = train_eps ? add_param("eps", e) : ag::Var(e);
  add_child("mlp", &mlp_);
}

ag::Var GINConv::forward(const Graph& g, const ag::Var& x) {
  ag::Var one(Tensor::full(Shape{1}, 1.0, x.dtype(), x.device()));
  const ag::Var e = eps.dtype() == x.dtype() && eps.device() == x.device()
                        ? eps
                        : ag::Var(eps.value().on(Device::cpu()).astype(x.dtype()).on(x.device()));
  ag::Var self = ag::scale_by(x, ag::add(one, e));
  return mlp_.forward(ag::spmm_plus(g, x, Reduce::kSum, self));  // self + the neighbours' sum
}

}  // namespace gnn::nn
