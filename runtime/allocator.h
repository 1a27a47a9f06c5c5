// Memory accounting: 64-byte aligned host allocations with current/peak statistics, and the shape
// of the statistics the CUDA caching allocator reports (runtime/cuda.h). Host blocks of 1 MiB and up
// come from a cache of freed blocks (runtime/host_cache.h) so a step does not fault its pages in again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"

namespace gnn {

struct MemoryStats {
  int64_t current_bytes = 0;  // in use by live buffers
  int64_t peak_bytes = 0;  // high-water mark of current_bytes since start or reset_peak
  int64_t live_allocations = 0;  // buffers alive now
  int64_t total_allocations = 0;  // buffers ever handed out
  int64_t reserved_bytes = 0;  // held from the system: in use plus cached, whole size classes
  int64_t cached_bytes = 0;  // freed blocks kept for reuse
  int64_t reused_allocations = 0;  // served from the cache (host: blocks of 1 MiB and up, runtime/host_cache.h)
};

inline constexpr size_t kHostAlignment = 64;

// Returns nullptr for 0 bytes; throws MemoryLimitError when the allocation would take the bytes in use
// past host_set_limit's limit, or when the system refuses it (its limit is then 0).
void* host_alloc(size_t bytes);
void host_free(void* p, size_t bytes);
MemoryStats host_memory_stats();
void host_reset_peak();
void host_empty_cache();  // cached host blocks back to the system

// A ceiling on the bytes host_alloc hands out (0: none). Tensors alone count, not other containers, so a
// process should leave itself some room under the machine's memory. Returns the previous limit.
int64_t host_set_limit(int64_t bytes);
int64_t host_limit();

class MemoryLimitError : public Error {
 public:
  MemoryLimitError(std::string message, std::string where, int64_t requested, int64_t in_use, int64_t limit)
      : Error(std::move(message), std::move(where)), requested(requested), in_use(in_use), limit(limit) {}
  int64_t requested, in_use, limit;
};

}  // namespace gnn
