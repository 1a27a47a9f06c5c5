// Memory accounting: 64-byte aligned host allocations with current/peak statistics, and the shape
// of the statistics the CUDA caching allocator reports (runtime/cuda.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace gnn {

struct MemoryStats {
  int64_t current_bytes = 0;      // in use by live buffers
  int64_t peak_bytes = 0;         // high-water mark of current_bytes since start or reset_peak
  int64_t live_allocations = 0;   // buffers alive now
  int64_t total_allocations = 0;  // buffers ever handed out
  int64_t reserved_bytes = 0;     // held from the system: in use plus cached (equals current on the host)
  int64_t cached_bytes = 0;       // freed blocks kept for reuse (always 0 on the host)
};

inline constexpr size_t kHostAlignment = 64;

// Returns nullptr for 0 bytes; throws gnn::Error when the system refuses.
void* host_alloc(size_t bytes);
void host_free(void* p, size_t bytes);
MemoryStats host_memory_stats();
void host_reset_peak();

}  // namespace gnn
