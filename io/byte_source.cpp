#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace gnn {

void ByteSource::check_range(uint64_t offset, size_t n) const {
  GNN_CHECK(offset <= size() && n <= size() - offset, name(), ": truncated (needs bytes ", offset, "..", offset + n,
            " of a ", size(), "-byte file)");
}

namespace {

// What a path that is not a regular file is, for the message that refuses it.
const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "neither a file nor a directory";
}

}  // namespace

FileSource::FileSource(const std::string& path) : ByteSource(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. The regular-file check
  // comes from fstat of the descriptor opened, so a path swapped between a check and the open is seen.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  GNN_CHECK(fd_ >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    GNN_FAIL(path, ": cannot stat (", std::strerror(err), ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    GNN_FAIL(path, ": not a regular file (", file_kind(st.st_mode), "); only regular files are read");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = uint64_t(st.st_size);
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::read_at(uint64_t offset, void* dst, size_t n) const {
  check_range(offset, n);
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, std::min<size_t>(n, size_t(1) << 30), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    GNN_CHECK(got > 0, name(), ": read failed at byte ", offset,
              got < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string(" (file shrank while reading)"));
    p += got, offset += uint64_t(got), n -= size_t(got);
  }
}

void MemorySource::read_at(uint64_t offset, void* dst, size_t n) const {
  check_range(offset, n);
  if (n) std::memcpy(dst, bytes_.data() + offset, n);
}

std::shared_ptr<ByteSource> open_file(const std::string& path) { return std::make_shared<FileSource>(path); }

std::string read_text_file(const std::string& path, uint64_t max_bytes) {
  FileSource f(path);
  GNN_CHECK(f.size() <= max_bytes, path, ": ", f.size(), " bytes, more than the ", max_bytes, " a text file may hold here");
  std::string text(size_t(f.size()), '\0');
  f.read_at(0, text.data(), text.size());
  return text;
}

}  // namespace gnn

namespace gnn {

void RangeStream::read(void* dst, size_t n) {
  GNN_CHECK(n <= length_ - pos_, where(), ": ends after ", length_, " bytes, ", pos_ + n, " needed");
  src_->read_at(offset_ + pos_, dst, n);
  pos_ += n;
}

void RangeStream::finish() { GNN_CHECK(pos_ == length_, where(), ": ", length_ - pos_, " unexpected trailing bytes"); }

}  // namespace gnn
