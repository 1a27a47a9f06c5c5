#include "io/npz.h"

#include <exception>
#include <unordered_set>

namespace gnn {

NpzReader::NpzReader(const std::string& path, ZipLimits limits) : NpzReader(open_file(path), limits) {}

NpzReader::NpzReader(std::shared_ptr<ByteSource> src, ZipLimits limits) : zip_(std::move(src), limits) {
  const std::string& path = zip_.path();
  // Members 'a.npy' and 'a' are both array 'a' (numpy strips the suffix): one archive may not hold both.
  std::unordered_set<std::string> seen;
  for (const std::string& key : keys())
    GNN_CHECK(seen.insert(key).second, path, ": two members are array '", key, "' ('", key, "' and '", key,
              ".npy'); tools disagree on which one to read");
}

std::vector<std::string> NpzReader::keys() const {
  std::vector<std::string> out;
  for (const ZipEntry& e : zip_.entries()) {
    const bool npy = e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0;
    out.push_back(npy ? e.name.substr(0, e.name.size() - 4) : e.name);
  }
  return out;
}

const ZipEntry* NpzReader::entry(const std::string& key) const {
  const ZipEntry* e = zip_.find(key + ".npy");
  return e ? e : zip_.find(key);
}

const ZipEntry& NpzReader::require(const std::string& key) const {
  const ZipEntry* e = entry(key);
  if (e == nullptr) {
    std::string have;
    for (const std::string& k : keys()) have += (have.empty() ? "" : ", ") + k;
    GNN_FAIL(path(), ": no array '", key, "' (has: ", have.empty() ? "nothing" : have, ")");
  }
  return *e;
}

NpzArrayInfo NpzReader::info(const std::string& key) const {
  const ZipEntry& e = require(key);
  auto in = zip_.open_member(e);
  return {key, e, read_npy_header(*in)};
}

Tensor NpzReader::load(const std::string& key) const {
  auto in = zip_.open_member(require(key));
  return read_npy(*in);
}

std::map<std::string, Tensor> NpzReader::load_keys(const std::vector<std::string>& keys) const {
  std::vector<const ZipEntry*> entries;
  for (const std::string& k : keys) entries.push_back(&require(k));
  // Big members load one at a time, each spread over every thread (parallel reads of stored data, or
  // inflation with the CRC on a second thread); the small ones then load side by side.
  constexpr uint64_t kBig = uint64_t(32) << 20;
  std::vector<Tensor> out(keys.size());
  std::vector<std::exception_ptr> errors(keys.size());
  auto load_one = [&](size_t i) {
    try {
      auto in = zip_.open_member(*entries[i]);
      out[i] = read_npy(*in);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<size_t> small;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (entries[i]->uncompressed_size >= kBig) load_one(i);
    else small.push_back(i);
  }
#pragma omp parallel for schedule(dynamic, 1) if (small.size() > 1)
  for (int64_t j = 0; j < int64_t(small.size()); ++j) load_one(small[size_t(j)]);
  for (const std::exception_ptr& e : errors)  // the first failing key, in the caller's order
    if (e) std::rethrow_exception(e);
  std::map<std::string, Tensor> result;
  for (size_t i = 0; i < keys.size(); ++i) result.emplace(keys[i], std::move(out[i]));
  return result;
}

void NpzWriter::add(const std::string& key, const Tensor& t) {
  zip_.begin_member(key + ".npy", compress_ ? ZipMethod::kDeflated : ZipMethod::kStored, level_);
  write_npy(t, [&](const void* p, size_t n) { zip_.write(p, n); });
  zip_.end_member();
}

void save_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays, bool compress) {
  NpzWriter w(path, compress);
  for (const auto& [key, t] : arrays) w.add(key, t);
  w.close();
}

}  // namespace gnn
