#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace gnn {

void ByteSource::check_range(uint64_t offset, size_t n) const {
  GNN_CHECK(offset <= size() && n <= size() - offset, name(), ": truncated (needs bytes ", offset, "..",
            offset + n, " of a ", size(), "-byte file)");
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
    GNN_CHECK(got > 0, name(), ": read failed at byte ", offset, got < 0 ? std::string(" (") + std::strerror(errno) + ")"
                                                                      : std::string(" (file shrank while reading)"));
    p += got, offset += uint64_t(got), n -= size_t(got);
  }
}

void MemorySource::read_at(uint64_t offset, void* dst, size_t n) const {
  check_range(offset, n);
  if (n) std::memcpy(dst, bytes_.data() + offset, n);
}

std::shared_ptr<ByteSource> open_file(const std::string& path) { return std::make_shared<FileSource>(path); }

}  // namespace gnn

#include <zlib.h>

namespace gnn {

void RangeStream::read(void* dst, size_t n) {
  GNN_CHECK(n <= length_ - pos_, where(), ": ends after ", length_, " bytes, ", pos_ + n, " needed");
  src_->read_at(offset_ + pos_, dst, n);
  pos_ += n;
}

void RangeStream::finish() {
  GNN_CHECK(pos_ == length_, where(), ": ", length_ - pos_, " unexpected trailing bytes");
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  constexpr size_t kChunk = size_t(4) << 20;
  const auto* p = static_cast<const Bytef*>(data);
  if (n < 2 * kChunk) return uint32_t(crc32_z(crc, p, n));
  // Chunks in parallel, then crc32_combine folds them in order: the same value as one serial pass.
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
  std::vector<uLong> part(size_t(chunks), 0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * kChunk, len = std::min(kChunk, n - begin);
    part[size_t(c)] = crc32_z(0, p + begin, len);
  }
  uLong out = crc;
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * kChunk, len = std::min(kChunk, n - begin);
    out = crc32_combine64(out, part[size_t(c)], z_off64_t(len));
  }
  return uint32_t(out);
}

}  // namespace gnn
