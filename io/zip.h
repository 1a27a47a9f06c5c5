// ZIP archives as numpy writes them (APPNOTE 6.3): the end-of-central-directory record (after an
// optional comment), the ZIP64 end record and locator, central and local headers, ZIP64 extras,
// members stored (method 0) or raw-deflated (method 8, through zlib), the data-descriptor flag.
//
// numpy puts a ZIP64 extra (id 0x0001) in every LOCAL header and none in the central directory
// while sizes fit 32 bits, so a member's data starts at
//   local_header_offset + 30 + name_len + LOCAL extra_len,
// read from the local header itself, never from the central entry's extra length.
// Sizes and CRCs come from the central directory (the local ones may be zero when bit 3 is set);
// when the local header carries them too they must agree, or the archive is refused.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/byte_source.h"

namespace gnn {

class AtomicFile;

enum class ZipMethod : uint16_t { kStored = 0, kDeflated = 8 };
const char* zip_method_name(uint16_t method);  // "stored", "deflated", "method N"

struct ZipLimits {
  // Largest uncompressed member accepted (zip bombs). Real layout:nlp members exceed 4 GiB.
  uint64_t max_member_bytes = uint64_t(32) << 30;
  bool check_crc = true;
};

struct ZipEntry {
  std::string name;
  uint16_t method = 0;
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // first byte of the member's (compressed) data
};

class ZipReader {
 public:
  explicit ZipReader(std::shared_ptr<ByteSource> src, ZipLimits limits = {});
  static ZipReader open(const std::string& path, ZipLimits limits = {});

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;  // nullptr when absent
  const std::string& path() const { return src_->name(); }
  const ZipLimits& limits() const { return limits_; }
  // A stream over one member's uncompressed bytes; size and CRC are checked by finish().
  std::unique_ptr<ByteStream> open_member(const ZipEntry& entry) const;

 private:
  void read_central_directory();
  void resolve_local_header(ZipEntry& e, uint64_t data_limit) const;
  std::shared_ptr<ByteSource> src_;
  ZipLimits limits_;
  std::vector<ZipEntry> entries_;
};

// Writes an archive the way numpy does (ZIP64 extra in each local header, ZIP64 end records when
// needed), with a fixed timestamp so the same content gives the same bytes. Writes go to a
// temporary file beside `path` that close() renames into place: a crash never leaves half a file.
class ZipWriter {
 public:
  explicit ZipWriter(std::string path);
  ~ZipWriter();  // without close(): the temporary file is removed
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  void begin_member(const std::string& name, ZipMethod method, int level = 6);
  void write(const void* data, size_t n);
  void end_member();
  void close();

 private:
  struct Pending;
  void put(const void* data, size_t n);
  void flush_buffer();
  const std::string& path() const;
  std::unique_ptr<AtomicFile> file_;
  bool closed_ = false;
  uint64_t offset_ = 0;
  std::vector<uint8_t> buf_;
  std::vector<ZipEntry> done_;
  std::unique_ptr<Pending> cur_;
};

}  // namespace gnn
