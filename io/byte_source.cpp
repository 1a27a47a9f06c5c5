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

FileSource::FileSource(const std::string& path) : ByteSource(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GNN_CHECK(fd_ >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    GNN_FAIL(path, ": not a regular file", err ? std::string(" (") + std::strerror(err) + ")" : "");
  }
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

}  // namespace gnn

namespace gnn {

void RangeStream::read(void* dst, size_t n) {
  GNN_CHECK(n <= length_ - pos_, where(), ": ends after ", length_, " bytes, ", pos_ + n, " needed");
  src_->read_at(offset_ + pos_, dst, n);
  pos_ += n;
}

void RangeStream::finish() { GNN_CHECK(pos_ == length_, where(), ": ", length_ - pos_, " unexpected trailing bytes"); }

}  // namespace gnn
