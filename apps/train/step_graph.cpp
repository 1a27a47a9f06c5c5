#include "apps/train/step_graph.h"

#include <cmath>
#include <cstring>

namespace gnn::train {

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

constexpr Tensor Batch::*kIndexArrays[] = {&Batch::opcode,     &Batch::graph_ptr,    &Batch::node_graph,
                                           &Batch::edges,      &Batch::config_nodes, &Batch::config_ptr,
                                           &Batch::plan_seeds, &Batch::keep_grad};

}  // namespace

// What a captured forward reads from the host: a batch's sizes and index arrays (kept, and compared byte
// for byte, the features that are not float inputs too), and the shapes of its float inputs
// (Batch::float_inputs: their values are copied in every step).
struct StepGraphs::Structure {
  using Signature = std::pair<Shape, DType>;  // of a float input (an empty shape and U8: undefined)
  Batch index;  // the batch with its float inputs and targets dropped
  std::vector<Signature> inputs;  // per float input

  static Signature signature(const Tensor& t) {
    return t.defined() ? Signature{t.shape(), t.dtype()} : Signature{Shape{}, DType::U8};
  }
  explicit Structure(const Batch& b) : index(b) {
    for (const Tensor* t : b.float_inputs()) inputs.push_back(signature(*t));
    for (Tensor* t : index.float_inputs()) *t = Tensor();
    index.target = Tensor();
  }
  bool matches(const Batch& b) const {
    if (index.graphs != b.graphs || index.configs != b.configs || index.nodes != b.nodes || index.ids != b.ids ||
        index.part != b.part || index.parts != b.parts)
      return false;
    for (auto field : kIndexArrays)
      if (!same_bytes(index.*field, b.*field)) return false;
    if (index.features.values.size() != b.features.values.size()) return false;
    for (size_t i = 0; i < b.features.values.size(); ++i) {
      const auto& [f, t] = b.features.values[i];
      if (index.features.values[i].first != f || (!f->float_input && !same_bytes(index.features.values[i].second, t)))
        return false;
    }
    const std::vector<const Tensor*> in = b.float_inputs();
    if (in.size() != inputs.size()) return false;
    for (size_t i = 0; i < in.size(); ++i)
      if (signature(*in[i]) != inputs[i]) return false;
    return true;
  }
};

namespace {

// The loss of a host copy of the prediction and, when it is finite, its gradient there, on a tape of its
// own (the captured forward's entries wait on the thread's tape for the backward's capture).
bool host_loss(const StepGraphs::LossFn& loss, const Tensor& pred, double& value, Tensor& dpred) {
  ag::TapeScope scope;
  const ag::Var leaf(pred, true);
  const ag::Var l = loss(leaf);
  value = l.value().item();
  if (!std::isfinite(value)) return false;
  ag::backward(l);
  dpred = leaf.has_grad() ? leaf.grad() : Tensor::zeros(pred.shape(), pred.dtype());
  return true;
}

}  // namespace

struct StepGraphs::Entry {
  explicit Entry(const Batch& host) : structure(host) {}
  Structure structure;  // of the batch as first seen
  Batch dev;  // the graphs' device batch (from the second sight)
  bool has_dev = false, broken = false;
  std::unique_ptr<CudaGraph> forward, backward;
  ag::Var pred;  // the forward's output, rewritten by each replay
  Tensor dpred;  // the backward's seed, copied up each step
  std::vector<Tensor> grads;  // per parameter: the gradient the backward writes (undefined: none)
  std::vector<Tensor> values;  // per parameter: its value at capture (held: its address is not reused)

  void drop() {
    backward.reset();
    grads.clear(), values.clear();
    pred = ag::Var();
    dpred = Tensor();
    forward.reset();
  }
};

StepGraphs::StepGraphs(int64_t capacity, Device device) : capacity_(capacity), device_(device) {
  GNN_CHECK(capacity >= 1 && device.is_cuda(), "StepGraphs: needs a GPU and room for a graph, got ", capacity, " on ",
            device.str());
}

StepGraphs::~StepGraphs() = default;

StepGraphs::Entry* StepGraphs::find(const Batch& host) {
  for (auto& e : entries_)
    if (e->structure.matches(host)) return e.get();
  return nullptr;
}

StepGraphs::Entry* StepGraphs::add(const Batch& host) {
  if (int64_t(entries_.size()) >= capacity_) return nullptr;  // the first N structures are kept
  entries_.push_back(std::make_unique<Entry>(host));
  return entries_.back().get();
}

const Batch* StepGraphs::run(RankModel& model, const std::vector<nn::NamedParam>& params, const Batch& host,
                             const LossFn& loss, Step& out) {
  scratch_ = Batch();  // (the last eager step's batch: freed before this step's is made)
  const bool can = !host.keep_grad.defined() && model.replayable();
  Entry* e = can ? find(host) : nullptr;
  if (!e && can) add(host);
  if (!e || e->broken) {
    scratch_ = host.to(device_);
    return &scratch_;
  }
  if (!e->has_dev) {  // the second sight: eagerly, on the entry's batch, which keeps what the step caches on it
    e->dev = host.to(device_), e->has_dev = true;
    return &e->dev;
  }
  e->dev.copy_inputs_from(host);  // queued behind the last replay that read them
  bool moved = e->values.size() != params.size();
  for (size_t i = 0; i < params.size() && !moved; ++i) moved = params[i].var.value().data() != e->values[i].data();
  if (e->forward && moved) e->drop();  // a parameter was replaced (loaded, cast): capture again
  if (e->forward) {
    replay(*e, params, loss, out);
    return nullptr;
  }
  if (capture(*e, model, params, loss, out)) return nullptr;  // (the step ran from the new graphs)
  scratch_ = host.to(device_);  // (not the entry's batch, whose buffers the failed capture may have written)
  return &scratch_;
}

// Captures e's forward, replays it, computes the loss on the host, then captures and replays the
// backward from the forward's tape. On a failed capture (a gnn::Error: an op that waits for the device)
// e is marked broken, its device batch released, and false returned: the step then runs eagerly, as
// nothing of it has touched the parameters or their gradients, but for --op-max-norm's in-place
// renormalisation of the embedding rows the forward looked up, which the eager step repeats (a row
// already at the norm stays there, give or take one rounding). Any other exception is passed on after
// the same clean-up.
bool StepGraphs::capture(Entry& e, RankModel& model, const std::vector<nn::NamedParam>& params, const LossFn& loss,
                         Step& out) {
  out = Step{};
  auto clean_up = [&] {
    ag::clear_tape();  // (the captured forward's entries)
    for (const nn::NamedParam& p : params) p.var.zero_grad();
    e.drop();
    e.dev = Batch(), e.has_dev = false;
    e.broken = true;
    failed_ += 1;
  };
  auto attempt = [&](const std::function<void()>& fn) {
    try {
      fn();
      return true;
    } catch (const Error&) {
      clean_up();
      return false;
    } catch (...) {
      clean_up();
      throw;
    }
  };
  if (!attempt([&] {
        e.forward = std::make_unique<CudaGraph>(
            device_.index, [&] { e.pred = model.forward(e.dev); }, CudaGraph::Uploads::kSnapshot);
      }))
    return false;
  // From here the captured forward's entries wait on the thread's tape for the backward's capture: an
  // error on the way (a loss that refuses its input) clears them with the half-made graphs.
  Tensor dpred;
  try {
    e.forward->replay();
    const Tensor pred = e.pred.value().on(Device::cpu());
    out.pred = ag::Var(pred);
    if (!host_loss(loss, pred, out.loss, dpred)) {  // no backward to capture: try again at the next sight
      ag::clear_tape();
      e.drop();
      return true;
    }
    e.dpred = Tensor::empty(pred.shape(), pred.dtype(), device_);
    e.dpred.copy_from(dpred);
  } catch (...) {
    ag::clear_tape();
    e.drop();
    throw;
  }
  for (const nn::NamedParam& p : params) p.var.zero_grad();
  if (!attempt([&] {
        e.backward = std::make_unique<CudaGraph>(
            device_.index, [&] { ag::backward(e.pred, e.dpred); }, CudaGraph::Uploads::kSnapshot);
      }))
    return false;
  for (const nn::NamedParam& p : params) {
    e.grads.push_back(p.var.has_grad() ? p.var.grad() : Tensor());
    e.values.push_back(p.var.value());
  }
  captured_ += 1, replayed_ += 1;
  e.backward->replay();
  return true;
}

void StepGraphs::replay(Entry& e, const std::vector<nn::NamedParam>& params, const LossFn& loss, Step& out) {
  out = Step{};
  e.forward->replay();
  const Tensor pred = e.pred.value().on(Device::cpu());  // the step's first wait for the device
  out.pred = ag::Var(pred);
  Tensor dpred;
  replayed_ += 1;
  if (!host_loss(loss, pred, out.loss, dpred)) return;  // the caller stops or skips the batch
  e.dpred.copy_from(dpred);
  e.backward->replay();
  for (size_t i = 0; i < params.size(); ++i) {
    if (e.grads[i].defined()) params[i].var.set_grad(e.grads[i]);
    else params[i].var.zero_grad();
  }
}

}  // namespace gnn::train
