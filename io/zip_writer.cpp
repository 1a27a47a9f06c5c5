// ZipWriter: local header with a ZIP64 extra (as numpy writes it), data, then the header patched
// with the CRC and sizes; the central directory and end records at close().
#include <zlib.h>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/zip.h"

namespace gnn {
namespace {

constexpr uint32_t k32 = 0xFFFFFFFFu;
constexpr uint16_t kDosTime = 0, kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01 00:00: same bytes every run

void put16(std::vector<uint8_t>& b, uint16_t v) { b.push_back(uint8_t(v)), b.push_back(uint8_t(v >> 8)); }
void put32(std::vector<uint8_t>& b, uint32_t v) { put16(b, uint16_t(v)), put16(b, uint16_t(v >> 16)); }
void put64(std::vector<uint8_t>& b, uint64_t v) { put32(b, uint32_t(v)), put32(b, uint32_t(v >> 32)); }

}  // namespace

struct ZipWriter::Pending {
  ZipEntry entry;
  z_stream z{};
  bool deflating = false;
  uint32_t crc = 0;
  std::vector<uint8_t> out;  // deflate's output, 64 KiB while deflating (not on the stack)
};

ZipWriter::ZipWriter(std::string path) : file_(std::make_unique<AtomicFile>(std::move(path))) {
  buf_.reserve(size_t(1) << 20);
}

ZipWriter::~ZipWriter() {
  if (cur_ && cur_->deflating) deflateEnd(&cur_->z);
}

void ZipWriter::flush_buffer() {
  file_->write(buf_.data(), buf_.size());
  buf_.clear();
}

// Small pieces gather in a 1 MiB buffer; large ones go straight to the file.
void ZipWriter::put(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (buf_.size() + n > buf_.capacity()) flush_buffer();
  if (n >= buf_.capacity()) file_->write(p, n);
  else buf_.insert(buf_.end(), p, p + n);
  offset_ += n;
}

void ZipWriter::begin_member(const std::string& name, ZipMethod method, int level) {
  GNN_CHECK(!closed_, path(), ": writer is closed");
  GNN_CHECK(!cur_, path(), ": begin_member('", name, "') before the previous member ended");
  GNN_CHECK(!name.empty() && name.size() < 0xFFFF, path(), ": bad member name '", name, "'");
  for (const ZipEntry& done : done_)
    GNN_CHECK(done.name != name, path(), ": member '", name,
              "' written twice (readers would disagree on which to read)");
  cur_ = std::make_unique<Pending>();
  ZipEntry& e = cur_->entry;
  e.name = name;
  e.method = uint16_t(method);
  e.local_header_offset = offset_;
  if (method == ZipMethod::kDeflated) {
    GNN_CHECK(deflateInit2(&cur_->z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, path(),
              ": zlib deflateInit2 failed (level ", level, ")");
    cur_->deflating = true;
    cur_->out.resize(size_t(1) << 16);
  }
  std::vector<uint8_t> h;
  put32(h, 0x04034b50);
  put16(h, 45);  // version needed: 4.5, ZIP64
  put16(h, 0);  // flags
  put16(h, e.method);
  put16(h, kDosTime);
  put16(h, kDosDate);
  put32(h, 0);  // CRC, patched by end_member
  put32(h, k32);  // sizes live in the ZIP64 extra
  put32(h, k32);
  put16(h, uint16_t(name.size()));
  put16(h, 20);
  h.insert(h.end(), name.begin(), name.end());
  put16(h, 1);
  put16(h, 16);
  put64(h, 0);  // uncompressed, patched
  put64(h, 0);  // compressed, patched
  put(h.data(), h.size());
  e.data_offset = offset_;
}

void ZipWriter::write(const void* data, size_t n) {
  GNN_CHECK(cur_, path(), ": write outside a member");
  Pending& m = *cur_;
  m.crc = uint32_t(crc32_z(m.crc, static_cast<const Bytef*>(data), n));
  m.entry.uncompressed_size += n;
  if (!m.deflating) {
    put(data, n);
    return;
  }
  while (n > 0) {
    const uInt chunk = uInt(std::min<size_t>(n, size_t(1) << 30));
    m.z.next_in = const_cast<Bytef*>(static_cast<const Bytef*>(data));
    m.z.avail_in = chunk;
    do {
      m.z.next_out = m.out.data();
      m.z.avail_out = uInt(m.out.size());
      deflate(&m.z, Z_NO_FLUSH);
      put(m.out.data(), m.out.size() - m.z.avail_out);
    } while (m.z.avail_out == 0);
    data = static_cast<const uint8_t*>(data) + chunk;
    n -= chunk;
  }
}

void ZipWriter::end_member() {
  GNN_CHECK(cur_, path(), ": end_member without begin_member");
  Pending& m = *cur_;
  if (m.deflating) {
    int rc;
    do {
      m.z.next_out = m.out.data();
      m.z.avail_out = uInt(m.out.size());
      rc = deflate(&m.z, Z_FINISH);
      put(m.out.data(), m.out.size() - m.z.avail_out);
    } while (rc == Z_OK);
    GNN_CHECK(rc == Z_STREAM_END, path(), ": deflate failed for member '", m.entry.name, "'");
    deflateEnd(&m.z);
    m.deflating = false;
  }
  ZipEntry& e = m.entry;
  e.crc32 = m.crc;
  e.compressed_size = offset_ - e.data_offset;
  flush_buffer();
  std::vector<uint8_t> crc, sizes;
  put32(crc, e.crc32);
  put64(sizes, e.uncompressed_size);
  put64(sizes, e.compressed_size);
  file_->write_at(e.local_header_offset + 14, crc.data(), 4);
  file_->write_at(e.local_header_offset + 30 + e.name.size() + 4, sizes.data(), 16);
  done_.push_back(std::move(e));
  cur_.reset();
}

void ZipWriter::close() {
  GNN_CHECK(!closed_, path(), ": already closed");
  GNN_CHECK(!cur_, path(), ": close() while member '", cur_ ? cur_->entry.name : "", "' is open");
  const uint64_t cd_offset = offset_;
  for (const ZipEntry& e : done_) {
    const bool big = e.uncompressed_size >= k32 || e.compressed_size >= k32 || e.local_header_offset >= k32;
    std::vector<uint8_t> h, x;
    if (big) {  // ZIP64 extra with every field, as the 32-bit ones all say 0xFFFFFFFF
      put16(x, 1);
      put16(x, 24);
      put64(x, e.uncompressed_size);
      put64(x, e.compressed_size);
      put64(x, e.local_header_offset);
    }
    put32(h, 0x02014b50);
    put16(h, 45 | (3 << 8));  // made by: unix, 4.5
    put16(h, 45);
    put16(h, 0);
    put16(h, e.method);
    put16(h, kDosTime);
    put16(h, kDosDate);
    put32(h, e.crc32);
    put32(h, big ? k32 : uint32_t(e.compressed_size));
    put32(h, big ? k32 : uint32_t(e.uncompressed_size));
    put16(h, uint16_t(e.name.size()));
    put16(h, uint16_t(x.size()));
    put16(h, 0);  // comment
    put16(h, 0);  // disk
    put16(h, 0);  // internal attributes
    put32(h, 0100644u << 16);  // external attributes: a regular file, rw-r--r--
    put32(h, big ? k32 : uint32_t(e.local_header_offset));
    h.insert(h.end(), e.name.begin(), e.name.end());
    h.insert(h.end(), x.begin(), x.end());
    put(h.data(), h.size());
  }
  const uint64_t cd_size = offset_ - cd_offset, n = done_.size();
  const bool z64 = n >= 0xFFFF || cd_size >= k32 || cd_offset >= k32;
  std::vector<uint8_t> t;
  if (z64) {
    const uint64_t z64_at = offset_;
    put32(t, 0x06064b50);
    put64(t, 44);
    put16(t, 45 | (3 << 8));
    put16(t, 45);
    put32(t, 0);
    put32(t, 0);
    put64(t, n);
    put64(t, n);
    put64(t, cd_size);
    put64(t, cd_offset);
    put32(t, 0x07064b50);
    put32(t, 0);
    put64(t, z64_at);
    put32(t, 1);
  }
  put32(t, 0x06054b50);
  put16(t, 0);
  put16(t, 0);
  put16(t, z64 ? 0xFFFF : uint16_t(n));
  put16(t, z64 ? 0xFFFF : uint16_t(n));
  put32(t, z64 ? k32 : uint32_t(cd_size));
  put32(t, z64 ? k32 : uint32_t(cd_offset));
  put16(t, 0);
  put(t.data(), t.size());
  flush_buffer();
  file_->commit();
  closed_ = true;
}

}  // namespace gnn

namespace gnn {
const std::string& ZipWriter::path() const { return file_->path(); }
}  // namespace gnn
