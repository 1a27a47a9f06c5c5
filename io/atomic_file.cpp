#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

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
  GNN_CHECK(fd_ >= 0 && offset + n <= size_, path_, ": patch of bytes ", offset, "..", offset + n, " outside ",
            size_, " written");
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

}  // namespace gnn
