// Checkpoints: parameters, optimiser state and anything else a run needs (preprocessing statistics,
// the recipe's flags) in one .npz that numpy reads by name:
//   params/<name>   each parameter, e.g. params/layers.0.lin.weight
//   optim/<key>     the optimiser's state (optim/step, optim/<param>.exp_avg, ...)
//   <other keys>    the caller's extra arrays, as given
// Written through the io writer, which writes a temporary file and renames it into place: a crash
// mid-write leaves the previous checkpoint intact.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim.h"

namespace gnn {

void save_checkpoint(const std::string& path, const std::vector<nn::NamedParam>& params, const nn::Optimizer* opt,
                     const std::vector<std::pair<std::string, Tensor>>& extra = {});

// Loads every parameter (each must be present with its exact shape; the dtype is converted to the
// parameter's) and, when opt is given, the optimiser state. The extra arrays are not read (NpzReader).
void load_checkpoint(const std::string& path, const std::vector<nn::NamedParam>& params, nn::Optimizer* opt);

// The first float array of `arrays` (host tensors) holding a NaN or an infinity, as "'key' holds a
// non-finite value (v) at i", or "". `may_be_minus_inf` names a key allowed -inf (state/best_score
// before any best epoch). The one check checkpoints are written and read under.
std::string first_nonfinite(const std::vector<std::pair<std::string, Tensor>>& arrays,
                            const std::string& may_be_minus_inf = "");

// The caller's extra arrays: text and one-value arrays, and getters that name the file and the key
// when one is missing or of another type.
Tensor text_tensor(const std::string& s);
std::string tensor_text(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file);
Tensor i64_tensor(int64_t v);
Tensor f64_tensor(double v);
int64_t get_i64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file);
// A stored integer as gnn writes it, in lo..hi (hi INT64_MAX: no upper bound); anything else names the file
// and the key as damaged. `absent`, when given, is the value of a key an older checkpoint lacks.
int64_t get_i64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file, int64_t lo,
                int64_t hi, std::optional<int64_t> absent = std::nullopt);
void check_stored(const std::string& file, const std::string& key, int64_t v, int64_t lo, int64_t hi);
double get_f64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file);

}  // namespace gnn
