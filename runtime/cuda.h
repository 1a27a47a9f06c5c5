// The CUDA side of the runtime, callable from any build: in a CPU-only build (runtime/cuda_none.cpp)
// cuda_available() is false and everything else throws gnn::Error saying the build has no CUDA.
// Each device has one compute stream; all work and copies of that device go through it.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/common.h"
#include "runtime/allocator.h"
#include "runtime/dtype.h"

namespace gnn {

bool cuda_available();  // built with CUDA and at least one device usable
std::string cuda_status();  // one line: the devices, or why CUDA cannot be used
int cuda_device_count();  // 0 when unavailable

// The caching allocator (runtime/caching_pool.h) of each device.
void* cuda_alloc(size_t bytes, int device);
void cuda_free(void* p, int device);
MemoryStats cuda_memory_stats(int device);
void cuda_empty_cache(int device);
void cuda_reset_peak(int device);

Stream cuda_stream(int device);
// The device's cuBLAS handle and its workspace (32 MiB, cuBLAS's recommendation for Hopper), created on
// first use and kept for the process (the driver may be gone at exit). Kernels that call cuBLAS take
// it as an argument (kernels/gemm.h). Call it once outside any CUDA graph capture before capturing.
BlasHandle cuda_blas(int device);
// The device's cuSPARSE handle (a cusparseHandle_t), created on first use and kept for the process;
// callers bind it to their stream (kernels/spmm_cusparse.h).
void* cuda_sparse(int device);
void cuda_synchronize(int device);
// Copies between any two devices (host included); returns after the copy is complete, except within one
// device, where it is queued on that device's stream like a kernel.
void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Host to device without waiting for the device: src is copied into a page-locked staging block
// and the transfer is queued on the device's stream (ahead of any work queued after it), so the
// host goes on building the next batch or queuing kernels while the bus moves the data. src may be
// reused or freed as soon as this returns. Staging blocks come from a caching pool of pinned memory
// and go back to it once an event after their transfer has completed; copies above 64 MiB go
// straight from src instead (synchronously) rather than pinning that much.
void cuda_upload(void* dst, int device, const void* src, size_t bytes);
// The same for several host arrays bound for one device buffer: piece i's bytes go to dst + offset, all
// through one staging block and one transfer (one copy call and one event instead of one per array).
struct UploadPiece {
  size_t offset;  // into dst
  const void* src;
  size_t bytes;
};
void cuda_upload(void* dst, int device, const std::vector<UploadPiece>& pieces);
// A CUDA graph of the work fn queues on a device's stream: captured once, replayed with one launch, so
// a step of many small kernels stops paying a host launch per kernel. fn must queue device work only, on
// that stream: no copies to or from the host (cuda_upload refuses them while a capture is open) and no
// synchronisation. fn may allocate: while it is captured, device allocations come from a pool private to
// the graph (runtime/caching_pool.h, PoolSet), whose blocks stay reserved for the graph's replays until
// the graph is destroyed, and buffers from before the capture that fn frees are held back from reuse
// until then too. An allocation that does not fit throws (the pool frees none of the graph's blocks to
// make room), and so does the capture. Tensors fn creates and keeps (outputs, gradients) live in that
// pool: each replay writes them again, as with PyTorch's static graph outputs. Pointers and shapes are
// fixed at capture. Run fn once before capturing it, so that libraries (cuBLAS) and caches set themselves
// up outside it.
// With Uploads::kSnapshot, fn may copy host data up (cuda_upload, Tensor::copy_from, Tensor::to): each
// such copy is captured from a page-locked snapshot of the host bytes taken at capture, which the graph
// keeps, so every replay copies what the host held then, not what it holds at replay. That suits index
// arrays that are the same on every replay (a model's graph structure, checked by the caller, as
// apps/train/step_graph.h does); per-step data must be copied into the graph's inputs before replay.
// Snapshots are limited to 64 MiB per copy (a larger one is refused); when page-locked memory runs out,
// the capture fails.
class CudaGraph {
 public:
  enum class Uploads { kRefuse, kSnapshot };
  // throws, with the stream left usable, on failure
  CudaGraph(int device, const std::function<void()>& fn, Uploads uploads = Uploads::kRefuse);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void replay();  // queues the captured work on the device's stream
 private:
  int device_;
  void* exec_ = nullptr;  // cudaGraphExec_t
  std::shared_ptr<void> pool_;  // the private memory pool of the capture
  std::vector<void*> snapshots_;  // page-locked blocks the captured uploads copy from (Uploads::kSnapshot)
};
// The private pools of the device's live CUDA graphs, summed (cuda_memory_stats covers the main pool).
MemoryStats cuda_graph_memory_stats(int device);

// Work on a stream gnn does not own: the Python module runs its kernels on the stream of the framework
// that owns the arrays (torch's or CuPy's current stream) instead of the device's own stream, so that
// they are ordered with the caller's work as the framework's own ops are.
void cuda_set_device(int device);  // the calling thread's current device: where launches go
int cuda_current_device();
// Stream-ordered memory (cudaMallocAsync's pool): usable by work queued on `stream` after the call, and
// given back when `stream` reaches the free, so later work on that stream may reuse it. The device's
// pool keeps what is freed (its release threshold raised on first use) rather than handing it back to
// the driver at each synchronisation.
void* cuda_alloc_async(size_t bytes, int device, Stream stream);
void cuda_free_async(void* p, int device, Stream stream);
// Within the device, queued on `stream`: rows of `width` bytes, dpitch and spitch bytes apart.
void cuda_copy_2d_on(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows, int device,
                     Stream stream);
// Device to host, queued on `stream` behind the work already there, and waited for.
void cuda_download_on(void* dst, const void* src, size_t bytes, int device, Stream stream);
// Memory outside gnn's pool, for arrays handed out to other libraries: cudaMalloc, and cudaFree (which
// waits for the whole device first, so no stream can still be using the block).
void* cuda_malloc_unpooled(size_t bytes, int device);
void cuda_free_unpooled(void* p, int device);
// A stream of the caller's own (non-blocking), for work that has no framework stream to run on.
Stream cuda_stream_create(int device);
void cuda_stream_destroy(Stream stream, int device);
void cuda_stream_synchronize(Stream stream, int device);
// Waits for the work of every stream of the device.
void cuda_device_synchronize(int device);

// How many times the host has waited for a device since the process started: copies to the host,
// synchronisations, timed events, cudaFree. A GPU training step is fast when the host queues work
// ahead of the device, and each wait drains that queue; gnn train reports the waits per step.
int64_t cuda_host_waits();

// The pinned staging pool's statistics (current: blocks whose transfer may still be in flight).
MemoryStats cuda_pinned_stats();
// Runs fn, which enqueues work on the device's stream, between two events on that stream and returns
// the device time between them in milliseconds (after waiting for the second).
double cuda_time_ms(int device, const std::function<void()>& fn);

}  // namespace gnn
