// Random-access bytes for the ZIP and NPY readers: a file (pread, thread-safe, so members can load
// in parallel) or a buffer in memory (the fuzzer and the tests). read_at throws gnn::Error naming
// the source when the range runs past the end.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gnn {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  virtual void read_at(uint64_t offset, void* dst, size_t n) const = 0;
  const std::string& name() const { return name_; }

 protected:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}
  void check_range(uint64_t offset, size_t n) const;

 private:
  std::string name_;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path);  // throws gnn::Error naming path and what is wrong
  ~FileSource() override;
  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, void* dst, size_t n) const override;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::string name, std::vector<uint8_t> bytes) : ByteSource(std::move(name)), bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  void read_at(uint64_t offset, void* dst, size_t n) const override;

 private:
  std::vector<uint8_t> bytes_;
};

// Every file the engine reads goes through FileSource: a path that is not a regular file (a FIFO, a
// device, a directory) is refused with one line naming what it is, without blocking on it.
std::shared_ptr<ByteSource> open_file(const std::string& path);

// The whole of a small regular file (JSON side files, CSVs, metrics.jsonl) as text.
std::string read_text_file(const std::string& path, uint64_t max_bytes = uint64_t(1) << 32);

}  // namespace gnn

namespace gnn {

// Sequential bytes of a known total length: one ZIP member, or a range of a file. npy parsing reads
// through this, so .npy files and .npz members share one decoder.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual uint64_t total() const = 0;  // bytes the stream holds in all
  virtual void read(void* dst, size_t n) = 0;  // exactly n more bytes, or throws
  virtual void finish() = 0;  // throws unless every byte was read and verified
  virtual const std::string& where() const = 0;  // "file.npz: member 'x.npy'", for messages
};

class RangeStream final : public ByteStream {
 public:
  RangeStream(std::shared_ptr<ByteSource> src, uint64_t offset, uint64_t length)
      : src_(std::move(src)), offset_(offset), length_(length) {}
  uint64_t total() const override { return length_; }
  void read(void* dst, size_t n) override;
  void finish() override;
  const std::string& where() const override { return src_->name(); }

 private:
  std::shared_ptr<ByteSource> src_;
  uint64_t offset_, length_, pos_ = 0;
};

}  // namespace gnn
