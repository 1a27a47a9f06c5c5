// A file written under a temporary name beside its destination and renamed into place by commit(),
// after fsync: readers see the old file or the whole new one, never half of it. Destroying an
// uncommitted AtomicFile removes the temporary.
#pragma once
#include <cstdint>
#include <string>

namespace gnn {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // appends
  void write_at(uint64_t offset, const void* data, size_t n);  // patches bytes already written
  uint64_t size() const { return size_; }
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes `text` to path through an AtomicFile: the old file or the whole new one, never half.
void write_file_atomic(const std::string& path, const std::string& text);

// Removes the temporaries `path.tmp-PID` that a killed writer left beside `path` (a process killed with
// SIGKILL runs no destructor), those of live processes excepted. Returns how many it removed. "Live" is
// judged in this PID namespace: a writer on another host or container sharing the folder is not seen.
int remove_stale_temporaries(const std::string& path);

}  // namespace gnn
