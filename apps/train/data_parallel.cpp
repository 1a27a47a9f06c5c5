#include "apps/train/data_parallel.h"

#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "dist/comm.h"

namespace gnn::train {

namespace {

// Each parameter's slice of the flat buffer starts on a 256-byte boundary, as an allocation would:
// kernels that read gradients as float4 (the optimisers) need 16.
constexpr int64_t kAlign = 64;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
int64_t padded(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void check_ranks_agree(
    const RankFields& fields, const std::string& what, const std::string& hint,
    const std::function<void(const std::string&, const std::string&, const std::string&, int)>& finer) {
  if (!dist::distributed()) return;
  // Each name and value as its length, a colon and its bytes: any text goes through whole, and a rank that
  // compares other fields (a gnn of another version) is told from one whose values differ.
  std::string mine;
  for (const auto& [name, value] : fields)
    for (const std::string* t : {&name, &value}) mine += std::to_string(t->size()) + ':' + *t;
  const std::vector<std::string> all = dist::allgather(mine, what);
  const auto parse = [&](const std::string& s) {
    std::vector<std::string> texts;
    for (size_t at = 0; at < s.size();) {
      const size_t colon = s.find(':', at);
      size_t n = 0;
      const auto r = std::from_chars(s.data() + at, s.data() + (colon == std::string::npos ? at : colon), n);
      GNN_CHECK(colon != std::string::npos && r.ec == std::errc() && n <= s.size() - colon - 1, what,
                ": a rank sent a malformed list (a gnn of another version?)");
      texts.push_back(s.substr(colon + 1, n));
      at = colon + 1 + n;
    }
    return texts;
  };
  const std::vector<std::string> first = parse(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> theirs = parse(all[r]);
    for (size_t i = 0; i + 1 < std::max(first.size(), theirs.size()); i += 2) {
      GNN_CHECK(i + 1 < first.size() && i + 1 < theirs.size() && first[i] == theirs[i], "rank ", r, " compares ",
                i + 1 < theirs.size() ? "'" + theirs[i] + "'" : std::string("nothing more"), " where rank 0 compares ",
                i + 1 < first.size() ? "'" + first[i] + "'" : std::string("nothing more"), " (", what,
                "): every rank needs the same gnn");
      if (first[i + 1] == theirs[i + 1]) continue;
      if (finer) finer(first[i], first[i + 1], theirs[i + 1], int(r));
      GNN_FAIL("rank ", r, "'s ", first[i], " is ", theirs[i + 1], ", rank 0's ", first[i + 1], ": ", hint);
    }
  }
}

std::string files_fingerprint(const std::vector<DatasetFile>& files) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a over each path and size
  const auto mix = [&h](const std::string& s) {
    for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // (a separator after each field)
  };
  for (const DatasetFile& f : files) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(f.path, ec);
    mix(f.path);
    mix(ec ? std::string("unreadable") : std::to_string(size));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return std::to_string(files.size()) + " files (paths and sizes hash " + hex + ")";
}

DataParallel::DataParallel(std::vector<nn::NamedParam> params) : params_(std::move(params)) {
  for (const nn::NamedParam& p : params_) {
    GNN_CHECK(p.var.dtype() == DType::F32, "data-parallel training sums f32 gradients; parameter ", p.name, " is ",
              dtype_name(p.var.dtype()));
    GNN_CHECK(p.var.device() == params_.front().var.device(),
              "data-parallel training needs every parameter on one "
              "device; ",
              p.name, " is on ", p.var.device().str());
    total_ += padded(p.var.value().numel());
  }
  bytes_per_step_ = total_ * 4 + int64_t(2 + params_.size() + size_t(dist::world().size)) * 8;
  if (!params_.empty() && params_.front().var.device().is_cuda()) dist::prepare_gpu(params_.front().var.device().index);
}

std::vector<double> DataParallel::sum_counts(std::vector<double> local, int64_t step) {
  const auto t = Clock::now();
  dist::allreduce_sum(local.data(), int64_t(local.size()), "the loss counts of step " + std::to_string(step));
  bytes_per_step_ = total_ * 4 + int64_t(2 + params_.size() + size_t(dist::world().size) + local.size()) * 8;
  sync_seconds_ += since(t);
  return local;
}

DataParallel::StepSums DataParallel::reduce(double local_loss, bool local_finite, int64_t local_configs, int64_t step) {
  const dist::World& w = dist::world();
  const size_t P = params_.size(), R = size_t(w.size);
  const auto t = Clock::now();
  steps_ += 1;
  // [loss, configs, has_grad per parameter, not-finite per rank]
  std::vector<double> sums(2 + P + R, 0.0);
  sums[0] = local_finite ? local_loss : 0.0;
  sums[1] = double(local_configs);
  for (size_t i = 0; i < P; ++i) sums[2 + i] = params_[i].var.has_grad() ? 1 : 0;
  sums[2 + P + size_t(w.rank)] = local_finite ? 0 : 1;
  dist::allreduce_sum(sums.data(), int64_t(sums.size()), "the sums of step " + std::to_string(step));
  sync_seconds_ += since(t);
  StepSums out;
  out.loss = sums[0], out.configs = int64_t(sums[1]);
  for (size_t r = 0; r < R; ++r)
    if (sums[2 + P + r] > 0) out.culprits.push_back(int(r));
  out.finite = out.culprits.empty();
  if (!out.finite) return out;

  // The gradients: every parameter some rank has a gradient for, zeros where this rank has none.
  const Device dev = params_.empty() ? Device::cpu() : params_.front().var.device();
  Tensor flat = Tensor::zeros({total_}, DType::F32, dev);
  int64_t at = 0;
  for (size_t i = 0; i < P; ++i) {
    const Tensor& v = params_[i].var.value();
    const int64_t n = v.numel();
    if (sums[2 + i] > 0 && params_[i].var.has_grad())
      flat.slice(at, at + n).copy_from(params_[i].var.grad().reshape({n}));
    at += padded(n);
  }
  const auto t_grad = Clock::now();
  dist::allreduce_sum(flat, "the gradients of step " + std::to_string(step));
  grad_seconds_ += since(t_grad);
  sync_seconds_ += since(t_grad);
  at = 0;
  for (size_t i = 0; i < P; ++i) {
    const Tensor& v = params_[i].var.value();
    const int64_t n = v.numel();
    if (sums[2 + i] > 0) params_[i].var.set_grad(flat.slice(at, at + n).reshape(v.shape().vec()));
    else params_[i].var.zero_grad();
    at += padded(n);
  }
  return out;
}

void DataParallel::check_same_weights(const std::string& when) const {
  if (!dist::distributed()) return;
  // FNV-1a over every parameter's bytes.
  uint64_t h = 0xcbf29ce484222325ull;
  for (const nn::NamedParam& p : params_) {
    const Tensor v = p.var.value().on(Device::cpu());
    const auto* b = static_cast<const unsigned char*>(v.data());
    for (size_t k = 0; k < v.nbytes(); ++k) h = (h ^ b[k]) * 0x100000001b3ull;
  }
  const std::string mine(reinterpret_cast<const char*>(&h), sizeof h);
  const std::vector<std::string> all = dist::allgather(mine, "the weight check " + when);
  for (size_t r = 1; r < all.size(); ++r)
    GNN_CHECK(all[r] == all[0], "rank ", r, "'s weights differ from rank 0's ", when,
              ": the ranks must be started with the same flags (and the same build)");
}

}  // namespace gnn::train
