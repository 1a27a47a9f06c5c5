// libFuzzer target for the zip and npy parsers: any bytes, as an archive (every member loaded as an
// array) and as a bare .npy. The only acceptable outcomes are a load or a gnn::Error; crashes, leaks,
// hangs and sanitizer reports are bugs. Members are capped at 64 MiB so the fuzzer's memory limit
// measures leaks, not legitimately large arrays.
#include <cstdint>
#include <memory>
#include <vector>

#include "io/npz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gnn;
  auto src = std::make_shared<MemorySource>("fuzz.npz", std::vector<uint8_t>(data, data + size));
  ZipLimits limits;
  limits.max_member_bytes = uint64_t(64) << 20;
  try {
    const ZipReader zip(src, limits);
    for (const ZipEntry& e : zip.entries()) {
      try {
        auto in = zip.open_member(e);
        (void)read_npy(*in);
      } catch (const Error&) {}
    }
  } catch (const Error&) {}
  try {
    RangeStream in(src, 0, src->size());
    (void)read_npy(in);
  } catch (const Error&) {}
  return 0;
}
