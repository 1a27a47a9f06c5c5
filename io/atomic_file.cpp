#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace gnn {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_path_ = path_ + ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  GNN_CHECK(fd_ >= 0, path_, ": cannot create ", tmp_path_, " (", std::strerror(errno), ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t n) {
  GNN_CHECK(fd_ >= 0, path_, ": write after commit");
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    GNN_CHECK(w > 0, path_, ": write failed (", std::strerror(errno), ")");
    p += w, n -= size_t(w), size_ += uint64_t(w);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  GNN_CHECK(fd_ >= 0 && offset + n <= size_, path_, ": patch of bytes ", offset, "..", offset + n, " outside ", size_,
            " written");
  GNN_CHECK(::pwrite(fd_, data, n, off_t(offset)) == ssize_t(n), path_, ": write failed (", std::strerror(errno), ")");
}

void AtomicFile::commit() {
  GNN_CHECK(fd_ >= 0, path_, ": committed twice");
  GNN_CHECK(::fsync(fd_) == 0, path_, ": fsync failed (", std::strerror(errno), ")");
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    GNN_FAIL(path_, ": cannot move the finished file into place (", std::strerror(err), ")");
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string prefix = p.filename().string() + ".tmp-";
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(pid_t(std::stol(pid)), 0) == 0 || errno == EPERM) continue;  // its writer still runs
    removed += fs::remove(entry.path(), ec) ? 1 : 0;
  }
  return removed;
}

}  // namespace gnn
