#include "runtime/caching_pool.h"

#include <bit>

#include "kernels/common.h"
#include "runtime/error.h"

namespace gnn {

CachingPool::CachingPool(std::string name, RawAlloc raw_alloc, RawFree raw_free)
    : name_(std::move(name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

CachingPool::~CachingPool() { empty_cache(); }

size_t CachingPool::size_class(size_t bytes) {
  constexpr size_t kSmallStep = 512, kSmallLimit = size_t(1) << 20;
  if (bytes <= kSmallLimit) return round_up<size_t>(bytes == 0 ? 1 : bytes, kSmallStep);
  const int k = std::bit_width(bytes) - 1;  // 2^k <= bytes < 2^(k+1)
  return round_up<size_t>(bytes, size_t(1) << (k - 2));
}

void* CachingPool::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= int64_t(cls);
  } else {
    p = raw_alloc_(cls);
    if (p == nullptr) {  // release everything cached and try once more
      release_cached_locked();
      p = raw_alloc_(cls);
    }
    GNN_CHECK(p != nullptr, name_, ": out of memory allocating ", bytes, " bytes (", stats_.current_bytes,
              " in use, peak ", stats_.peak_bytes, ")");
    stats_.reserved_bytes += int64_t(cls);
  }
  live_.emplace(p, cls);
  stats_.current_bytes += int64_t(cls);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.live_allocations += 1;
  stats_.total_allocations += 1;
  return p;
}

void CachingPool::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  GNN_CHECK(it != live_.end(), name_, ": freeing a pointer it did not allocate");
  const size_t cls = it->second;
  live_.erase(it);
  free_[cls].push_back(p);
  stats_.current_bytes -= int64_t(cls);
  stats_.cached_bytes += int64_t(cls);
  stats_.live_allocations -= 1;
}

void CachingPool::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void CachingPool::release_cached_locked() {
  for (auto& [cls, blocks] : free_)
    for (void* b : blocks) raw_free_(b), stats_.reserved_bytes -= int64_t(cls);
  free_.clear();
  stats_.cached_bytes = 0;
}

MemoryStats CachingPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
}

}  // namespace gnn
