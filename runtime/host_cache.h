// The host's cache of large freed blocks, so a training step that frees its activations and allocates
// the same shapes again the next step gets the same, already mapped pages back instead of new ones the
// kernel must fault in and zero. On a 10,000-node program (layout-tgraph, 64 configs per step, 1.7 GB
// of activations) the kernel's page clearing was 30% of the step (docs/benchmarks.md).
//
// Blocks of kMinBytes and up only (smaller ones stay with malloc, whose heap keeps them mapped).
// A request takes the smallest cached block of its size class or larger, up to twice the class, else
// a fresh one (eight classes per power of two). Bounded without a flag: before a fresh
// block is taken, cached blocks are released, oldest first, until the bytes held (in use plus cached)
// fit under the larger of an eighth above the high-water mark of the blocks in use (at their full
// sizes: a block up to twice its class may serve a request) and what the request needs, and under the
// limit when one is set. So the cache never makes the process hold more than an eighth above its own
// peak of blocks in use, and a process whose shapes change (graphs of other sizes, evaluation after
// training) trades its stale blocks for new ones. The eighth: a step may hold small blocks early and
// large ones later, and keeping both cached takes more than the peak, which never had both in use;
// small blocks of up to an eighth of the peak now stay (docs/benchmarks.md, the nineteenth session).
// A raw allocation that fails releases the whole cache and is tried once more.
//
// Under AddressSanitizer a cached block is poisoned and a block handed out is unpoisoned only up to the
// bytes asked for, so a use after free and an overrun into a block's slack are still reported.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gnn {

struct HostCacheStats {
  int64_t reserved_bytes = 0;  // held from the system: blocks in use plus cached
  int64_t cached_bytes = 0;  // freed blocks kept for reuse
  int64_t peak_live_bytes = 0;  // high-water mark of the blocks in use (their full sizes)
  int64_t reused = 0;  // requests served from the cache
  int64_t fresh = 0;  // requests that took a new block from the system
  int64_t released = 0;  // cached blocks given back to the system
};

class HostCache {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // nullptr when the system refuses
  using RawFree = std::function<void(void*)>;
  static constexpr size_t kMinBytes = size_t(1) << 20;
  // blocks from 4 MiB on sit on 2 MiB boundaries for transparent huge pages (runtime/allocator.cpp), so
  // their classes are whole multiples of 2 MiB: the bytes counted are the bytes held
  static constexpr size_t kHugeBytes = size_t(4) << 20, kHugePage = size_t(2) << 20;

  HostCache(RawAlloc raw_alloc, RawFree raw_free) : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}
  ~HostCache() { release(); }
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  // A block of at least `bytes` (>= 1), or nullptr when the system refuses even with the cache released.
  // `limit` > 0: the bytes held stay under it where releasing cached blocks can make them.
  void* take(size_t bytes, int64_t limit);
  void give(void* p);  // p from take and in use: anything else is refused (a double free)
  void release();  // every cached block back to the system
  HostCacheStats stats() const;

  // eight classes per power of two (whole 2 MiB from 4 MiB on): a block is at most 12.5% larger than
  // asked, or 2 MiB
  static size_t size_class(size_t bytes);

 private:
  struct Cached {
    void* p;
    uint64_t stamp;  // order of caching: the oldest go first
  };
  void evict_oldest_locked();

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> its size
  std::map<size_t, std::vector<Cached>> free_;  // size -> cached blocks
  int64_t live_bytes_ = 0;
  uint64_t clock_ = 0;
  HostCacheStats s_;
};

}  // namespace gnn
