#include "apps/checkpoint.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "io/npz.h"
#include "runtime/allocator.h"

namespace gnn {

void save_checkpoint(const std::string& path, const std::vector<nn::NamedParam>& params, const nn::Optimizer* opt,
                     const std::vector<std::pair<std::string, Tensor>>& extra) {
  std::vector<std::pair<std::string, Tensor>> arrays;
  for (const nn::NamedParam& p : params)
    arrays.emplace_back("params/" + p.name, p.var.value().on(Device::cpu()));  // a GPU model: host copies
  if (opt)
    for (auto& [k, t] : opt->state()) arrays.emplace_back("optim/" + k, t);
  // load_checkpoint refuses a non-finite weight or optimiser value: such a file is not written at all.
  const std::string bad = first_nonfinite(arrays);
  GNN_CHECK(bad.empty(), path, ": not written: ", bad, ", which no checkpoint may hold");
  for (const auto& e : extra) arrays.push_back(e);
  save_npz(path, arrays);
}

void load_checkpoint(const std::string& path, const std::vector<nn::NamedParam>& params, nn::Optimizer* opt) {
  // Only the weights and the optimiser's state are read: the rest (meta/, state/, SWA snapshots) is
  // read_meta's, and with --swa K it holds K more copies of the weights.
  const NpzReader reader(path);
  std::vector<std::string> keys;
  for (const std::string& k : reader.keys())
    if (k.rfind("params/", 0) == 0 || (opt && k.rfind("optim/", 0) == 0)) keys.push_back(k);
  std::map<std::string, Tensor> all = reader.load_keys(keys);
  // Everything is checked before anything is assigned: a bad checkpoint leaves the model as it was.
  std::vector<Tensor> values;
  for (const nn::NamedParam& p : params) {
    auto it = all.find("params/" + p.name);
    GNN_CHECK(it != all.end(), path, ": checkpoint has no parameter '", p.name, "' (built for another model?)");
    GNN_CHECK(it->second.shape() == p.var.shape(), path, ": parameter '", p.name, "' is ", it->second.shape().str(),
              " in the checkpoint, the model has ", p.var.shape().str());
    // As stored (read_npy's own array: taken, not copied), then in the model's dtype where that differs: a
    // value too large for it would turn into an infinity there.
    const std::string bad = first_nonfinite({{p.name, it->second}});
    GNN_CHECK(bad.empty(), path, ": parameter ", bad);
    Tensor v = it->second.dtype() == p.var.dtype() ? std::move(it->second) : it->second.astype(p.var.dtype());
    GNN_CHECK(first_nonfinite({{p.name, v}}).empty(), path, ": parameter '", p.name, "' holds values too large for ",
              dtype_name(p.var.dtype()), ", the model's dtype");
    values.push_back(std::move(v));
    all.erase(it);
  }
  std::map<std::string, Tensor> optim;
  for (auto& [k, t] : all) {
    if (k.rfind("optim/", 0) == 0) optim[k.substr(6)] = t;
    else GNN_FAIL(path, ": checkpoint parameter '", k.substr(7), "' is not in the model");
  }
  if (opt) {
    GNN_CHECK(!optim.empty(), path,
              ": holds weights only, no optimiser state, as best.npz and swa.npz do (one copied over it?): training "
              "goes on only from the model.npz that train writes; restore it, or start a new run");
    try {
      opt->load_state(optim);
    } catch (const MemoryLimitError&) {  // (no damage: the caller says which limit, and what to do)
      throw;
    } catch (const Error& e) {
      GNN_FAIL(path, ": ", e.message());
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].var.set_value(values[i].on(params[i].var.value().device()));  // a GPU model stays there
    params[i].var.zero_grad();
  }
}

namespace {
// Whether every value is finite, from the exponent bits alone: a loop with no branch and no early exit, so
// it vectorises (the trainer checks every weight after each CPU step: 0.65% of a layout-tgraph step went
// to the per-value std::isfinite scan, 2026-12-04). first_nonfinite then scans only an array that fails.
template <class T>
bool all_finite(const T* x, int64_t n) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  constexpr U kExp = sizeof(T) == 4 ? U(0x7F800000u) : U(0x7FF0000000000000ull);
  U bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    U b;
    std::memcpy(&b, x + i, sizeof b);
    bad |= U((b & kExp) == kExp);
  }
  return bad == 0;
}
}  // namespace

std::string first_nonfinite(const std::vector<std::pair<std::string, Tensor>>& arrays,
                            const std::string& may_be_minus_inf) {
  const auto scan = [&](const std::string& key, const auto* x, int64_t n) -> std::string {
    if (all_finite(x, n)) return "";
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]) && !(key == may_be_minus_inf && x[i] == -INFINITY))
        return detail::str_cat("'", key, "' holds a non-finite value (", double(x[i]), ") at ", i);
    return "";
  };
  for (const auto& [key, t] : arrays) {
    const std::string bad = t.dtype() == DType::F32   ? scan(key, t.f32(), t.numel())
                            : t.dtype() == DType::F64 ? scan(key, t.f64(), t.numel())
                                                      : "";
    if (!bad.empty()) return bad;
  }
  return "";
}

Tensor text_tensor(const std::string& s) { return Tensor::from_vector(std::vector<uint8_t>(s.begin(), s.end())); }
std::string tensor_text(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end(), file, ": '", key, "' is missing (not a gnn train checkpoint?)");
  GNN_CHECK(it->second.dtype() == DType::U8 && it->second.dim() == 1, file, ": '", key, "' is ", it->second.desc(),
            ", not the text (uint8 bytes) gnn writes there");
  std::string text(reinterpret_cast<const char*>(it->second.u8()), size_t(it->second.numel()));
  // (a NUL would cut a path or a name short wherever it is used as C text)
  GNN_CHECK(text.find('\0') == std::string::npos, file, ": '", key, "' holds a NUL byte at ", text.find('\0'),
            "; the checkpoint is damaged");
  return text;
}
Tensor i64_tensor(int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}); }
Tensor f64_tensor(double v) { return Tensor::from_vector(std::vector<double>{v}); }
int64_t get_i64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end() && it->second.numel() == 1 && it->second.dtype() == DType::I64, file, ": '", key,
            "' is missing or not one int64");
  return it->second.i64()[0];
}
int64_t get_i64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file, int64_t lo,
                int64_t hi, std::optional<int64_t> absent) {
  if (absent && !a.count(key)) return *absent;
  const int64_t v = get_i64(a, key, file);
  check_stored(file, key, v, lo, hi);
  return v;
}
void check_stored(const std::string& file, const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  GNN_CHECK(v >= lo && v <= hi, file, ": '", key, "' is ", v, ", not in ", lo, "..",
            hi == INT64_MAX ? std::string("") : std::to_string(hi), "; the checkpoint is damaged");
}
double get_f64(const std::map<std::string, Tensor>& a, const std::string& key, const std::string& file) {
  auto it = a.find(key);
  GNN_CHECK(it != a.end() && it->second.numel() == 1 && it->second.dtype() == DType::F64, file, ": '", key,
            "' is missing or not one float64");
  return it->second.f64()[0];
}

}  // namespace gnn
