// Module: something that owns named parameters and sub-modules, as in PyTorch. A layer registers its
// parameters (add_param) and children (add_child) in its constructor; parameters() lists them with
// dotted names ("layers.0.lin.weight") in registration order, which is what optimisers, checkpoints
// and gradient checks walk. Modules are neither copied nor moved (children are registered by address).
//
// Initialisation draws from the Rng the constructor is given, so a seed fixes every weight:
//   glorot:  U(-a, a), a = sqrt(6 / (fan_in + fan_out))   (PyG's GCN and GAT weights)
//   kaiming: U(-a, a), a = 1 / sqrt(fan_in)                (torch.nn.Linear's default, weight and bias)
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "autograd/var.h"
#include "runtime/rng.h"

namespace gnn::nn {

struct NamedParam {
  std::string name;
  ag::Var var;
};

enum class Init { kGlorot, kKaiming, kZeros, kOnes, kNormal };

// A new f32 tensor of this shape drawn by `init` (fan_in, fan_out as for a [fan_in, fan_out] weight).
Tensor init_tensor(const Shape& shape, Init init, int64_t fan_in, int64_t fan_out, Rng& rng);

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::vector<NamedParam> parameters() const;
  int64_t num_parameters() const;  // scalars
  void zero_grad() const;
  // Training mode (dropout on) or evaluation, for this module and every child.
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

 protected:
  ag::Var add_param(std::string name, Tensor value);
  void add_child(std::string name, Module* child);

 private:
  void collect(const std::string& prefix, std::vector<NamedParam>& out) const;
  std::vector<NamedParam> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// Converts every parameter's value to dtype in place (f64 for gradient checks), dropping gradients.
void cast_parameters(const Module& m, DType dtype);
// Moves every parameter's value to `device` (a copy when it is elsewhere), dropping gradients.
void move_parameters(const Module& m, Device device);

}  // namespace gnn::nn
