#include "runtime/caching_pool.h"

#include <bit>

#include "base/common.h"
#include "base/error.h"

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

void* CachingPool::allocate(size_t bytes, OnOom on_oom) {
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
    if (p == nullptr && on_oom == OnOom::kReleaseAndRetry) {  // release everything cached and try once more
      release_cached_locked();
      p = raw_alloc_(cls);
    }
    GNN_CHECK(p != nullptr, name_, ": out of memory allocating ", bytes, " bytes (", stats_.current_bytes,
              " in use, peak ", stats_.peak_bytes,
              on_oom == OnOom::kFail ? ", inside a CUDA graph capture, which keeps its cache)" : ")");
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

struct PoolSet::Private {
  CachingPool pool;
  std::vector<void*> held_main;  // main blocks freed during the capture, returned when the graph is gone
  CachingPool* main;
  Private(const std::string& name, CachingPool::RawAlloc a, CachingPool::RawFree f, CachingPool* main_pool)
      : pool(name, std::move(a), std::move(f)), main(main_pool) {}
};

namespace {

// What begin_private hands out: the graph's share of its private pool. When the graph goes, no replay can
// touch the main blocks held back for it, so they return to the main pool then; the private pool itself
// stays while any of its blocks lives.
template <class P>
struct GraphShare {
  std::shared_ptr<P> p;
  ~GraphShare() {
    if (p->main)
      for (void* b : p->held_main) p->main->deallocate(b);
    p->held_main.clear();
  }
};

}  // namespace

PoolSet::PoolSet(std::string name, CachingPool::RawAlloc raw_alloc, CachingPool::RawFree raw_free)
    : name_(name), raw_alloc_(raw_alloc), raw_free_(raw_free), main_(std::move(name), raw_alloc_, raw_free_) {}

PoolSet::~PoolSet() {
  // Private pools still referenced (a graph or a block outliving the device's allocator at exit) keep
  // their memory; they must not hand blocks back to main_, which is going away.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : privates_)
    if (auto p = w.lock()) p->held_main.clear(), p->main = nullptr;
}

void* PoolSet::allocate(size_t bytes) {
  std::shared_ptr<Private> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open = open_;
  }
  if (!open) return main_.allocate(bytes);
  void* p = open->pool.allocate(bytes, CachingPool::OnOom::kFail);  // its cached blocks are the graph's
  if (p) {
    std::lock_guard<std::mutex> lock(mu_);
    private_live_[p] = open;
  }
  return p;
}

void PoolSet::deallocate(void* p) {
  if (p == nullptr) return;
  std::shared_ptr<Private> owner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = private_live_.find(p);
    if (it != private_live_.end()) {
      owner = std::move(it->second);
      private_live_.erase(it);
    } else if (open_) {
      open_->held_main.push_back(p);  // captured work may use it on replay: kept from main_ until the graph goes
      return;
    }
  }
  if (owner) owner->pool.deallocate(p);  // then, if this was the last reference, the pool is released
  else main_.deallocate(p);
}

bool PoolSet::capturing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_ != nullptr;
}

std::shared_ptr<void> PoolSet::begin_private() {
  std::lock_guard<std::mutex> lock(mu_);
  GNN_CHECK(!open_, name_, ": a CUDA graph capture is already open");
  open_ = std::make_shared<Private>(name_ + " (graph)", raw_alloc_, raw_free_, &main_);
  privates_.push_back(open_);
  std::erase_if(privates_, [](const std::weak_ptr<Private>& w) { return w.expired(); });
  return std::make_shared<GraphShare<Private>>(GraphShare<Private>{open_});
}

void PoolSet::end_private() {
  std::lock_guard<std::mutex> lock(mu_);
  open_.reset();
}

MemoryStats PoolSet::private_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats out;
  for (const auto& w : privates_)
    if (auto p = w.lock()) {
      const MemoryStats s = p->pool.stats();
      out.current_bytes += s.current_bytes, out.reserved_bytes += s.reserved_bytes, out.cached_bytes += s.cached_bytes;
      out.live_allocations += s.live_allocations, out.total_allocations += s.total_allocations;
    }
  return out;
}

}  // namespace gnn
