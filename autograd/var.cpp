#include "autograd/var.h"

#include <chrono>

#include "kernels/elementwise.h"
#include "runtime/cuda.h"

namespace gnn::ag {

namespace {

struct Entry {
  const char* op;
  std::shared_ptr<Node> output;  // its gradient slot: the value is not held here
  BackwardFn backward;
};

thread_local std::vector<Entry> t_tape;
thread_local bool t_grad_enabled = true;

using ProfileClock = std::chrono::steady_clock;
struct Profile {
  bool on = false;
  ProfileClock::time_point last;
  std::map<std::string, OpTime> ops;
};
thread_local Profile t_profile;

double seconds_between(ProfileClock::time_point a, ProfileClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Var::Var(Tensor value, bool requires_grad) : node_(std::make_shared<Node>()) {
  GNN_CHECK(value.defined(), "Var: the value is an undefined tensor");
  node_->requires_grad = requires_grad;
  node_->shape = value.shape(), node_->dtype = value.dtype(), node_->device = value.device();
  value_ = std::make_shared<Tensor>(std::move(value));
}

const Tensor& Var::value() const {
  GNN_CHECK(node_, "use of an undefined Var");
  return *value_;
}

const Tensor& Var::grad() const {
  GNN_CHECK(node_, "use of an undefined Var");
  return node_->grad;
}

void Var::zero_grad() const {
  if (node_) node_->grad = Tensor();
}

void Var::set_value(Tensor value) const {
  GNN_CHECK(node_, "use of an undefined Var");
  GNN_CHECK(value.defined(), "Var::set_value: an undefined tensor");
  node_->shape = value.shape(), node_->dtype = value.dtype(), node_->device = value.device();
  *value_ = std::move(value);
}

void Var::set_grad(Tensor grad) const {
  GNN_CHECK(node_, "use of an undefined Var");
  node_->grad = std::move(grad);
}

bool grad_enabled() { return t_grad_enabled; }
NoGrad::NoGrad() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = prev_; }

void set_op_profiling(bool on) {
  t_profile.on = on;
  t_profile.last = ProfileClock::now();
}

void profile_mark() { t_profile.last = ProfileClock::now(); }

std::map<std::string, OpTime> take_op_profile() {
  std::map<std::string, OpTime> out;
  out.swap(t_profile.ops);
  return out;
}

Var record(const char* op, Tensor value, const std::vector<Var>& inputs, BackwardFn backward) {
  if (t_profile.on) {
    if (value.is_cuda()) cuda_synchronize(value.device().index);  // the op's kernels, not their launches
    const auto now = ProfileClock::now();
    OpTime& t = t_profile.ops[op];
    t.forward_s += seconds_between(t_profile.last, now), t.calls += 1;
    t_profile.last = now;
  }
  bool needs = false;
  if (t_grad_enabled)
    for (const Var& v : inputs) needs = needs || v.requires_grad();
  Var out(std::move(value), needs);
  if (needs) {
    out.node()->recorded = true;
    t_tape.push_back({op, out.node(), std::move(backward)});
  }
  return out;
}

void accumulate(const GradRef& v, Tensor g) {
  if (!v.requires_grad()) return;
  Node& n = *v.node();
  GNN_CHECK(g.shape() == n.shape && g.dtype() == n.dtype && g.device() == n.device, "gradient ", g.desc(),
            " does not match its value ", dtype_name(n.dtype), n.shape.str(), " on ", n.device.str());
  if (!n.grad.defined()) {
    n.grad = std::move(g);
    return;
  }
  // In place only where no other Tensor holds the gradient's buffer: a closure may hand one tensor to two
  // inputs (or set_grad give two Vars one), and a caller may keep a gradient it read, so a gradient that
  // is shared is never written; a new sum is made for it. Either way the same bits. In place saves the
  // new buffer's stream (SAGE-6th's reshape backward, 17.8 -> 10.5 ms a step).
  // (g holds its buffer too, so a g that shares n.grad's makes it not the sole owner.)
  const bool in_place = n.grad.sole_owner();
  Tensor sum = in_place ? n.grad : Tensor::empty(g.shape(), g.dtype(), g.device());
  if (g.dtype() == DType::F64) add_to(sum.f64(), n.grad.f64(), g.f64(), g.numel());
  else if (!g.is_cuda() && in_place) add_into_cpu(sum.f32(), g.f32(), g.numel());  // add_to_cpu's restrict
  else if (!g.is_cuda()) add_to_cpu(sum.f32(), n.grad.f32(), g.f32(), g.numel());
  else if constexpr (kWithCuda) add_cuda(sum.f32(), n.grad.f32(), g.f32(), g.numel(), 1.0f, g.stream());
  n.grad = std::move(sum);
}

GradSum grad_sum(const GradRef& v) {
  if (!v.requires_grad() || !v.node()->grad.defined()) return {};
  const Tensor& g = v.node()->grad;
  const bool alone = g.sole_owner();  // asked before held's copy shares the buffer
  return {g, alone ? g : Tensor::empty(g.shape(), g.dtype(), g.device())};
}

void set_grad_sum(const GradRef& v, Tensor sum) {
  Node& n = *v.node();
  GNN_CHECK(v.requires_grad() && n.grad.defined(), "set_grad_sum: the gradient was not taken with grad_sum");
  GNN_CHECK(sum.shape() == n.shape && sum.dtype() == n.dtype && sum.device() == n.device, "gradient ", sum.desc(),
            " does not match its value ", dtype_name(n.dtype), n.shape.str(), " on ", n.device.str());
  n.grad = std::move(sum);
}

namespace {
void run_backward(const Var& y, const Tensor& seed);
}  // namespace

void backward(const Var& loss) {
  GNN_CHECK(loss.defined() && loss.value().numel() == 1, "backward needs a one-element loss, got ",
            loss.defined() ? loss.value().desc() : std::string("an undefined Var"));
  run_backward(loss, Tensor::full(loss.shape(), 1.0, loss.dtype(), loss.device()));
}

void backward(const Var& y, const Tensor& dy) {
  GNN_CHECK(y.defined(), "backward: an undefined Var");
  GNN_CHECK(dy.defined() && dy.shape() == y.shape() && dy.dtype() == y.dtype() && dy.device() == y.device(),
            "backward: the seed gradient ", dy.defined() ? dy.desc() : std::string("(undefined)"), " must match ",
            y.value().desc());
  run_backward(y, dy.clone());  // a copy: y's gradient would otherwise share the caller's dy
}

namespace {

void run_backward(const Var& y, const Tensor& seed) {
  GNN_CHECK(y.requires_grad(), "backward: the loss does not depend on anything that requires a gradient");
  if (y.node()->recorded) {
    bool found = false;
    for (const Entry& e : t_tape) found = found || e.output == y.node();
    GNN_CHECK(found,
              "backward: the loss's history was consumed by an earlier backward (or cleared); add the "
              "losses and call backward once");
  }
  std::vector<Entry> tape;
  tape.swap(t_tape);  // cleared even when a backward closure throws
  accumulate(y, seed);
  NoGrad no_grad;  // closures compute with ops' kernels directly; nothing they do is recorded
  for (size_t i = tape.size(); i-- > 0;) {
    Entry& e = tape[i];
    if (e.output->grad.defined()) {
      const auto t0 = t_profile.on ? ProfileClock::now() : ProfileClock::time_point{};
      e.backward(e.output->grad);
      if (t_profile.on) {
        if (e.output->device.is_cuda()) cuda_synchronize(e.output->device.index);
        t_profile.ops[e.op].backward_s += seconds_between(t0, ProfileClock::now());
      }
    }
    e.backward = nullptr;  // frees what the closure saved as soon as it has run
    e.output->grad = Tensor();  // an intermediate's gradient is spent once its entry has run
  }
}

}  // namespace

size_t tape_size() { return t_tape.size(); }
void clear_tape() { t_tape.clear(); }

TapeScope::TapeScope() {
  auto outer = std::make_shared<std::vector<Entry>>();
  outer->swap(t_tape);
  saved_ = outer;
}

TapeScope::~TapeScope() { static_cast<std::vector<Entry>*>(saved_.get())->swap(t_tape); }

}  // namespace gnn::ag
