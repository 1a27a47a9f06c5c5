#include "nn/optim.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <set>
#include <type_traits>

#include "autograd/checks.h"
#include "kernels/optim.h"
#include "runtime/cuda.h"

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

// The entries of one many-tensor pass (kernels/optim.h), kept by where they run: host f32, host f64,
// and f32 per GPU. run() makes one call per place: a step over every parameter of a GPU model is one
// launch (the entry list itself goes up through the queued pinned copy, not a synchronising one).
template <template <class> class E>
struct MultiPass {
  std::vector<E<float>> host32;
  std::vector<E<double>> host64;
  std::vector<std::pair<Device, std::vector<E<float>>>> gpu;

  template <class T>
  void add(Device dev, const E<T>& e) {
    if (e.n == 0) return;
    if constexpr (std::is_same_v<T, double>) {
      GNN_CHECK(dev.is_cpu(), "optimizer: f64 tensors on a GPU are not supported");
      host64.push_back(e);
    } else if (dev.is_cpu()) {
      host32.push_back(e);
    } else {
      for (auto& [d, list] : gpu)
        if (d == dev) return list.push_back(e);
      gpu.push_back({dev, {e}});
    }
  }

  // host(list, count, chunks) for each host list (a generic lambda: f32 and f64 entries);
  // cuda(device_list, count, chunks, device) for each GPU's list, the list copied to that device.
  template <class Host, class Cuda>
  void run(Host&& host, Cuda&& cuda) {
    if (!host32.empty())
      host(host32.data(), int64_t(host32.size()), plan_chunks(host32.data(), int64_t(host32.size())));
    if (!host64.empty())
      host(host64.data(), int64_t(host64.size()), plan_chunks(host64.data(), int64_t(host64.size())));
    for (auto& [dev, list] : gpu) {
      const int64_t count = int64_t(list.size()), chunks = plan_chunks(list.data(), count);
      static_assert(std::is_trivially_copyable_v<E<float>>);
      Tensor bytes = Tensor::empty(Shape{count * int64_t(sizeof(E<float>))}, DType::U8);
      std::memcpy(bytes.data(), list.data(), size_t(bytes.numel()));
      const Tensor on_dev = bytes.on(dev);  // freed after the launch: later work on the stream comes after it
      cuda(static_cast<const E<float>*>(on_dev.data()), count, chunks, dev);
    }
  }
};

void check_on_gpu(const char* opt, const NamedParam& p) {
  GNN_CHECK(p.var.dtype() == DType::F32 && p.var.grad().device() == p.var.value().device(), opt, ": ", p.name,
            " on the GPU must be f32 with its gradient there, got ", p.var.value().desc(), " and gradient ",
            p.var.grad().desc());
}

// Calls fn(T{}) for a parameter's element type: f32 or f64 on the host, f32 on a GPU.
template <class Fn>
void with_type(const char* opt, const NamedParam& p, Fn&& fn) {
  if (p.var.value().is_cuda()) {
    check_on_gpu(opt, p);
    return fn(float{});
  }
  GNN_CHECK(p.var.grad().device() == p.var.value().device() && p.var.grad().dtype() == p.var.dtype(), opt, ": ", p.name,
            " is ", p.var.value().desc(), " but its gradient is ", p.var.grad().desc());
  ag::dispatch_real(opt, p.var.value(), std::forward<Fn>(fn));
}

// Replaces each gradient by s times it (new tensors, so a gradient shared with another holder is left as
// it was), in one pass per device.
void scale_all_grads(const std::vector<NamedParam>& params, double s) {
  MultiPass<ScaleTensor> pass;
  std::vector<std::pair<const NamedParam*, Tensor>> scaled;
  for (const NamedParam& p : params) {
    if (!p.var.has_grad()) continue;
    const Tensor& g = p.var.grad();
    Tensor y = Tensor::empty(g.shape(), g.dtype(), g.device());
    with_type("scale_grads", p, [&](auto t) {
      using T = decltype(t);
      pass.add(g.device(), ScaleTensor<T>{y.data_as<T>(), g.data_as<T>(), g.numel(), 0});
    });
    scaled.emplace_back(&p, y);
  }
  pass.run([&](const auto* list, int64_t count, int64_t chunks) { scale_multi_cpu(list, count, chunks, s); },
           [&](const ScaleTensor<float>* list, int64_t count, int64_t chunks, Device dev) {
             if constexpr (kWithCuda) scale_multi_cuda(list, count, chunks, s, cuda_stream(dev.index));
           });
  for (auto& [p, y] : scaled) p->var.set_grad(y);
}

}  // namespace

void Optimizer::scale_grads(double s) const { scale_all_grads(all_params(), s); }

namespace {

Tensor state_tensor(const std::map<std::string, Tensor>& s, const std::string& key, int64_t n) {
  auto it = s.find(key);
  GNN_CHECK(it != s.end(), "optimizer state: '", key, "' is missing");
  GNN_CHECK(it->second.numel() == n, "optimizer state: '", key, "' has ", it->second.numel(), " values, the parameter ",
            n);
  GNN_CHECK(it->second.dtype() == DType::F64 || it->second.dtype() == DType::F32 || it->second.dtype() == DType::I64,
            "optimizer state: '", key, "' is ", dtype_name(it->second.dtype()), ", not a number type it writes");
  Tensor t = it->second.astype(DType::F64).reshape({n}).clone();
  for (int64_t i = 0; i < n; ++i)
    GNN_CHECK(std::isfinite(t.f64()[i]), "optimizer state: '", key, "' holds a non-finite value at ", i);
  return t;
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum)
    : Optimizer(std::move(groups), lr), momentum_(momentum) {}

void SGD::step() {
  MultiPass<SgdTensor> pass;
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
      with_type("SGD", p, [&](auto t) {
        using T = decltype(t);
        pass.add(dev, SgdTensor<T>{ag::ptr<T>(p.var.value()), ag::ptr<T>(p.var.grad()), b, n, 0, step});
      });
    }
  pass.run([](const auto* list, int64_t count, int64_t chunks) { sgd_multi_cpu(list, count, chunks); },
           [](const SgdTensor<float>* list, int64_t count, int64_t chunks, Device dev) {
             if constexpr (kWithCuda) sgd_multi_cuda(list, count, chunks, cuda_stream(dev.index));
           });
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
  MultiPass<AdamTensor> pass;  // every parameter's update in one pass (one launch on a GPU)
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
      const AdamStep step{lr_, b1_, b2_, eps_, g.weight_decay, c1, c2, decoupled_};
      with_type("Adam", p, [&](auto x) {
        using T = decltype(x);
        pass.add(dev, AdamTensor<T>{ag::ptr<T>(p.var.value()), ag::ptr<T>(p.var.grad()), m.f64(), v.f64(), n, 0, step});
      });
    }
  pass.run([](const auto* list, int64_t count, int64_t chunks) { adam_multi_cpu(list, count, chunks); },
           [](const AdamTensor<float>* list, int64_t count, int64_t chunks, Device dev) {
             if constexpr (kWithCuda) adam_multi_cuda(list, count, chunks, cuda_stream(dev.index));
           });
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> Adam::state() const {
  std::vector<std::pair<std::string, Tensor>> out{{"step", Tensor::full(Shape{}, double(steps_), DType::I64)},
                                                  {"moments", Tensor::full(Shape{}, double(m_.size()), DType::I64)}};
  for (const auto& [name, m] : m_) {
    out.emplace_back(name + ".exp_avg", m.to(Device::cpu()));  // host copies for checkpoints
    out.emplace_back(name + ".exp_avg_sq", v_.at(name).to(Device::cpu()));
    out.emplace_back(name + ".step", Tensor::full(Shape{}, double(t_.at(name)), DType::I64));
  }
  return out;
}

void Adam::load_state(const std::map<std::string, Tensor>& s) {
  // Everything is read and checked first: a bad state leaves the optimiser as it was. A parameter's
  // three arrays come together or not at all (never stepped); "moments" counts the parameters that
  // have them, so a checkpoint that lost one whole set is refused rather than restarting its moments.
  const double step_value = state_tensor(s, "step", 1).f64()[0];
  GNN_CHECK(step_value >= 0 && step_value < 9e15 && step_value == std::floor(step_value),
            "optimizer state: 'step' is ", step_value, ", not a step count");
  const int64_t steps = int64_t(step_value);
  std::map<std::string, Tensor> m, v;
  std::map<std::string, int64_t> t;
  for (const NamedParam& p : all_params()) {
    const int present = int(s.count(p.name + ".exp_avg")) + int(s.count(p.name + ".exp_avg_sq")) +
                        int(s.count(p.name + ".step"));
    if (present == 0) continue;  // never stepped: no state yet
    const int64_t n = p.var.value().numel();
    m[p.name] = state_tensor(s, p.name + ".exp_avg", n);
    v[p.name] = state_tensor(s, p.name + ".exp_avg_sq", n);
    for (int64_t i = 0; i < n; ++i)
      GNN_CHECK(v[p.name].f64()[i] >= 0, "optimizer state: '", p.name, ".exp_avg_sq' holds a negative value at ", i);
    const double ts = state_tensor(s, p.name + ".step", 1).f64()[0];
    GNN_CHECK(ts >= 1 && ts <= double(steps) && ts == std::floor(ts), "optimizer state: '", p.name, ".step' is ", ts,
              ", outside 1..", steps, " (the optimiser's steps)");
    t[p.name] = int64_t(ts);
  }
  if (s.count("moments")) {
    const double moments = state_tensor(s, "moments", 1).f64()[0];
    GNN_CHECK(moments == double(m.size()), "optimizer state: 'moments' says ", moments,
              " parameters have Adam moments, the checkpoint holds them for ", m.size());
  }
  steps_ = steps;
  m_.swap(m), v_.swap(v), t_.swap(t);
}

double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm) {
  // Sums of squares per chunk of kMultiChunk elements (one pass per device), added in chunk order on
  // the host: one read-back per device instead of one per parameter.
  MultiPass<SumSquaresTensor> pass;
  for (const NamedParam& p : params) {
    if (!p.var.has_grad()) continue;
    with_type("clip_grad_norm", p, [&](auto t) {
      using T = decltype(t);
      pass.add(p.var.grad().device(), SumSquaresTensor<T>{ag::ptr<T>(p.var.grad()), p.var.grad().numel(), 0});
    });
  }
  double ss = 0;
  pass.run(
      [&](const auto* list, int64_t count, int64_t chunks) {
        std::vector<double> partial(static_cast<size_t>(chunks));
        sum_squares_multi_cpu(partial.data(), list, count, chunks);
        for (double x : partial) ss += x;
      },
      [&](const SumSquaresTensor<float>* list, int64_t count, int64_t chunks, Device dev) {
        if constexpr (kWithCuda) {
          const Tensor partial = Tensor::empty(Shape{chunks}, DType::F64, dev);
          sum_squares_multi_cuda(partial.f64(), list, count, chunks, cuda_stream(dev.index));
          for (double x : partial.to_vector<double>()) ss += x;
        }
      });
  const double norm = std::sqrt(ss);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  scale_all_grads(params, max_norm / (norm + 1e-6));
  return norm;
}

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return base * double(step + 1) / double(warmup);
  switch (kind) {
    case Kind::kStep:
      return base * std::pow(gamma, double(step / std::max<int64_t>(1, step_size)));
    case Kind::kMultiStep: {
      double lr = base;
      for (const double f : milestones)
        if (step >= int64_t(double(total) * f)) lr *= gamma;
      return lr;
    }
    case Kind::kCosine: {
      const double span = double(std::max<int64_t>(1, total - warmup));
      const double x = std::min(1.0, double(step - warmup) / span);
      return min_lr + 0.5 * (base - min_lr) * (1 + std::cos(3.14159265358979323846 * x));
    }
    default:
      return base;
  }
}

LrSchedule::Kind parse_schedule(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "step") return LrSchedule::Kind::kStep;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  if (name == "multistep") return LrSchedule::Kind::kMultiStep;
  GNN_FAIL("unknown learning-rate schedule '", name, "' (constant, step, cosine, multistep)");
}

LrSchedule LrSchedule::of(Kind k, double base, int64_t warmup, int64_t total) {
  LrSchedule s{.kind = k, .base = base, .warmup = warmup, .total = total};
  if (k == Kind::kMultiStep) s.milestones = {0.6, 0.7, 0.8, 0.9}, s.gamma = 1 / std::sqrt(10.0);
  return s;
}

void Swa::snapshot(const std::vector<NamedParam>& params) {
  if (names_.empty())
    for (const NamedParam& p : params) names_.push_back(p.name);
  GNN_CHECK(params.size() == names_.size(), "SWA: the parameter list changed between snapshots");
  std::vector<Tensor> snap;
  for (const NamedParam& p : params) snap.push_back(p.var.value().on(Device::cpu()).astype(DType::F64).clone());
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

void Swa::save(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  out.emplace_back(prefix + "count", Tensor::from_vector(std::vector<int64_t>{int64_t(snaps_.size())}));
  for (size_t k = 0; k < snaps_.size(); ++k)
    for (size_t i = 0; i < names_.size(); ++i)
      out.emplace_back(prefix + std::to_string(k) + "/" + names_[i], snaps_[k][i]);
}

void Swa::load(const std::string& prefix, const std::map<std::string, Tensor>& arrays,
               const std::vector<NamedParam>& params, const std::string& file, int64_t max_count) {
  snaps_.clear(), names_.clear();
  // The snapshots stored, by the index after the prefix: a count that does not name exactly these is damage
  // (a smaller one would average fewer snapshots than the unbroken run does).
  std::set<int64_t> stored;
  for (auto it = arrays.lower_bound(prefix); it != arrays.end() && it->first.starts_with(prefix); ++it) {
    const char* at = it->first.data() + prefix.size();
    const char* end = it->first.data() + it->first.size();
    int64_t k = 0;
    const auto r = std::from_chars(at, end, k);
    if (r.ec == std::errc() && r.ptr != end && *r.ptr == '/') stored.insert(k);
  }
  const auto count = arrays.find(prefix + "count");
  const bool one = count != arrays.end() && count->second.numel() == 1 && count->second.dtype() == DType::I64;
  const int64_t n = one ? count->second.i64()[0] : 0;
  const std::string said = count == arrays.end() ? "(missing)" : one ? std::to_string(n) : count->second.desc();
  GNN_CHECK((one || count == arrays.end()) && n >= 0 && int64_t(stored.size()) == n &&
                (n == 0 || *stored.rbegin() == n - 1),
            file, ": ", prefix, "count ", said, " does not match the ", stored.size(),
            " snapshots stored; the checkpoint is damaged");
  GNN_CHECK(n <= max_count, file, ": ", prefix, "count ", n, ": SWA snapshots stored after ", max_count,
            " epochs (one an epoch at most); the checkpoint is damaged");
  if (count == arrays.end()) return;  // a checkpoint from before SWA was on: no snapshots yet
  for (const NamedParam& p : params) names_.push_back(p.name);
  for (int64_t k = 0; k < n; ++k) {
    std::vector<Tensor> snap;
    for (const NamedParam& p : params) {
      const std::string key = prefix + std::to_string(k) + "/" + p.name;
      const auto it = arrays.find(key);
      GNN_CHECK(it != arrays.end(), file, ": no ", key, " (the snapshots do not hold this model's parameters)");
      GNN_CHECK(it->second.shape() == p.var.shape() && it->second.dtype() == DType::F64, file, ": ", key, " is ",
                it->second.desc(), ", the parameter ", p.var.value().desc());
      snap.push_back(it->second);
    }
    snaps_.push_back(std::move(snap));
  }
  while (int64_t(snaps_.size()) > k_) snaps_.pop_front();
}

void Swa::apply(const std::vector<NamedParam>& params) const {
  const auto avg = average();
  GNN_CHECK(params.size() == avg.size(), "SWA: the parameter list changed");
  // The average is kept on the host; it is copied into each parameter's own storage, where it is (so
  // CUDA graphs captured on that storage stay valid).
  for (size_t i = 0; i < params.size(); ++i)
    Tensor(params[i].var.value()).copy_from(avg[i].second.astype(params[i].var.dtype()));
}

}  // namespace gnn::nn
