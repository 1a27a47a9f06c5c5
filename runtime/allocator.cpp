#include "runtime/allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "base/common.h"
#include "base/error.h"
#include "runtime/host_cache.h"

namespace gnn {
namespace {
std::atomic<int64_t> g_current{0}, g_peak{0}, g_live{0}, g_total{0}, g_limit{0}, g_small{0};

// Large buffers sit on 2 MiB boundaries and ask for transparent huge pages, as numpy does: on a VM
// first-touching 1 GiB of 4 KiB pages took 0.72-0.82 s here, against 0.14 s with huge pages.
constexpr size_t kHugeThreshold = HostCache::kHugeBytes, kHugePage = HostCache::kHugePage;

void* system_alloc(size_t bytes) {
  const bool huge = bytes >= kHugeThreshold;
  const size_t align = huge ? kHugePage : kHostAlignment;
  void* p = std::aligned_alloc(align, round_up(bytes, align));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p && huge) madvise(p, round_up(bytes, align), MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  return p;
}

// Blocks of 1 MiB and up go through the cache (runtime/host_cache.h) unless GNN_HOST_CACHE=0, read
// once, turns it off for the process (an A/B of the same build). Never destroyed: tensors in static
// storage may be freed after main returns.
HostCache* host_cache() {
  static HostCache* cache = [] {
    const char* env = std::getenv("GNN_HOST_CACHE");
    return env && std::string_view(env) == "0" ? nullptr : new HostCache(system_alloc, [](void* p) { std::free(p); });
  }();
  return cache;
}
}  // namespace

void* host_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  GNN_CHECK(bytes <= size_t(INT64_MAX) / 2, "host allocation of ", bytes, " bytes: too large");
  // The bytes are reserved before the system is asked, so threads allocating at once cannot pass the
  // limit together; a refusal gives them back.
  const int64_t now = g_current.fetch_add(int64_t(bytes)) + int64_t(bytes);
  if (const int64_t limit = g_limit.load(); limit > 0 && now > limit) {
    g_current.fetch_sub(int64_t(bytes));
    const int64_t in_use = now - int64_t(bytes);
    throw MemoryLimitError(detail::str_cat("an allocation of ", bytes, " bytes with ", in_use,
                                           " in use would pass the memory limit of ", limit, " bytes"),
                           "runtime/allocator.cpp", int64_t(bytes), in_use, limit);
  }
  HostCache* cache = bytes >= HostCache::kMinBytes ? host_cache() : nullptr;
  void* p = cache ? cache->take(bytes, g_limit.load()) : system_alloc(bytes);
  if (p == nullptr) {  // (the system's limit: `ulimit -v` or `-d`, a cgroup, the machine's memory)
    g_current.fetch_sub(int64_t(bytes));
    const int64_t in_use = now - int64_t(bytes);
    throw MemoryLimitError(detail::str_cat("host allocation of ", bytes, " bytes failed (", in_use, " bytes in use)"),
                           "runtime/allocator.cpp", int64_t(bytes), in_use, 0);
  }
  if (!cache) g_small.fetch_add(int64_t(bytes));
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {}
  g_live.fetch_add(1);
  g_total.fetch_add(1);
  return p;
}

void host_free(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (HostCache* cache = bytes >= HostCache::kMinBytes ? host_cache() : nullptr) {
    cache->give(p);
  } else {
    std::free(p);
    g_small.fetch_sub(int64_t(bytes));
  }
  g_current.fetch_sub(int64_t(bytes));
  g_live.fetch_sub(1);
}

MemoryStats host_memory_stats() {
  MemoryStats s;
  s.current_bytes = g_current.load();
  s.reserved_bytes = g_small.load();
  if (const HostCache* cache = host_cache()) {
    const HostCacheStats c = cache->stats();
    s.reserved_bytes += c.reserved_bytes;
    s.cached_bytes = c.cached_bytes;
    s.reused_allocations = c.reused;
  }
  s.peak_bytes = g_peak.load();
  s.live_allocations = g_live.load();
  s.total_allocations = g_total.load();
  return s;
}

void host_empty_cache() {
  if (HostCache* cache = host_cache()) cache->release();
}

void host_reset_peak() { g_peak.store(g_current.load()); }

int64_t host_set_limit(int64_t bytes) { return g_limit.exchange(bytes > 0 ? bytes : 0); }
int64_t host_limit() { return g_limit.load(); }

}  // namespace gnn
