// Var and the tape.
//
// A Var is a handle to a value (a Tensor) and, once backward has reached it, its gradient. Every op
// that sees an input requiring a gradient records one entry on the current thread's tape, in call
// order: the output's gradient slot and a closure that reads the output's gradient and adds to the
// inputs'. backward(loss) seeds d loss = 1 and runs the entries from last to first, so each output's
// gradient is complete before its entry runs; a value used twice gets both contributions added.
// Then the tape is cleared (the closures drop the activations they saved) and only leaves (Vars made
// by the caller, such as parameters) keep their gradients.
//
// Saved values, as in PyTorch: the tape holds gradient slots (Node), never values. A value lives while
// a Var handle to it does, or a closure that reads it in the backward (it captures the Var, or the
// Tensor). A closure that only sends gradients to an input captures its GradRef, which holds the slot
// and not the value, so an intermediate nobody reads again is freed as soon as the forward drops it:
// a GCN layer keeps its activation's input and its output, not the five tensors in between.
//
//   Var w = Var::param(Tensor::zeros({3, 2}, DType::F32));   // requires_grad
//   Var loss = ag::sum(ag::matmul(x, w));
//   ag::backward(loss);                                        // w.grad() now holds d loss / d w
//
// NoGrad (a scope) records nothing: inference and optimiser updates. detach() gives the same value
// with no history.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace gnn::ag {

// The gradient side of a Var: what the tape and the closures' GradRefs hold (no value).
struct Node {
  Tensor grad;  // undefined until a gradient arrives
  bool requires_grad = false;
  bool recorded = false;  // the output of a tape entry (not a leaf)
  Shape shape;  // the value's, which a gradient must match
  DType dtype = DType::F32;
  Device device;
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);
  static Var param(Tensor value) { return Var(std::move(value), true); }

  bool defined() const { return node_ != nullptr; }
  const Tensor& value() const;
  const Tensor& grad() const;  // undefined Tensor when no gradient reached this Var
  bool has_grad() const { return node_ && node_->grad.defined(); }
  bool requires_grad() const { return node_ && node_->requires_grad; }
  const Shape& shape() const { return value().shape(); }
  int64_t size(int d) const { return value().size(d); }
  DType dtype() const { return value().dtype(); }
  Device device() const { return value().device(); }

  void zero_grad() const;  // drops the gradient (the next one starts fresh)
  void set_value(Tensor value) const;  // replaces the value in place (casting parameters, loading)
  void set_grad(Tensor grad) const;
  Var detach() const { return Var(value(), false); }

  const std::shared_ptr<Node>& node() const { return node_; }

 private:
  std::shared_ptr<Node> node_;
  std::shared_ptr<Tensor> value_;  // shared by the Var's copies, so set_value reaches them all
};

// Where an input's gradient goes, without its value: what a backward closure captures of an input
// it does not read (a Var converts). The value may be gone by the time the closure runs.
class GradRef {
 public:
  GradRef() = default;
  GradRef(const Var& v) : node_(v.node()) {}  // NOLINT(google-explicit-constructor): a Var is one
  bool requires_grad() const { return node_ && node_->requires_grad; }
  const Shape& shape() const { return node_->shape; }
  DType dtype() const { return node_->dtype; }
  Device device() const { return node_->device; }
  int64_t size(int d) const {  // as Tensor::size: negative d counts from the end
    const int n = node_->shape.ndim();
    GNN_CHECK(d >= -n && d < n, "GradRef::size: dim ", d, " of a ", n, "-d value");
    return node_->shape[d < 0 ? d + n : d];
  }
  const std::shared_ptr<Node>& node() const { return node_; }

 private:
  std::shared_ptr<Node> node_;
};

// Whether ops record. Thread-local; NoGrad scopes nest.
bool grad_enabled();
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool prev_;
};

// The backward closure of one entry: given d output, add into the inputs' gradients with accumulate().
using BackwardFn = std::function<void(const Tensor& dy)>;

// Makes the result of an op. When grad mode is on and any input requires a gradient, the result
// requires one too and `backward` is recorded with `op` (its name, for errors).
Var record(const char* op, Tensor value, const std::vector<Var>& inputs, BackwardFn backward);
// Adds g to v's gradient: takes g when v has none yet; else adds g into it in place when no other
// Tensor holds its buffer, or replaces it by a new sum when one does (g is never written, so it may be
// shared; a gradient a caller kept, or that two inputs share, is never written either).
// Does nothing when v does not require a gradient.
void accumulate(const GradRef& v, Tensor g);
// For a backward that writes v's new gradient as (the gradient v holds) + (its part g, summed first) in
// one pass, with accumulate's bits, instead of making g and accumulating it: `held` is v's gradient so
// far, `into` the buffer for the sum: held itself where no other Tensor holds its buffer (where accumulate
// adds in place), else a new one. Both undefined when v has no gradient yet or wants none: then make g
// and accumulate it. The op writes each element of into once, as held + its part, reads into for
// nothing else, and hands it over with set_grad_sum. Saves g's buffer and a pass over it (SpMM's
// backward into its x, whose gradient add's backward may share with SpMM's own dy).
struct GradSum {
  Tensor held, into;
};
GradSum grad_sum(const GradRef& v);
void set_grad_sum(const GradRef& v, Tensor sum);

// Runs the tape backward from a one-element loss, then clears it. The whole tape is consumed: with
// several losses, add them and call backward once (a second backward on a loss whose history is
// gone is refused).
void backward(const Var& loss);
// The same from any output y with the gradient dy (y's shape, dtype and device) as the seed: the
// vector-Jacobian product a benchmark or a custom loss needs (PyTorch's y.backward(dy)).
void backward(const Var& y, const Tensor& dy);
// How many entries are recorded on this thread; clear_tape() drops them (a forward with no backward).
size_t tape_size();
void clear_tape();

// Time per op for gnn train --profile, on this thread, while on. An op's forward is the time from the
// previous op's record (or profile_mark) to its own: its kernels and whatever the caller did between
// the two (so call profile_mark before a forward). Its backward is its closure's time. A CUDA op is
// waited for (its device synchronised) before its time is read, so its time is its kernels' and not
// their launches': a profiled GPU step runs slower than an unprofiled one, with a host wait per op.
struct OpTime {
  double forward_s = 0, backward_s = 0;
  int64_t calls = 0;  // forwards recorded
};
void set_op_profiling(bool on);
void profile_mark();
std::map<std::string, OpTime> take_op_profile();  // what was gathered since the last take; clears it

// A scope with a tape of its own: the thread's entries are set aside on entry and put back on exit (this
// scope's own entries, if any are left, are dropped). A loss computed and back-propagated inside it
// leaves a forward recorded before it untouched, for a later backward(y, dy) from that forward's output
// (apps/train/step_graph.cpp: a host loss between a captured forward and a captured backward).
class TapeScope {
 public:
  TapeScope();
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  std::shared_ptr<void> saved_;
};

}  // namespace gnn::ag
