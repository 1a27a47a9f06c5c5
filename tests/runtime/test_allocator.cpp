#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "runtime/caching_pool.h"
#include "runtime/host_cache.h"
#include "runtime/tensor.h"
#include "testing.h"

using namespace gnn;

TEST_CASE("host allocator: current and peak bytes follow tensors") {
  host_reset_peak();
  const MemoryStats before = host_memory_stats();
  {
    Tensor a = Tensor::empty({1000}, DType::F64);  // 8000 bytes
    const MemoryStats mid = host_memory_stats();
    CHECK(mid.current_bytes == before.current_bytes + 8000);
    CHECK(mid.live_allocations == before.live_allocations + 1);
    CHECK(mid.peak_bytes >= mid.current_bytes);
    Tensor view = a.slice(0, 10);  // views allocate nothing
    CHECK(host_memory_stats().current_bytes == mid.current_bytes);
  }
  const MemoryStats after = host_memory_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 8000);
  CHECK(after.total_allocations == before.total_allocations + 1);
  host_reset_peak();
  CHECK(host_memory_stats().peak_bytes == after.current_bytes);
}

// A raw allocator that counts calls and can be told to fail, standing in for cudaMalloc.
struct FakeMemory {
  std::set<void*> live;
  int64_t raw_allocs = 0, raw_frees = 0;
  int64_t capacity = int64_t(1) << 40, used = 0;
  std::map<void*, size_t> sizes;
  void* alloc(size_t n) {
    if (used + int64_t(n) > capacity) return nullptr;
    void* p = ::operator new(n);
    live.insert(p), sizes[p] = n, used += int64_t(n), ++raw_allocs;
    return p;
  }
  void free(void* p) {
    live.erase(p), used -= int64_t(sizes[p]), sizes.erase(p), ++raw_frees;
    ::operator delete(p);
  }
};

// A caching pool over it.
struct FakeDevice : FakeMemory {
  CachingPool pool{"fake", [this](size_t n) { return alloc(n); }, [this](void* p) { free(p); }};
};

TEST_CASE("caching pool: size classes") {
  CHECK(CachingPool::size_class(1) == 512);
  CHECK(CachingPool::size_class(512) == 512);
  CHECK(CachingPool::size_class(513) == 1024);
  CHECK(CachingPool::size_class(1 << 20) == 1 << 20);
  CHECK(CachingPool::size_class((1 << 20) + 1) == (1 << 20) + (1 << 18));
  CHECK(CachingPool::size_class(3 << 20) == 3 << 20);
  for (size_t n : {size_t(1) << 21, size_t(5000000), size_t(123456789), size_t(1) << 33}) {
    const size_t c = CachingPool::size_class(n);
    CHECK(c >= n);
    CHECK(double(c) <= 1.25 * double(n) + 512);
    CHECK(CachingPool::size_class(c) == c);  // classes are fixed points
  }
}

TEST_CASE("caching pool: reuses freed blocks of the same class, and reports bytes") {
  FakeDevice dev;
  void* a = dev.pool.allocate(1000);
  void* b = dev.pool.allocate(3000);
  CHECK(dev.raw_allocs == 2);
  MemoryStats s = dev.pool.stats();
  CHECK(s.current_bytes == 1024 + 3072);
  CHECK(s.live_allocations == 2);
  dev.pool.deallocate(a);
  s = dev.pool.stats();
  CHECK(s.current_bytes == 3072);
  CHECK(s.cached_bytes == 1024);
  CHECK(s.reserved_bytes == 1024 + 3072);
  void* c = dev.pool.allocate(900);  // same class as a: served from the cache
  CHECK(c == a);
  CHECK(dev.raw_allocs == 2);
  void* d = dev.pool.allocate(5000);  // new class: a real allocation
  CHECK(dev.raw_allocs == 3);
  CHECK(dev.pool.stats().peak_bytes == 1024 + 3072 + 5120);
  for (void* p : {b, c, d}) dev.pool.deallocate(p);
  CHECK(dev.pool.stats().current_bytes == 0);
  CHECK(dev.raw_frees == 0);  // cached, not returned
  dev.pool.empty_cache();
  CHECK(dev.raw_frees == 3);
  CHECK(dev.pool.stats().reserved_bytes == 0);
  CHECK(dev.live.empty());
  CHECK(dev.pool.allocate(0) == nullptr);
}

TEST_CASE("caching pool: out of memory releases the cache and retries, then fails with a message") {
  FakeDevice dev;
  dev.capacity = 8192;
  void* a = dev.pool.allocate(4096);
  dev.pool.deallocate(a);  // 4096 cached
  void* b = dev.pool.allocate(6000);  // needs the cached block released first
  CHECK(b != nullptr);
  CHECK(dev.raw_frees == 1);
  CHECK_THROWS_WITH_AS(dev.pool.allocate(4000), doctest::Contains("fake: out of memory allocating 4000 bytes"), Error);
  CHECK_THROWS_WITH_AS(dev.pool.deallocate(&dev), doctest::Contains("did not allocate"), Error);
  dev.pool.deallocate(b);
}

// The host's block cache over the same fake memory.
struct FakeHost : FakeMemory {
  HostCache cache{[this](size_t n) { return alloc(n); }, [this](void* p) { free(p); }};
};
constexpr size_t kMiB = size_t(1) << 20;

TEST_CASE("host cache: a freed block comes back for the same shape, and a near one") {
  FakeHost h;
  void* a = h.cache.take(3 * kMiB, 0);
  h.cache.give(a);
  CHECK(h.cache.stats().cached_bytes == int64_t(3 * kMiB));
  CHECK(h.cache.take(3 * kMiB, 0) == a);  // the same pages again: no new block
  CHECK(h.raw_allocs == 1);
  h.cache.give(a);
  void* b = h.cache.take(2 * kMiB, 0);  // class 2 MiB: a 3 MiB block is within twice that
  CHECK(b == a);
  h.cache.give(b);
  // class 1.125 MiB: 3 MiB is more than twice that, so a new block; holding both (4.125 MiB) would pass
  // an eighth above the peak in use (3.375 MiB), so the cached one goes back to the system first
  void* c = h.cache.take(kMiB + 1, 0);
  CHECK(h.raw_allocs == 2);
  CHECK(h.raw_frees == 1);
  const HostCacheStats s = h.cache.stats();
  CHECK(s.reused == 2);
  CHECK(s.fresh == 2);
  CHECK(s.released == 1);
  CHECK(s.reserved_bytes == int64_t(HostCache::size_class(kMiB + 1)));
  h.cache.give(c);
  CHECK_THROWS_WITH_AS(h.cache.give(c), doctest::Contains("freed twice"), Error);  // never handed out twice
  h.cache.release();
  CHECK(h.live.empty());
  CHECK(h.cache.stats().reserved_bytes == 0);
}

TEST_CASE("host cache: the bytes held stay within an eighth above the peak in use, and under a limit") {
  FakeHost h;
  void* a = h.cache.take(8 * kMiB, 0);
  void* b = h.cache.take(8 * kMiB, 0);
  h.cache.give(a);
  h.cache.give(b);  // 16 MiB cached; the peak in use was 16 MiB
  void* c = h.cache.take(20 * kMiB, 0);  // fits neither: the oldest cached block (a) goes, then b
  HostCacheStats s = h.cache.stats();
  CHECK(s.released == 2);
  CHECK(s.reserved_bytes == int64_t(20 * kMiB));
  CHECK(h.live.size() == 1);
  h.cache.give(c);  // the peak in use is now 20 MiB
  // c (20 MiB) is too large to serve 2 MiB; holding both, 22 MiB, is within an eighth above the peak
  // (22.5 MiB), so c stays: a step whose small blocks are free while its large ones peak keeps them all
  void* d = h.cache.take(2 * kMiB, 0);
  s = h.cache.stats();
  CHECK(s.released == 2);
  CHECK(s.reserved_bytes == int64_t(22 * kMiB));
  void* e = h.cache.take(3 * kMiB, 0);  // 25 MiB would pass 22.5: the cached c goes
  s = h.cache.stats();
  CHECK(s.released == 3);
  CHECK(s.reserved_bytes == int64_t(5 * kMiB));
  h.cache.give(d);
  h.cache.give(e);
  // under a limit of 11.5 MiB an 8 MiB request (which neither cached block serves) releases the oldest
  // cached block, d: the 3 MiB of e and the request then fit
  void* f = h.cache.take(8 * kMiB, int64_t(23 * kMiB / 2));
  s = h.cache.stats();
  CHECK(s.released == 4);
  CHECK(s.reserved_bytes == int64_t(11 * kMiB));
  CHECK(s.cached_bytes == int64_t(3 * kMiB));
  h.cache.give(f);
}

// A training step's pattern (layout-sage-6th's): a few small blocks live at the step's start and are
// freed before its large blocks peak. The most of each size live at once (2 small + 3 large) is more than the
// most live at once in all (3 large); with no slack above the peak, each step released a large block to
// take its small ones fresh and took the large one fresh again at the peak.
TEST_CASE("host cache: a repeated step takes no fresh blocks after its first two steps") {
  FakeHost h;
  auto step = [&] {
    void* s1 = h.cache.take(kMiB, 0);
    void* s2 = h.cache.take(kMiB, 0);
    h.cache.give(s1);
    h.cache.give(s2);
    void* l[3];
    for (void*& p : l) p = h.cache.take(8 * kMiB, 0);
    for (void* p : l) h.cache.give(p);
  };
  step();
  step();
  const HostCacheStats s = h.cache.stats();
  for (int i = 0; i < 5; ++i) step();
  CHECK(h.cache.stats().fresh == s.fresh);
  CHECK(h.cache.stats().released == s.released);
  CHECK(h.cache.stats().reserved_bytes == int64_t(26 * kMiB));  // within an eighth above the 24 MiB peak
  CHECK(h.cache.stats().reused == s.reused + 25);
}

TEST_CASE("host cache: a system refusal releases the cache and tries once more") {
  FakeHost h;
  void* a = h.cache.take(8 * kMiB, 0);
  void* b = h.cache.take(8 * kMiB, 0);
  h.cache.give(a);
  h.cache.give(b);  // 16 MiB cached, the peak in use (the bound 18 MiB)
  h.capacity = int64_t(9 * kMiB);  // the system now has less than that
  void* c = h.cache.take(3 * kMiB, 0);  // a goes to make room under the bound; the system refuses with b held
  CHECK(c != nullptr);
  CHECK(h.cache.stats().released == 2);
  CHECK(h.cache.stats().cached_bytes == 0);
  CHECK(h.cache.take(8 * kMiB, 0) == nullptr);  // nothing cached and nothing left: refused
  h.cache.give(c);
}

TEST_CASE("host allocator: tensors of 1 MiB and up reuse freed blocks, and the statistics say so") {
  if (const char* off = std::getenv("GNN_HOST_CACHE"); off && std::string(off) == "0") {
    MESSAGE("SKIP: GNN_HOST_CACHE=0 turns the host cache off in this process");
    return;
  }
  host_empty_cache();
  const MemoryStats before = host_memory_stats();
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::F32);  // 4 MiB
    first = t.data();
  }
  const MemoryStats mid = host_memory_stats();
  CHECK(mid.current_bytes == before.current_bytes);  // in use: as before
  CHECK(mid.cached_bytes >= int64_t(4 * kMiB));
  CHECK(mid.reserved_bytes >= mid.current_bytes + mid.cached_bytes);
  {
    Tensor t = Tensor::empty({1 << 20}, DType::F32);
    CHECK(t.data() == first);
  }
  CHECK(host_memory_stats().reused_allocations == mid.reused_allocations + 1);
  host_empty_cache();
  CHECK(host_memory_stats().cached_bytes == 0);
}

TEST_CASE("cuda allocator: caching and statistics on the device") {
  GNN_SKIP_UNLESS_CUDA();
  cuda_empty_cache(0);
  const MemoryStats before = cuda_memory_stats(0);
  { Tensor t = Tensor::empty({1 << 20}, DType::F32, Device::cuda(0)); }
  const MemoryStats mid = cuda_memory_stats(0);
  CHECK(mid.current_bytes == before.current_bytes);
  CHECK(mid.cached_bytes >= 4 << 20);
  { Tensor t = Tensor::empty({1 << 20}, DType::F32, Device::cuda(0)); }
  CHECK(cuda_memory_stats(0).reserved_bytes == mid.reserved_bytes);  // reused, not reallocated
}

// The same fake device under a PoolSet: the main pool and the private pools of CUDA graph captures.
struct FakePoolSet : FakeMemory {
  PoolSet pools{"fake", [this](size_t n) { return alloc(n); }, [this](void* p) { free(p); }};
};

TEST_CASE("pool set: a capture allocates from its own pool, reuses within it, and releases it with the last owner") {
  FakePoolSet d;
  void* before = d.pools.allocate(1000);  // a main block, live across the capture
  void* cached = d.pools.allocate(1000);
  d.pools.deallocate(cached);  // main now caches a 1 KiB block
  CHECK(d.pools.main().stats().cached_bytes == 1024);
  std::shared_ptr<void> graph = d.pools.begin_private();
  CHECK(d.pools.capturing());
  CHECK_THROWS_WITH_AS(d.pools.begin_private(), doctest::Contains("already open"), Error);
  void* a = d.pools.allocate(1000);
  CHECK(a != cached);  // not the main pool's cached block: the graph's blocks are its own
  d.pools.deallocate(a);
  void* b = d.pools.allocate(1000);
  CHECK(b == a);  // freed within the capture: handed out again within it, as every replay will do
  void* kept = d.pools.allocate(5000);  // an output the captured work leaves behind
  d.pools.deallocate(before);  // a main block freed during the capture: held back, not cached
  CHECK(d.pools.main().stats().cached_bytes == 1024);
  d.pools.deallocate(b);
  d.pools.end_private();
  CHECK(!d.pools.capturing());
  CHECK(d.pools.private_stats().current_bytes == 5120);
  CHECK(d.pools.main().stats().current_bytes == 1024);  // `before` still counts: the graph may use it
  void* after = d.pools.allocate(1000);
  CHECK(after == cached);  // eager allocations come from main again, never from the graph's blocks
  d.pools.deallocate(after);
  const int64_t frees = d.raw_frees;
  graph.reset();  // the graph is gone, but `kept` still lives: its pool stays
  CHECK(d.raw_frees == frees);
  CHECK(d.pools.main().stats().cached_bytes == 2048);  // `before` went back to main with the graph
  CHECK(d.pools.private_stats().current_bytes == 5120);
  d.pools.deallocate(kept);  // the last owner: the private pool releases its blocks (a/b and kept)
  CHECK(d.raw_frees == frees + 2);
  CHECK(d.pools.private_stats().reserved_bytes == 0);
  d.pools.main().empty_cache();
  CHECK(d.live.empty());
}

TEST_CASE("pool set: a capture whose graph is dropped at once releases everything it allocated") {
  FakePoolSet d;
  {
    std::shared_ptr<void> graph = d.pools.begin_private();
    void* p = d.pools.allocate(100);
    d.pools.deallocate(p);
    d.pools.end_private();
  }
  CHECK(d.raw_allocs == 1);
  CHECK(d.raw_frees == 1);
  CHECK(d.live.empty());
  CHECK_THROWS_WITH_AS(d.pools.deallocate(reinterpret_cast<void*>(0x10)), doctest::Contains("did not allocate"), Error);
}

TEST_CASE("pool set: out of memory inside a capture fails it and frees nothing the graph uses") {
  FakePoolSet d;
  d.capacity = 8192;
  void* m = d.pools.allocate(2048);
  d.pools.deallocate(m);  // main caches 2 KiB: outside a capture, released to make room
  std::shared_ptr<void> graph = d.pools.begin_private();
  void* a = d.pools.allocate(4096);  // captured work writes a, then frees it: a's address is in the graph
  d.pools.deallocate(a);
  CHECK_THROWS_WITH_AS(d.pools.allocate(3000), doctest::Contains("inside a CUDA graph capture"), Error);
  CHECK(d.raw_frees == 0);  // a, the graph's block, was not freed mid-capture
  CHECK(d.live.count(a) == 1);
  d.pools.end_private();
  graph.reset();  // the failed capture's graph goes: its pool returns its memory
  CHECK(d.raw_frees == 1);
  void* b = d.pools.allocate(7000);  // eager again: main releases its cache and retries
  CHECK(b != nullptr);
  CHECK(d.raw_frees == 2);
  d.pools.deallocate(b);
  d.pools.main().empty_cache();
  CHECK(d.live.empty());
}
