#include "nn/module.h"

#include <cmath>

namespace gnn::nn {

Tensor init_tensor(const Shape& shape, Init init, int64_t fan_in, int64_t fan_out, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.f32();
  const int64_t n = t.numel();
  double a = 0;
  switch (init) {
    case Init::kZeros:
      t.fill_(0);
      return t;
    case Init::kOnes:
      t.fill_(1);
      return t;
    case Init::kNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = float(rng.normal());
      return t;
    case Init::kGlorot:
      a = std::sqrt(6.0 / double(std::max<int64_t>(1, fan_in + fan_out)));
      break;
    case Init::kKaiming:
      a = 1.0 / std::sqrt(double(std::max<int64_t>(1, fan_in)));
      break;
  }
  for (int64_t i = 0; i < n; ++i) p[i] = float(rng.uniform(-a, a));
  return t;
}

ag::Var Module::add_param(std::string name, Tensor value) {
  for (const NamedParam& p : params_) GNN_CHECK(p.name != name, "parameter '", name, "' registered twice");
  params_.push_back({std::move(name), ag::Var::param(std::move(value))});
  return params_.back().var;
}

void Module::add_child(std::string name, Module* child) { children_.emplace_back(std::move(name), child); }

void Module::collect(const std::string& prefix, std::vector<NamedParam>& out) const {
  for (const NamedParam& p : params_) out.push_back({prefix + p.name, p.var});
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<NamedParam> Module::parameters() const {
  std::vector<NamedParam> out;
  collect("", out);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const NamedParam& p : parameters()) n += p.var.value().numel();
  return n;
}

void Module::zero_grad() const {
  for (const NamedParam& p : parameters()) p.var.zero_grad();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void cast_parameters(const Module& m, DType dtype) {
  for (const NamedParam& p : m.parameters()) {
    p.var.set_value(p.var.value().astype(dtype));
    p.var.zero_grad();
  }
}

void move_parameters(const Module& m, Device device) {
  for (const NamedParam& p : m.parameters()) {
    p.var.set_value(p.var.value().on(device));
    p.var.zero_grad();
  }
}

}  // namespace gnn::nn
