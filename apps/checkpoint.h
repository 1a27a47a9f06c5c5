// Checkpoints: parameters, optimiser state and anything else a run needs (preprocessing statistics,
// the recipe's flags) in one .npz that numpy reads by name:
//   params/<name>   each parameter, e.g. params/layers.0.lin.weight
//   optim/<key>     the optimiser's state (optim/step, optim/<param>.exp_avg, ...)
//   <other keys>    the caller's extra arrays, as given
// Written through the io writer, which writes a temporary file and renames it into place: a crash
// mid-write leaves the previous checkpoint intact.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim.h"

namespace gnn {

void save_checkpoint(const std::string& path, const std::vector<nn::NamedParam>& params, const nn::Optimizer* opt,
                     const std::vector<std::pair<std::string, Tensor>>& extra = {});

// Loads every parameter (each must be present with its exact shape; the dtype is converted to the
// parameter's) and, when opt is given, the optimiser state. Returns the extra arrays.
std::map<std::string, Tensor> load_checkpoint(const std::string& path, const std::vector<nn::NamedParam>& params,
                                              nn::Optimizer* opt);

}  // namespace gnn
