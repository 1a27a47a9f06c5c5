// Optimisers, gradient clipping, learning-rate schedules and weight averaging.
//
//   SGD:   v = momentum v + (g + wd w);  w -= lr v           (torch.optim.SGD, dampening 0)
//   Adam:  g' = g + wd w;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//          w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)                (torch.optim.Adam)
//   AdamW: the same with wd applied as w -= lr wd w instead of through g        (torch.optim.AdamW)
// Parameters without a gradient this step are skipped (their state does not advance). Each group of
// parameters may have its own weight decay (PyG's GCN decays only the first layer).
//
// Gradient accumulation: run backward on K micro-batches without zero_grad (gradients add up), then
// scale_grads(1 / K) and step: the same update as one batch K times larger (tested).
#pragma once
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "nn/module.h"

namespace gnn::nn {

struct ParamGroup {
  std::vector<NamedParam> params;
  double weight_decay = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad() const;
  void scale_grads(double s) const;
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t steps() const { return steps_; }
  // State as named tensors ("<param>.exp_avg", "step", ...) for checkpoints, and back.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state) = 0;
  std::vector<NamedParam> all_params() const;

 protected:
  Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {}
  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t steps_ = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0);
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;

 private:
  double momentum_;
  std::map<std::string, Tensor> buf_;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, double lr, bool decoupled_weight_decay = false, double beta1 = 0.9,
       double beta2 = 0.999, double eps = 1e-8);
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state() const override;
  void load_state(const std::map<std::string, Tensor>& state) override;

 private:
  bool decoupled_;
  double b1_, b2_, eps_;
  std::map<std::string, Tensor> m_, v_;
  std::map<std::string, int64_t> t_;
};

// All parameters in one group.
std::vector<ParamGroup> one_group(const std::vector<NamedParam>& params, double weight_decay = 0);

// Scales every gradient so their joint l2 norm is at most max_norm; returns the norm before clipping.
// A non-finite norm is returned as is and nothing is scaled (the caller decides: stop or skip).
double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm);

// The learning rate at optimiser step `step` (0-based).
struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine, kMultiStep };
  Kind kind = Kind::kConstant;
  double base = 1e-3;
  int64_t warmup = 0;  // linear from base / warmup up to base over the first `warmup` steps
  int64_t step_size = 1000;  // kStep: multiply by gamma every step_size steps
  double gamma = 0.1;  // kStep, kMultiStep
  int64_t total = 1;  // kCosine: from base down to min_lr at step `total`
  double min_lr = 0;
  // kMultiStep: multiply by gamma from each step int(total * f) on, f in milestones (torch's MultiStepLR
  // with milestones given as fractions of the run; the 2nd place's 0.6, 0.7, 0.8, 0.9 by 1/sqrt(10)).
  std::vector<double> milestones;
  double at(int64_t step) const;
  // A schedule of kind k with that kind's own defaults (kMultiStep: the 2nd place's milestones and
  // gamma) and the given base rate, warmup and length.
  static LrSchedule of(Kind k, double base, int64_t warmup, int64_t total);
};
// constant | step | cosine | multistep
LrSchedule::Kind parse_schedule(const std::string& name);

// Stochastic weight averaging over the last K snapshots.
class Swa {
 public:
  explicit Swa(int64_t k) : k_(k) { GNN_CHECK(k >= 1, "SWA needs K >= 1 snapshots, got ", k); }
  void snapshot(const std::vector<NamedParam>& params);  // copies the current values
  // The average of the stored snapshots (as f32 tensors by name).
  std::vector<std::pair<std::string, Tensor>> average() const;
  // Writes the average into the parameters.
  void apply(const std::vector<NamedParam>& params) const;
  int64_t count() const { return int64_t(snaps_.size()); }
  // The snapshots as named f64 arrays (prefix + "count", prefix + "<i>/<parameter>", oldest first), for a
  // checkpoint, and back (a resumed run averages what the unbroken one would). load refuses, naming `file`,
  // stored snapshots that are not exactly prefix + "count" of them (at most `max_count`).
  void save(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  void load(const std::string& prefix, const std::map<std::string, Tensor>& arrays,
            const std::vector<NamedParam>& params, const std::string& file, int64_t max_count);

 private:
  int64_t k_;
  std::deque<std::vector<Tensor>> snaps_;
  std::vector<std::string> names_;
};

}  // namespace gnn::nn
