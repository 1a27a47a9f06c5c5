// NPZ: a ZIP archive with one <key>.npy member per array (np.savez stores, np.savez_compressed
// deflates). Loading some keys reads only those members; several members load in parallel, each
// inflating (or reading) straight into its tensor's buffer.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/npy.h"
#include "io/zip.h"

namespace gnn {

struct NpzArrayInfo {
  std::string key;  // member name without ".npy"
  ZipEntry entry;  // method, sizes, CRC
  NpyHeader header;  // file dtype, shape, order
};

class NpzReader {
 public:
  explicit NpzReader(const std::string& path, ZipLimits limits = {});
  explicit NpzReader(std::shared_ptr<ByteSource> src, ZipLimits limits = {});  // bytes in memory (the fuzzers)

  const std::string& path() const { return zip_.path(); }
  std::vector<std::string> keys() const;  // in archive order
  bool contains(const std::string& key) const { return entry(key) != nullptr; }
  NpzArrayInfo info(const std::string& key) const;  // reads only the member's .npy header
  Tensor load(const std::string& key) const;
  std::map<std::string, Tensor> load_keys(const std::vector<std::string>& keys) const;  // members in parallel
  std::map<std::string, Tensor> load_all() const { return load_keys(keys()); }

 private:
  const ZipEntry* entry(const std::string& key) const;
  const ZipEntry& require(const std::string& key) const;
  ZipReader zip_;
};

class NpzWriter {
 public:
  // compress: deflate members (np.savez_compressed) or store them (np.savez).
  explicit NpzWriter(std::string path, bool compress = false, int level = 6)
      : zip_(std::move(path)), compress_(compress), level_(level) {}
  void add(const std::string& key, const Tensor& t);
  void close() { zip_.close(); }  // renames the finished file into place

 private:
  ZipWriter zip_;
  bool compress_;
  int level_;
};

void save_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays,
              bool compress = false);

}  // namespace gnn
