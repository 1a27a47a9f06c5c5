#include "runtime/host_cache.h"

#include <algorithm>
#include <bit>

#include "base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GNN_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define GNN_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define GNN_POISON(p, n) ((void)(p), (void)(n))
#define GNN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace gnn {

size_t HostCache::size_class(size_t bytes) {
  const int k = std::bit_width(bytes) - 1;  // 2^k <= bytes < 2^(k+1)
  size_t step = k < 3 ? 1 : size_t(1) << (k - 3);
  if (bytes >= kHugeBytes) step = std::max(step, kHugePage);  // what the system allocation rounds to anyway
  return (bytes + step - 1) / step * step;
}

void* HostCache::take(size_t bytes, int64_t limit) {
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  size_t size = cls;
  if (auto it = free_.lower_bound(cls); it != free_.end() && it->first <= 2 * cls) {
    // the most recently cached block of the smallest fitting size: its pages are the likeliest in cache
    size = it->first;
    p = it->second.back().p;
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    s_.cached_bytes -= int64_t(size);
    ++s_.reused;
  } else {
    const int64_t need = live_bytes_ + int64_t(cls);
    // an eighth of slack: a step's small blocks, freed before its large ones peak, stay cached beside them
    int64_t room = std::max(s_.peak_live_bytes + s_.peak_live_bytes / 8, need);
    if (limit > 0) room = std::min(room, std::max(limit, need));
    while (s_.cached_bytes > 0 && s_.reserved_bytes + int64_t(cls) > room) evict_oldest_locked();
    p = raw_alloc_(cls);
    if (p == nullptr) {
      while (s_.cached_bytes > 0) evict_oldest_locked();
      p = raw_alloc_(cls);
    }
    if (p == nullptr) return nullptr;
    s_.reserved_bytes += int64_t(cls);
    ++s_.fresh;
  }
  GNN_UNPOISON(p, bytes);
  GNN_POISON(static_cast<char*>(p) + bytes, size - bytes);
  live_.emplace(p, size);
  live_bytes_ += int64_t(size);
  s_.peak_live_bytes = std::max(s_.peak_live_bytes, live_bytes_);
  return p;
}

void HostCache::give(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = live_.find(p);
  // a second free of the same block (or a foreign pointer): caching it would hand it to two owners
  GNN_CHECK(it != live_.end(), "host memory: freeing a block of 1 MiB or more that is not in use (freed twice?)");
  const size_t size = it->second;
  live_.erase(it);
  live_bytes_ -= int64_t(size);
  GNN_POISON(p, size);
  free_[size].push_back({p, ++clock_});
  s_.cached_bytes += int64_t(size);
}

void HostCache::evict_oldest_locked() {
  auto oldest = free_.end();
  size_t at = 0;
  for (auto it = free_.begin(); it != free_.end(); ++it)
    for (size_t i = 0; i < it->second.size(); ++i)
      if (oldest == free_.end() || it->second[i].stamp < oldest->second[at].stamp) oldest = it, at = i;
  if (oldest == free_.end()) return;
  void* p = oldest->second[at].p;
  const size_t size = oldest->first;
  oldest->second.erase(oldest->second.begin() + std::ptrdiff_t(at));
  if (oldest->second.empty()) free_.erase(oldest);
  GNN_UNPOISON(p, size);
  raw_free_(p);
  s_.cached_bytes -= int64_t(size);
  s_.reserved_bytes -= int64_t(size);
  ++s_.released;
}

void HostCache::release() {
  std::lock_guard<std::mutex> lock(mu_);
  while (s_.cached_bytes > 0) evict_oldest_locked();
}

HostCacheStats HostCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

}  // namespace gnn
