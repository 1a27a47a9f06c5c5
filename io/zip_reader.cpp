#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>
#include <unordered_map>

#include "base/error.h"
#include "io/zip.h"
#include "runtime/parallel.h"

namespace gnn {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr size_t kEndSize = 22, kLocatorSize = 20, kEnd64Size = 56, kCentralSize = 46, kLocalSize = 30;
constexpr uint32_t k32 = 0xFFFFFFFFu;
// Deflate cannot shrink data by more than about 1032:1; a larger declared ratio is a lie.
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t le32(const uint8_t* p) { return uint32_t(le16(p)) | uint32_t(le16(p + 2)) << 16; }
uint64_t le64(const uint8_t* p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// Walks extra fields; returns the ZIP64 one (id 1) or nullptr. Throws on a malformed extra block.
const uint8_t* find_zip64_extra(const uint8_t* extra, size_t len, size_t* out_len, const std::string& where) {
  size_t i = 0;
  while (i + 4 <= len) {
    const uint16_t id = le16(extra + i), sz = le16(extra + i + 2);
    GNN_CHECK(i + 4 + sz <= len, where, ": malformed extra field (id ", id, " runs past the header)");
    if (id == 1) {
      *out_len = sz;
      return extra + i + 4;
    }
    i += 4 + size_t(sz);
  }
  return nullptr;
}

// Replaces the 0xFFFFFFFF fields of (usize, csize, offset) with their ZIP64 values, in that order.
void apply_zip64(const uint8_t* x, size_t xlen, uint64_t* usize, uint64_t* csize, uint64_t* offset,
                 const std::string& where) {
  size_t pos = 0;
  for (uint64_t* field : {usize, csize, offset}) {
    if (field == nullptr || *field != k32) continue;
    GNN_CHECK(x != nullptr && pos + 8 <= xlen, where, ": a size is 0xFFFFFFFF but the ZIP64 extra field lacks it");
    *field = le64(x + pos);
    pos += 8;
  }
}

// Inflates or copies one member into the caller's buffers, computing the CRC of what it hands out.
class MemberStream final : public ByteStream {
 public:
  MemberStream(std::shared_ptr<ByteSource> src, const ZipEntry& e, bool check_crc)
      : src_(std::move(src)), e_(e), check_crc_(check_crc), where_(src_->name() + ": member '" + e.name + "'") {
    if (e_.method == uint16_t(ZipMethod::kDeflated)) {
      std::memset(&z_, 0, sizeof z_);
      GNN_CHECK(inflateInit2(&z_, -MAX_WBITS) == Z_OK, where_, ": zlib inflateInit2 failed");
      z_open_ = true;
      in_.resize(size_t(1) << 20);
    }
  }
  ~MemberStream() override {
    if (z_open_) inflateEnd(&z_);
  }
  uint64_t total() const override { return e_.uncompressed_size; }
  const std::string& where() const override { return where_; }

  void read(void* dst, size_t n) override {
    GNN_CHECK(n <= e_.uncompressed_size - pos_, where_, ": read of ", n, " bytes past the member's end (",
              e_.uncompressed_size, " bytes)");
    if (n == 0) return;
    if (e_.method == uint16_t(ZipMethod::kStored)) read_stored(static_cast<uint8_t*>(dst), n);
    else inflate_checked(static_cast<uint8_t*>(dst), n);
    pos_ += n;
  }

  void finish() override {
    GNN_CHECK(pos_ == e_.uncompressed_size, where_, ": ", e_.uncompressed_size - pos_, " bytes left unread");
    if (e_.method == uint16_t(ZipMethod::kDeflated) && !stream_end_) {
      uint8_t scratch;  // the stream must end exactly at the declared size
      inflate_into(&scratch, 1, /*probe_end=*/true);
    }
    if (check_crc_)
      GNN_CHECK(crc_ == e_.crc32, where_, ": CRC-32 mismatch (directory says ", hex32(e_.crc32), ", data gives ",
                hex32(crc_), ")");
  }

 private:
  // Stored data goes straight from the file into dst in 8 MiB chunks, spread over the threads, each
  // chunk's CRC taken while it is still in cache; crc32_combine folds them in file order.
  void read_stored(uint8_t* dst, size_t n) {
    const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
    std::vector<uint32_t> part(static_cast<size_t>(chunks));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t off = size_t(c) * kChunk, len = std::min(kChunk, n - off);
      try {
        src_->read_at(e_.data_offset + pos_ + off, dst + off, len);
        if (check_crc_) part[size_t(c)] = uint32_t(crc32_z(0, dst + off, len));
      } catch (...) {
        errors[size_t(c)] = std::current_exception();
      }
    }
    for (const auto& err : errors)
      if (err) std::rethrow_exception(err);
    if (check_crc_)
      for (int64_t c = 0; c < chunks; ++c)
        crc_ = uint32_t(crc32_combine64(crc_, part[size_t(c)], z_off64_t(std::min(kChunk, n - size_t(c) * kChunk))));
  }

  // Inflation is serial, so a big member inflates on this thread while a helper takes the CRC of each
  // finished chunk right behind it: the CRC costs no wall time. Small reads, or --threads 1, do both
  // in turn, chunk by chunk, while the chunk is in cache.
  void inflate_checked(uint8_t* dst, size_t n) {
    const bool pipeline = check_crc_ && n >= 8 * kChunk && num_threads() >= 2;
    if (!pipeline) {
      for (size_t off = 0; off < n; off += kChunk) {
        const size_t len = std::min(kChunk, n - off);
        inflate_into(dst + off, len);
        if (check_crc_) crc_ = uint32_t(crc32_z(crc_, dst + off, len));
      }
      return;
    }
    std::atomic<size_t> done{0};
    std::atomic<bool> stop{false};
    uint32_t crc = crc_;
    std::thread helper([&] {
      size_t off = 0;
      while (off < n) {
        const size_t ready = done.load(std::memory_order_acquire);
        if (ready > off) {
          crc = uint32_t(crc32_z(crc, dst + off, ready - off));
          off = ready;
        } else if (stop.load(std::memory_order_acquire)) {
          return;
        } else {
          std::this_thread::yield();
        }
      }
    });
    try {
      for (size_t off = 0; off < n; off += kChunk) {
        const size_t len = std::min(kChunk, n - off);
        inflate_into(dst + off, len);
        done.store(off + len, std::memory_order_release);
      }
    } catch (...) {
      stop.store(true, std::memory_order_release);
      helper.join();
      throw;
    }
    helper.join();
    crc_ = crc;
  }

  static constexpr size_t kChunk = size_t(8) << 20;

  // Inflates exactly n bytes into dst. With probe_end, dst is scratch and the only acceptable result
  // is the end of the stream with nothing more produced.
  void inflate_into(uint8_t* dst, size_t n, bool probe_end = false) {
    const std::string too_long =
        where_ + ": inflates to more than its declared " + std::to_string(e_.uncompressed_size) + " bytes";
    while (n > 0) {
      if (z_.avail_in == 0 && in_pos_ < e_.compressed_size) {
        const size_t take = size_t(std::min<uint64_t>(in_.size(), e_.compressed_size - in_pos_));
        src_->read_at(e_.data_offset + in_pos_, in_.data(), take);
        in_pos_ += take;
        z_.next_in = in_.data();
        z_.avail_in = uInt(take);
      }
      const uInt chunk = uInt(std::min<size_t>(n, size_t(1) << 30));
      const uInt avail_in_before = z_.avail_in;
      z_.next_out = dst;
      z_.avail_out = chunk;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t produced = chunk - z_.avail_out;
      GNN_CHECK(!(probe_end && produced > 0), too_long);
      dst += produced, n -= produced;
      if (rc == Z_STREAM_END) {
        stream_end_ = true;
        GNN_CHECK(probe_end || n == 0, where_, ": deflate stream ends before the declared ", e_.uncompressed_size,
                  " bytes");
        return;
      }
      GNN_CHECK(rc == Z_OK || rc == Z_BUF_ERROR, where_, ": inflate error (",
                z_.msg ? std::string(z_.msg) : "zlib code " + std::to_string(rc), ")");
      const bool progress = produced > 0 || z_.avail_in != avail_in_before;
      GNN_CHECK(progress || in_pos_ < e_.compressed_size, where_, ": deflate stream is truncated");
    }
  }

  std::shared_ptr<ByteSource> src_;
  ZipEntry e_;
  bool check_crc_;
  std::string where_;
  z_stream z_{};
  bool z_open_ = false, stream_end_ = false;
  std::vector<uint8_t> in_;
  uint64_t in_pos_ = 0, pos_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace

const char* zip_method_name(uint16_t method) {
  switch (method) {
    case 0:
      return "stored";
    case 8:
      return "deflated";
    default:
      return "unsupported";
  }
}

ZipReader::ZipReader(std::shared_ptr<ByteSource> src, ZipLimits limits) : src_(std::move(src)), limits_(limits) {
  read_central_directory();
}

ZipReader ZipReader::open(const std::string& path, ZipLimits limits) { return ZipReader(open_file(path), limits); }

const ZipEntry* ZipReader::find(const std::string& name) const {
  for (const ZipEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void ZipReader::read_central_directory() {
  const std::string& path = src_->name();
  const uint64_t size = src_->size();
  GNN_CHECK(size >= kEndSize, path, ": not a ZIP archive (", size, " bytes, too short for an end record)");

  // The end record is the last 22 bytes plus a comment of up to 64 KiB; search back for a signature
  // whose comment length lands exactly on the end of the file.
  const uint64_t tail_len = std::min<uint64_t>(size, kEndSize + 0xFFFF);
  std::vector<uint8_t> tail(tail_len);
  src_->read_at(size - tail_len, tail.data(), tail_len);
  int64_t end_at = -1;
  for (int64_t i = int64_t(tail_len - kEndSize); i >= 0; --i) {
    if (le32(&tail[size_t(i)]) == kEndSig && uint64_t(i) + kEndSize + le16(&tail[size_t(i) + 20]) == tail_len) {
      end_at = i;
      break;
    }
  }
  GNN_CHECK(end_at >= 0, path, ": not a ZIP archive, or truncated (no end-of-central-directory record)");
  const uint8_t* end = &tail[size_t(end_at)];
  const uint64_t end_pos = size - tail_len + uint64_t(end_at);
  GNN_CHECK(le16(end + 4) == 0 && le16(end + 6) == 0, path, ": multi-disk archives are not supported");
  uint64_t count = le16(end + 10), cd_size = le32(end + 12), cd_offset = le32(end + 16);
  uint64_t cd_limit = end_pos;

  // ZIP64: a locator just before the end record points at the ZIP64 end record.
  uint8_t loc[kLocatorSize];
  if (end_pos >= kLocatorSize) src_->read_at(end_pos - kLocatorSize, loc, kLocatorSize);
  if (end_pos >= kLocatorSize && le32(loc) == kLocator64Sig) {
    const uint64_t z64_pos = le64(loc + 8);
    GNN_CHECK(z64_pos + kEnd64Size <= end_pos - kLocatorSize, path, ": ZIP64 locator points outside the archive (",
              z64_pos, ")");
    uint8_t z[kEnd64Size];
    src_->read_at(z64_pos, z, kEnd64Size);
    GNN_CHECK(le32(z) == kEnd64Sig, path, ": bad ZIP64 end-of-central-directory signature at byte ", z64_pos);
    count = le64(z + 32), cd_size = le64(z + 40), cd_offset = le64(z + 48);
    cd_limit = z64_pos;
  } else {
    GNN_CHECK(count != 0xFFFF && cd_size != k32 && cd_offset != k32, path,
              ": end record asks for ZIP64 values but there is no ZIP64 locator");
  }
  GNN_CHECK(cd_offset <= cd_limit && cd_size <= cd_limit - cd_offset, path, ": central directory (", cd_size,
            " bytes at ", cd_offset, ") lies outside the archive");
  GNN_CHECK(count <= cd_size / kCentralSize, path, ": end record claims ", count, " entries in a ", cd_size,
            "-byte central directory");

  std::vector<uint8_t> cd(cd_size);
  src_->read_at(cd_offset, cd.data(), cd_size);
  entries_.reserve(count);
  size_t at = 0;
  for (uint64_t k = 0; k < count; ++k) {
    GNN_CHECK(at + kCentralSize <= cd.size() && le32(&cd[at]) == kCentralSig, path, ": central directory entry ", k,
              " has a bad signature or is truncated");
    const uint8_t* h = &cd[at];
    const size_t nlen = le16(h + 28), xlen = le16(h + 30), clen = le16(h + 32);
    GNN_CHECK(at + kCentralSize + nlen + xlen + clen <= cd.size(), path, ": central directory entry ", k,
              " runs past the directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(h + kCentralSize), nlen);
    e.flags = le16(h + 8);
    e.method = le16(h + 10);
    e.crc32 = le32(h + 16);
    e.compressed_size = le32(h + 20);
    e.uncompressed_size = le32(h + 24);
    e.local_header_offset = le32(h + 42);
    const std::string where = path + ": member '" + e.name + "'";
    size_t z64_len = 0;
    const uint8_t* z64 = find_zip64_extra(h + kCentralSize + nlen, xlen, &z64_len, where);
    apply_zip64(z64, z64_len, &e.uncompressed_size, &e.compressed_size, &e.local_header_offset, where);
    resolve_local_header(e, cd_offset);
    entries_.push_back(std::move(e));
    at += kCentralSize + nlen + xlen + clen;
  }
  // Two members of one name: numpy takes the last, a reader that searches from the front the first, so
  // two tools would see different data in the same file. Refused.
  std::unordered_map<std::string, size_t> first;
  for (size_t k = 0; k < entries_.size(); ++k) {
    const auto [it, fresh] = first.emplace(entries_[k].name, k);
    GNN_CHECK(fresh, path, ": member '", entries_[k].name, "' appears twice (central directory entries ", it->second,
              " and ", k, "); tools disagree on which one to read");
  }
}

void ZipReader::resolve_local_header(ZipEntry& e, uint64_t data_limit) const {
  const std::string where = src_->name() + ": member '" + e.name + "'";
  GNN_CHECK(e.local_header_offset <= data_limit && kLocalSize <= data_limit - e.local_header_offset, where,
            ": local header offset ", e.local_header_offset, " lies outside the archive");
  uint8_t h[kLocalSize];
  src_->read_at(e.local_header_offset, h, kLocalSize);
  GNN_CHECK(le32(h) == kLocalSig, where, ": bad local header signature at byte ", e.local_header_offset);
  const size_t nlen = le16(h + 26), xlen = le16(h + 28);
  std::vector<uint8_t> var(nlen + xlen);
  GNN_CHECK(e.local_header_offset + kLocalSize + var.size() <= data_limit, where, ": local header is truncated");
  src_->read_at(e.local_header_offset + kLocalSize, var.data(), var.size());
  GNN_CHECK(std::string(var.begin(), var.begin() + nlen) == e.name, where,
            ": local header names it differently (inconsistent central/local headers)");
  GNN_CHECK(le16(h + 8) == e.method, where, ": local header says method ", le16(h + 8), ", central says ", e.method,
            " (inconsistent central/local headers)");
  if ((le16(h + 6) & 0x8) == 0) {  // no data descriptor: the local header carries CRC and sizes too
    uint64_t usize = le32(h + 22), csize = le32(h + 18);
    size_t z64_len = 0;
    const uint8_t* z64 = find_zip64_extra(var.data() + nlen, xlen, &z64_len, where);
    apply_zip64(z64, z64_len, &usize, &csize, nullptr, where);
    GNN_CHECK(le32(h + 14) == e.crc32 && usize == e.uncompressed_size && csize == e.compressed_size, where,
              ": local header (crc ", hex32(le32(h + 14)), ", ", csize, " -> ", usize, " bytes) disagrees with the ",
              "central directory (crc ", hex32(e.crc32), ", ", e.compressed_size, " -> ", e.uncompressed_size,
              " bytes)");
  }
  e.data_offset = e.local_header_offset + kLocalSize + nlen + xlen;
  GNN_CHECK(e.compressed_size <= data_limit - e.data_offset, where, ": its ", e.compressed_size,
            " bytes of data run past the start of the central directory (truncated or corrupt archive)");
}

std::unique_ptr<ByteStream> ZipReader::open_member(const ZipEntry& e) const {
  const std::string where = src_->name() + ": member '" + e.name + "'";
  GNN_CHECK((e.flags & 0x1) == 0, where, ": encrypted members are not supported");
  GNN_CHECK(e.method == uint16_t(ZipMethod::kStored) || e.method == uint16_t(ZipMethod::kDeflated), where,
            ": compression method ", e.method, " is not supported (only stored and deflated)");
  GNN_CHECK(e.uncompressed_size <= limits_.max_member_bytes, where, ": ", e.uncompressed_size,
            " bytes uncompressed exceeds the limit of ", limits_.max_member_bytes, " bytes");
  if (e.method == uint16_t(ZipMethod::kStored))
    GNN_CHECK(e.compressed_size == e.uncompressed_size, where, ": stored member with different sizes (",
              e.compressed_size, " vs ", e.uncompressed_size, ")");
  else
    GNN_CHECK(e.uncompressed_size <= e.compressed_size * kMaxDeflateRatio + 1024, where, ": claims ",
              e.uncompressed_size, " bytes from ", e.compressed_size, " compressed, more than deflate can encode");
  return std::make_unique<MemberStream>(src_, e, limits_.check_crc);
}

}  // namespace gnn
