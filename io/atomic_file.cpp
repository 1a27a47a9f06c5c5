#include "io/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace gnn {

namespace {

// Which of this process's standard output and error `st` is (1 or 2), or -1: /dev/stdout names fd 1
// through a link, whatever fd 1 is (a terminal, a pipe, a file the shell redirected to).
int standard_stream(const struct stat& st) {
  for (int fd : {1, 2}) {
    struct stat s {};
    if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino) return fd;
  }
  return -1;
}

// How `path` is written (the rule in atomic_file.h): returns true to write straight to it, with `stream`
// set when it is this process's stdout or stderr; false to replace `target`, the regular file it names.
bool resolve_output(const std::string& path, std::string& target, int& stream) {
  namespace fs = std::filesystem;
  struct stat ls {}, st {};
  std::error_code ec;
  target = path, stream = -1;
  if (::lstat(path.c_str(), &ls) != 0) {
    GNN_CHECK(errno == ENOENT, path, ": cannot write here (", std::strerror(errno), ")");
    return false;  // a new file
  }
  const bool is_link = S_ISLNK(ls.st_mode);
  if (is_link && ::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string to = fs::read_symlink(path, ec).string();
    GNN_FAIL(path, ": a symlink to ", to, ", which ", err == ENOENT ? "does not exist" : std::strerror(err),
             "; create the file it names, or write to its path directly");
  }
  if (!is_link) st = ls;
  GNN_CHECK(!S_ISDIR(st.st_mode), path, ": is a directory; name a file to write");
  stream = standard_stream(st);
  if (!S_ISREG(st.st_mode) || stream >= 0) return true;
  if (is_link) {
    target = fs::canonical(path, ec).string();
    GNN_CHECK(!ec, path, ": cannot resolve the symlink (", ec.message(), ")");
  }
  return false;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  int stream = -1;
  direct_ = resolve_output(path_, target_, stream);
  if (direct_ && stream >= 0) {
    // Our own stdout or stderr: written through its descriptor, after what stdio holds, at its offset
    // (a file the shell redirected to is appended to, not overwritten from its start).
    std::fflush(stream == 1 ? stdout : stderr);
    fd_ = ::fcntl(stream, F_DUPFD_CLOEXEC, 3);
    GNN_CHECK(fd_ >= 0, path_, ": cannot write to standard ", stream == 1 ? "output" : "error", " (",
              std::strerror(errno), ")");
    return;
  }
  if (direct_) {
    // O_NONBLOCK: a FIFO with no reader fails with ENXIO instead of blocking; cleared at commit().
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    opened_ = true;
    GNN_CHECK(fd_ >= 0, path_, ": cannot open for writing (",
              errno == ENXIO ? "a FIFO with no reader" : std::strerror(errno), ")");
    return;
  }
  tmp_path_ = target_ + ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  GNN_CHECK(fd_ >= 0, path_, ": cannot create ", tmp_path_, " (", std::strerror(errno), ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!direct_) ::unlink(tmp_path_.c_str());
  }
}

namespace {

void write_all(int fd, const std::string& path, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    GNN_CHECK(w > 0, path, ": write failed (", std::strerror(errno), ")");
    p += w, n -= size_t(w);
  }
}

}  // namespace

void AtomicFile::write(const void* data, size_t n) {
  GNN_CHECK(fd_ >= 0, path_, ": write after commit");
  if (direct_) held_.append(static_cast<const char*>(data), n);
  else write_all(fd_, path_, static_cast<const char*>(data), n);
  size_ += uint64_t(n);
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  GNN_CHECK(fd_ >= 0 && offset + n <= size_, path_, ": patch of bytes ", offset, "..", offset + n, " outside ", size_,
            " written");
  if (direct_) {
    std::memcpy(held_.data() + offset, data, n);
    return;
  }
  GNN_CHECK(::pwrite(fd_, data, n, off_t(offset)) == ssize_t(n), path_, ": write failed (", std::strerror(errno), ")");
}

void AtomicFile::commit() {
  GNN_CHECK(fd_ >= 0, path_, ": committed twice");
  if (direct_) {
    // (only a descriptor opened here: a dup of stdout shares its flags with whoever else holds it)
    if (opened_) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    const int fd = fd_;
    fd_ = -1;
    // A pipe or FIFO whose reader has gone answers EPIPE, an error line, rather than SIGPIPE killing
    // the process: the signal is blocked for this write, and one it raised is taken back.
    sigset_t pipe_only, before;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
    const auto restore = [&] {
      const timespec none{0, 0};
      while (::sigtimedwait(&pipe_only, nullptr, &none) > 0) {
      }
      ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    };
    try {
      write_all(fd, path_, held_.data(), held_.size());
    } catch (...) {
      restore();
      ::close(fd);
      throw;
    }
    restore();
    GNN_CHECK(::close(fd) == 0 || errno == EINTR, path_, ": write failed (", std::strerror(errno), ")");
    held_.clear();
    return;
  }
  GNN_CHECK(::fsync(fd_) == 0, path_, ": fsync failed (", std::strerror(errno), ")");
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), target_.c_str()) != 0) {
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

std::string output_names_input(const std::string& out, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path o = fs::weakly_canonical(out, ec);
  const bool out_exists = fs::exists(out, ec);
  for (const std::string& in : inputs) {
    if (out_exists && fs::exists(in, ec) && fs::equivalent(out, in, ec)) return in;  // links, hard links too
    if (!o.empty() && o == fs::weakly_canonical(in, ec)) return in;  // another spelling, or not made yet
  }
  return "";
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
