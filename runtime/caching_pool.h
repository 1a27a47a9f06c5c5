// A caching allocator over any raw allocator (cudaMalloc in runtime/cuda.cpp; a counting fake in the
// tests). Freed blocks go to a free list per size class and are handed out again for a request of the
// same class, so a training loop that allocates the same shapes every step stops calling cudaMalloc
// (and its implicit device synchronisation) after the first step.
//
// Size classes: multiples of 512 B up to 1 MiB, then four classes per power of two (2^k * {1, 1.25,
// 1.5, 1.75}), so a block wastes at most 25% (and at most 511 B below 1 MiB).
// When the raw allocator fails, the cache is released and the request retried once, unless the caller
// asks for OnOom::kFail (a CUDA graph capture in progress: freeing memory there could take blocks its
// captured work uses, and cudaFree / cudaFreeHost may wait for the device, which a capture cannot hold).
// Blocks are not tagged with streams: the engine runs all work of a device on one stream.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/allocator.h"

namespace gnn {

class CachingPool {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // nullptr when out of memory
  using RawFree = std::function<void(void*)>;

  CachingPool(std::string name, RawAlloc raw_alloc, RawFree raw_free);
  ~CachingPool();  // returns cached blocks; live blocks belong to their owners
  CachingPool(const CachingPool&) = delete;
  CachingPool& operator=(const CachingPool&) = delete;

  enum class OnOom { kReleaseAndRetry, kFail };
  // nullptr for 0 bytes; throws gnn::Error when memory runs out
  void* allocate(size_t bytes, OnOom on_oom = OnOom::kReleaseAndRetry);
  void deallocate(void* p);  // p must come from allocate
  void empty_cache();
  MemoryStats stats() const;
  void reset_peak();

  static size_t size_class(size_t bytes);

 private:
  void release_cached_locked();

  std::string name_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> its class size
  std::map<size_t, std::vector<void*>> free_;  // class size -> cached blocks
  MemoryStats stats_;
};

// A device's allocations: its main caching pool, and the private pools of its CUDA graphs. While a
// capture is open (begin_private .. end_private), allocations come from a private pool made for it:
// the captured kernels use those addresses on every replay, so the blocks must never go back to the
// main pool while the graph exists. A block freed during the capture returns to the private pool and
// is handed out again within the same capture (replays follow the same order). A main-pool block
// freed during the capture is held back until the graph is gone: captured work may still read or
// write it on replay. The private pool lives while its graph (the handle begin_private returns) or any
// of its blocks does; then its memory is released. It never releases its cached blocks before that (they
// are the addresses of the captured work): an allocation that does not fit fails the capture instead.
class PoolSet {
 public:
  PoolSet(std::string name, CachingPool::RawAlloc raw_alloc, CachingPool::RawFree raw_free);
  ~PoolSet();
  PoolSet(const PoolSet&) = delete;
  PoolSet& operator=(const PoolSet&) = delete;

  void* allocate(size_t bytes);
  void deallocate(void* p);
  CachingPool& main() { return main_; }

  bool capturing() const;
  std::shared_ptr<void> begin_private();  // throws if a capture is already open; the handle keeps the pool
  void end_private();
  MemoryStats private_stats() const;  // summed over the live private pools (current, reserved, cached)

 private:
  struct Private;
  std::string name_;
  CachingPool::RawAlloc raw_alloc_;
  CachingPool::RawFree raw_free_;
  CachingPool main_;
  mutable std::mutex mu_;
  std::shared_ptr<Private> open_;  // the capture in progress
  std::unordered_map<void*, std::shared_ptr<Private>> private_live_;  // private block -> its pool
  std::vector<std::weak_ptr<Private>> privates_;  // for private_stats
};

}  // namespace gnn
