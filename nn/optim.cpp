#include "nn/optim.h"

#include <cmath>

#include "autograd/dispatch.h"
#include "kernels/adam.h"

namespace gnn::nn {

std::vector<ParamGroup> one_group(const std::vector<NamedParam>& params, double weight_decay) {
  return {ParamGroup{params, weight_decay}};
}

std::vector<NamedParam> Optimizer::all_params() const {
  std::vector<NamedParam> out;
  for (const ParamGroup& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

void Optimizer::zero_grad() const {
  for (const NamedParam& p : all_params()) p.var.zero_grad();
}

namespace {

// Replaces each gradient by s times it (a new tensor: gradients are never written after hand-over).
void scale_all_grads(const std::vector<NamedParam>& params, double s) {
  for (const NamedParam& p : params) {
    if (!p.var.has_grad()) continue;
    const Device dev = p.var.grad().device();  // GPU gradients go through a host copy
    Tensor g = p.var.grad().on(Device::cpu()).astype(DType::F64).clone();
    for (int64_t i = 0; i < g.numel(); ++i) g.f64()[i] *= s;
    p.var.set_grad(g.astype(p.var.dtype()).on(dev));
  }
}

}  // namespace

void Optimizer::scale_grads(double s) const { scale_all_grads(all_params(), s); }

namespace {

// Calls fn(T*, const T* grad, n) for a parameter's value and gradient, f32 or f64.
template <class Fn>
void with_param(const NamedParam& p, Fn&& fn) {
  ag::dispatch_real("optimizer step", p.var.value(), [&](auto t) {
    using T = decltype(t);
    fn(ag::ptr<T>(p.var.value()), ag::ptr<T>(p.var.grad()), p.var.value().numel());
  });
}

void check_on_gpu(const char* opt, const NamedParam& p) {
  GNN_CHECK(p.var.dtype() == DType::F32 && p.var.grad().device() == p.var.value().device(), opt, ": ", p.name,
            " on the GPU must be f32 with its gradient there, got ", p.var.value().desc(), " and gradient ",
            p.var.grad().desc());
}

Tensor state_tensor(const std::map<std::string, Tensor>& s, const std::string& key, int64_t n) {
  auto it = s.find(key);
  GNN_CHECK(it != s.end(), "optimizer state: '", key, "' is missing");
  GNN_CHECK(it->second.numel() == n, "optimizer state: '", key, "' has ", it->second.numel(), " values, the parameter ", n);
  return it->second.astype(DType::F64).reshape({n}).clone();
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum) : Optimizer(std::move(groups), lr), momentum_(momentum) {}

void SGD::step() {
  for (const ParamGroup& g : groups_)
    for (const NamedParam& p : g.params) {
      if (!p.var.has_grad()) continue;
      const int64_t n = p.var.value().numel();
      Tensor& buf = buf_[p.name];
      const Device dev = p.var.value().device();
      const bool first = momentum_ != 0 && !buf.defined();  // torch: the first buffer is the gradient itself
      if (first) buf = Tensor::zeros(Shape{n}, DType::F64, dev);
      if (buf.defined()) buf = buf.on(dev);  // state loaded from a checkpoint, on the host
      const SgdStep step{lr_, momentum_, g.weight_decay, first};
      double* b = buf.defined() ? buf.f64() : nullptr;
      if (dev.is_cuda()) {
        check_on_gpu("SGD", p);
        if constexpr (kWithCuda) sgd_update_cuda(p.var.value().f32(), p.var.grad().f32(), b, n, step, p.var.value().stream());
        continue;
      }
      with_param(p, [&](auto* w, const auto* gr, int64_t n) { sgd_update_ref(w, gr, b, n, step); });
    }
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> SGD::state() const {
  std::vector<std::pair<std::string, Tensor>> out{{"step", Tensor::full(Shape{}, double(steps_), DType::I64)}};
  for (const auto& [name, t] : buf_)
    if (t.defined()) out.emplace_back(name + ".momentum_buffer", t);
  return out;
}

void SGD::load_state(const std::map<std::string, Tensor>& s) {
  // Everything is read and checked first: a bad state leaves the optimiser as it was.
  const int64_t steps = int64_t(state_tensor(s, "step", 1).f64()[0]);
  std::map<std::string, Tensor> buf;
  if (momentum_ != 0)
    for (const NamedParam& p : all_params())
      if (s.count(p.name + ".momentum_buffer"))
        buf[p.name] = state_tensor(s, p.name + ".momentum_buffer", p.var.value().numel());
  steps_ = steps;
  buf_.swap(buf);
}

Adam::Adam(std::vector<ParamGroup> groups, double lr, bool decoupled, double b1, double b2, double eps)
    : Optimizer(std::move(groups), lr), decoupled_(decoupled), b1_(b1), b2_(b2), eps_(eps) {}

void Adam::step() {
  for (const ParamGroup& g : groups_)
    for (const NamedParam& p : g.params) {
      if (!p.var.has_grad()) continue;
      const int64_t n = p.var.value().numel();
      Tensor& m = m_[p.name];
      Tensor& v = v_[p.name];
      const Device dev = p.var.value().device();
      if (!m.defined()) m = Tensor::zeros(Shape{n}, DType::F64, dev), v = Tensor::zeros(Shape{n}, DType::F64, dev);
      m = m.on(dev), v = v.on(dev);  // state loaded from a checkpoint, on the host
      const int64_t t = ++t_[p.name];
      const double c1 = 1 - std::pow(b1_, double(t)), c2 = 1 - std::pow(b2_, double(t));
      const double wd = g.weight_decay;
      const AdamStep step{lr_, b1_, b2_, eps_, wd, c1, c2, decoupled_};
      if (dev.is_cuda()) {  // the same update per element (kernels/adam.h), one launch per parameter
        check_on_gpu("Adam", p);
        if constexpr (kWithCuda)
          adam_update_cuda(p.var.value().f32(), p.var.grad().f32(), m.f64(), v.f64(), n, step, p.var.value().stream());
        continue;
      }
      with_param(p, [&](auto* w, const auto* gr, int64_t n) { adam_update_ref(w, gr, m.f64(), v.f64(), n, step); });
    }
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> Adam::state() const {
  std::vector<std::pair<std::string, Tensor>> out{{"step", Tensor::full(Shape{}, double(steps_), DType::I64)}};
  for (const auto& [name, m] : m_) {
    out.emplace_back(name + ".exp_avg", m.to(Device::cpu()));  // host copies for checkpoints
    out.emplace_back(name + ".exp_avg_sq", v_.at(name).to(Device::cpu()));
    out.emplace_back(name + ".step", Tensor::full(Shape{}, double(t_.at(name)), DType::I64));
  }
  return out;
}

void Adam::load_state(const std::map<std::string, Tensor>& s) {
  // Everything is read and checked first: a bad state leaves the optimiser as it was.
  const int64_t steps = int64_t(state_tensor(s, "step", 1).f64()[0]);
  std::map<std::string, Tensor> m, v;
  std::map<std::string, int64_t> t;
  for (const NamedParam& p : all_params()) {
    if (!s.count(p.name + ".exp_avg")) continue;  // never stepped: no state yet
    const int64_t n = p.var.value().numel();
    m[p.name] = state_tensor(s, p.name + ".exp_avg", n);
    v[p.name] = state_tensor(s, p.name + ".exp_avg_sq", n);
    t[p.name] = int64_t(state_tensor(s, p.name + ".step", 1).f64()[0]);
  }
  steps_ = steps;
  m_.swap(m), v_.swap(v), t_.swap(t);
}

double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm) {
  double ss = 0;
  for (const NamedParam& p : params) {
    if (!p.var.has_grad()) continue;
    const Tensor g = p.var.grad().on(Device::cpu()).astype(DType::F64);
    for (int64_t i = 0; i < g.numel(); ++i) ss += g.f64()[i] * g.f64()[i];
  }
  const double norm = std::sqrt(ss);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  scale_all_grads(params, max_norm / (norm + 1e-6));
  return norm;
}

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return base * double(step + 1) / double(warmup);
  switch (kind) {
    case Kind::kStep: return base * std::pow(gamma, double(step / std::max<int64_t>(1, step_size)));
    case Kind::kCosine: {
      const double span = double(std::max<int64_t>(1, total - warmup));
      const double x = std::min(1.0, double(step - warmup) / span);
      return min_lr + 0.5 * (base - min_lr) * (1 + std::cos(3.14159265358979323846 * x));
    }
    default: return base;
  }
}

LrSchedule::Kind parse_schedule(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "step") return LrSchedule::Kind::kStep;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  GNN_FAIL("unknown learning-rate schedule '", name, "' (constant, step, cosine)");
}

void Swa::snapshot(const std::vector<NamedParam>& params) {
  if (names_.empty())
    for (const NamedParam& p : params) names_.push_back(p.name);
  GNN_CHECK(params.size() == names_.size(), "SWA: the parameter list changed between snapshots");
  std::vector<Tensor> snap;
  for (const NamedParam& p : params) snap.push_back(p.var.value().astype(DType::F64).clone());
  snaps_.push_back(std::move(snap));
  if (int64_t(snaps_.size()) > k_) snaps_.pop_front();
}

std::vector<std::pair<std::string, Tensor>> Swa::average() const {
  GNN_CHECK(!snaps_.empty(), "SWA: no snapshots to average");
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < names_.size(); ++i) {
    Tensor acc = Tensor::zeros(snaps_.front()[i].shape(), DType::F64);
    for (const auto& s : snaps_)
      for (int64_t j = 0; j < acc.numel(); ++j) acc.f64()[j] += s[i].f64()[j];
    for (int64_t j = 0; j < acc.numel(); ++j) acc.f64()[j] /= double(snaps_.size());
    out.emplace_back(names_[i], acc.astype(DType::F32));
  }
  return out;
}

void Swa::apply(const std::vector<NamedParam>& params) const {
  const auto avg = average();
  GNN_CHECK(params.size() == avg.size(), "SWA: the parameter list changed");
  for (size_t i = 0; i < params.size(); ++i) params[i].var.set_value(avg[i].second.astype(params[i].var.dtype()));
}

}  // namespace gnn::nn
