// The CUDA runtime: device discovery, a caching allocator and a compute stream per device, copies.
#include "runtime/cuda.h"

#include <cublas_v2.h>
#include <cusparse.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "base/cuda_check.h"
#include "runtime/caching_pool.h"

namespace gnn {
namespace {

struct DeviceState {
  std::unique_ptr<PoolSet> pool;  // the caching pool, and the private pools of CUDA graphs
  cudaStream_t stream = nullptr;
  std::atomic<bool> capturing{false};  // a CudaGraph capture is open on the stream
  bool snapshot_uploads = false;  // that capture takes uploads as snapshots (CudaGraph::Uploads::kSnapshot)
  std::vector<void*> snapshots;  // the blocks of those snapshots, handed to the graph when it closes
  BlasHandle blas;  // cuda_blas: created on first use, never destroyed
  void* sparse = nullptr;  // cuda_sparse: the same
  std::once_flag async_pool_once;  // cuda_alloc_async: the default pool's release threshold raised
};

std::mutex g_mu;
std::atomic<int64_t> g_host_waits{0};  // cuda_host_waits()
std::vector<std::unique_ptr<DeviceState>> g_devices;

int query_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error from a machine without a driver
    return 0;
  }
  return n;
}

DeviceState& state(int device) {
  static const int count = query_device_count();
  GNN_CHECK(device >= 0 && device < count, "CUDA device ", device, " does not exist (", count, " visible)");
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_devices.empty()) g_devices.resize(count);
  auto& s = g_devices[device];
  if (!s) {
    s = std::make_unique<DeviceState>();
    GNN_CUDA_CHECK(cudaSetDevice(device));
    GNN_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    s->pool = std::make_unique<PoolSet>(
        "cuda:" + std::to_string(device),
        [device](size_t bytes) -> void* {
          void* p = nullptr;
          cudaSetDevice(device);
          // A graph's private pool grows during its capture. cudaMalloc is not a stream operation and
          // does not become part of the graph; the relaxed mode lets it run while this thread captures
          // (PyTorch's allocator does the same).
          cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
          cudaThreadExchangeStreamCaptureMode(&mode);
          const cudaError_t e = cudaMalloc(&p, bytes);
          cudaThreadExchangeStreamCaptureMode(&mode);
          if (e != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
          }
          return p;
        },
        [device](void* p) {
          cudaSetDevice(device);
          ++g_host_waits;  // cudaFree waits for the device
          cudaFree(p);
        });
  }
  return *s;
}

// Page-locked staging for cuda_upload. Each block in flight is paired with an event recorded after its
// transfer; blocks return to the pool, oldest first, once their event has completed (checked at the
// next upload: no host callbacks stall the stream).
struct Staging {
  std::mutex mu;
  CachingPool pool{"pinned",
                   [](size_t bytes) -> void* {
                     void* p = nullptr;
                     if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
                       cudaGetLastError();
                       return nullptr;
                     }
                     return p;
                   },
                   [](void* p) { cudaFreeHost(p); }};
  struct InFlight {
    void* block;
    cudaEvent_t done;
  };
  std::deque<InFlight> in_flight;
  std::vector<cudaEvent_t> spare_events;

  void reclaim_locked() {
    while (!in_flight.empty()) {
      const cudaError_t e = cudaEventQuery(in_flight.front().done);
      if (e == cudaErrorNotReady) {
        cudaGetLastError();  // "not ready" is a status, not an error to report later
        return;
      }
      GNN_CUDA_CHECK(e);
      pool.deallocate(in_flight.front().block);
      spare_events.push_back(in_flight.front().done);
      in_flight.pop_front();
    }
  }
};

Staging& staging() {
  static Staging* s = new Staging;  // never destroyed: blocks may be in flight at exit
  return *s;
}

}  // namespace

int cuda_device_count() {
  static const int count = query_device_count();
  return count;
}

bool cuda_available() { return cuda_device_count() > 0; }

std::string cuda_status() {
  int driver = 0, runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const int n = cuda_device_count();
  if (n == 0) {
    const cudaError_t err = cudaDriverGetVersion(&driver);
    return std::string("built with CUDA runtime ") + std::to_string(runtime) + ", but no usable device (" +
           (err == cudaSuccess && driver == 0 ? "no driver" : "no GPU visible") + ")";
  }
  std::string out = std::to_string(n) + " device(s):";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess)
      out += " [" + std::to_string(i) + "] " + p.name + " sm_" + std::to_string(p.major * 10 + p.minor) + " " +
             std::to_string(p.totalGlobalMem >> 20) + " MiB";
  }
  return out;
}

void* cuda_alloc(size_t bytes, int device) { return state(device).pool->allocate(bytes); }
void cuda_free(void* p, int device) { state(device).pool->deallocate(p); }
MemoryStats cuda_memory_stats(int device) { return state(device).pool->main().stats(); }
MemoryStats cuda_graph_memory_stats(int device) { return state(device).pool->private_stats(); }
void cuda_empty_cache(int device) { state(device).pool->main().empty_cache(); }
void cuda_reset_peak(int device) { state(device).pool->main().reset_peak(); }
Stream cuda_stream(int device) { return state(device).stream; }

BlasHandle cuda_blas(int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lock(g_mu);
  if (s.blas.handle) return s.blas;
  constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  void* workspace = nullptr;
  GNN_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  cublasHandle_t h = nullptr;
  cublasStatus_t st = CUBLAS_STATUS_NOT_INITIALIZED;
  try {
    st = cublasCreate(&h);  // (throws when cuBLAS cannot be loaded: runtime/cuda_libs.cpp)
  } catch (...) {
    cudaFree(workspace);
    throw;
  }
  if (st != CUBLAS_STATUS_SUCCESS) cudaFree(workspace);
  GNN_CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasCreate failed on CUDA device ", device, " (cuBLAS status ", int(st),
            ")");
  s.blas = {h, workspace, kWorkspaceBytes};
  return s.blas;
}

void* cuda_sparse(int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lock(g_mu);
  if (s.sparse) return s.sparse;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  cusparseHandle_t h = nullptr;
  const cusparseStatus_t st = cusparseCreate(&h);
  GNN_CHECK(st == CUSPARSE_STATUS_SUCCESS, "cusparseCreate failed on CUDA device ", device, " (",
            cusparseGetErrorString(st), ")");
  s.sparse = h;
  return s.sparse;
}

void cuda_synchronize(int device) {
  ++g_host_waits;
  GNN_CUDA_CHECK(cudaStreamSynchronize(state(device).stream));
}

int64_t cuda_host_waits() { return g_host_waits.load(); }

void cuda_set_device(int device) {
  state(device);  // checks that it exists
  GNN_CUDA_CHECK(cudaSetDevice(device));
}

int cuda_current_device() {
  int d = 0;
  GNN_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

// A failed allocation clears its error (it is not sticky: the device stays usable) and names what failed.
static void allocated_or_fail(cudaError_t e, const char* call, size_t bytes, int device) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  GNN_FAIL("CUDA device ", device, ": ", call, " of ", bytes, " bytes failed (", cudaGetErrorString(e), ")");
}

void* cuda_alloc_async(size_t bytes, int device, Stream stream) {
  if (bytes == 0) return nullptr;
  cuda_set_device(device);
  DeviceState& st = state(device);
  std::call_once(st.async_pool_once, [device] {
    cudaMemPool_t pool = nullptr;
    uint64_t keep = UINT64_MAX;
    GNN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    GNN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  });
  void* p = nullptr;
  allocated_or_fail(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync", bytes, device);
  return p;
}

void cuda_free_async(void* p, int device, Stream stream) {
  if (!p) return;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  GNN_CUDA_CHECK(cudaFreeAsync(p, stream));
}

void cuda_copy_2d_on(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows, int device,
                     Stream stream) {
  if (width == 0 || rows == 0) return;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  GNN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, stream));
}

void cuda_download_on(void* dst, const void* src, size_t bytes, int device, Stream stream) {
  if (bytes == 0) return;
  cuda_set_device(device);
  GNN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  cuda_stream_synchronize(stream, device);
}

void* cuda_malloc_unpooled(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  cuda_set_device(device);
  void* p = nullptr;
  allocated_or_fail(cudaMalloc(&p, bytes), "cudaMalloc", bytes, device);
  return p;
}

void cuda_free_unpooled(void* p, int device) {
  if (!p) return;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  ++g_host_waits;
  GNN_CUDA_CHECK(cudaFree(p));
}

Stream cuda_stream_create(int device) {
  cuda_set_device(device);
  cudaStream_t s = nullptr;
  GNN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void cuda_stream_destroy(Stream stream, int device) {
  if (!stream) return;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  GNN_CUDA_CHECK(cudaStreamDestroy(stream));
}

void cuda_stream_synchronize(Stream stream, int device) {
  cuda_set_device(device);
  ++g_host_waits;
  GNN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void cuda_device_synchronize(int device) {
  cuda_set_device(device);
  ++g_host_waits;
  GNN_CUDA_CHECK(cudaDeviceSynchronize());
}

void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  const int dev = dst_device.is_cuda() ? dst_device.index : src_device.index;
  cudaStream_t s = state(dev).stream;
  GNN_CUDA_CHECK(cudaSetDevice(dev));
  GNN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  // within one device the copy is ordered with everything else on its stream: nothing to wait for
  if (dst_device != src_device) {
    ++g_host_waits;
    GNN_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

namespace {

// An upload inside a snapshot capture: the bytes go into a page-locked block the graph will own, and the
// captured copy reads that block on every replay. The block comes from the staging pool with the capture
// relaxed (cudaHostAlloc is not a stream operation). When page-locked memory runs out, the capture fails
// (and the step runs eagerly) rather than free the pool's cached blocks: cudaFreeHost may wait for the device.
void snapshot_upload(DeviceState& ds, void* dst, const std::vector<UploadPiece>& pieces, size_t end) {
  Staging& st = staging();
  char* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    struct Relaxed {  // the thread's capture mode, put back however allocate leaves
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      Relaxed() { cudaThreadExchangeStreamCaptureMode(&mode); }
      ~Relaxed() { cudaThreadExchangeStreamCaptureMode(&mode); }
    } relaxed;
    block = static_cast<char*>(st.pool.allocate(end, CachingPool::OnOom::kFail));
  }
  ds.snapshots.push_back(block);  // the graph returns it to the pool (or the failed capture does)
  for (const UploadPiece& p : pieces)
    if (p.bytes) std::memcpy(block + p.offset, p.src, p.bytes);
  GNN_CUDA_CHECK(cudaMemcpyAsync(dst, block, end, cudaMemcpyHostToDevice, ds.stream));
}

void release_snapshots(std::vector<void*>& blocks) {
  if (blocks.empty()) return;
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mu);
  for (void* b : blocks) st.pool.deallocate(b);
  blocks.clear();
}

}  // namespace

void cuda_upload(void* dst, int device, const void* src, size_t bytes) {
  cuda_upload(dst, device, std::vector<UploadPiece>{{0, src, bytes}});
}

void cuda_upload(void* dst, int device, const std::vector<UploadPiece>& pieces) {
  size_t end = 0;
  for (const UploadPiece& p : pieces) end = std::max(end, p.bytes ? p.offset + p.bytes : 0);
  if (end == 0) return;
  DeviceState& ds = state(device);
  constexpr size_t kMaxStaged = size_t(64) << 20;
  if (ds.capturing.load()) {
    GNN_CHECK(ds.snapshot_uploads, "cuda:", device, ": a host-to-device copy inside a CUDA graph capture; copy the ",
              "inputs before capturing the step (runtime/cuda.h, CudaGraph)");
    GNN_CHECK(end <= kMaxStaged, "cuda:", device, ": a host-to-device copy of ", end, " bytes inside a CUDA graph ",
              "capture, over the 64 MiB a snapshot may hold; copy it before capturing");
    return snapshot_upload(ds, dst, pieces, end);
  }
  if (end > kMaxStaged) {  // straight from the sources, each piece with its own (synchronous) copy
    for (const UploadPiece& p : pieces)
      cuda_copy(static_cast<char*>(dst) + p.offset, Device::cuda(device), p.src, Device::cpu(), p.bytes);
    return;
  }
  cudaStream_t stream = ds.stream;
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mu);
  st.reclaim_locked();
  char* block = static_cast<char*>(st.pool.allocate(end));
  for (const UploadPiece& p : pieces)
    if (p.bytes) std::memcpy(block + p.offset, p.src, p.bytes);  // gaps between pieces go over unwritten
  cudaEvent_t done = nullptr;
  if (!st.spare_events.empty()) {
    done = st.spare_events.back();
    st.spare_events.pop_back();
  } else if (const cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); e != cudaSuccess) {
    st.pool.deallocate(block);
    GNN_CUDA_CHECK(e);
  }
  st.in_flight.push_back({block, done});  // queued before the calls that can fail: never leaked
  GNN_CUDA_CHECK(cudaSetDevice(device));
  GNN_CUDA_CHECK(cudaMemcpyAsync(dst, block, end, cudaMemcpyHostToDevice, stream));
  GNN_CUDA_CHECK(cudaEventRecord(done, stream));
}

CudaGraph::CudaGraph(int device, const std::function<void()>& fn, Uploads uploads) : device_(device) {
  DeviceState& s = state(device);
  GNN_CUDA_CHECK(cudaSetDevice(device));
  pool_ = s.pool->begin_private();  // throws if another capture is open on the device
  if (const cudaError_t e = cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
    s.pool->end_private();
    GNN_CUDA_CHECK(e);
  }
  s.snapshot_uploads = uploads == Uploads::kSnapshot;
  s.capturing = true;
  std::exception_ptr failed;
  try {
    fn();
  } catch (...) {
    failed = std::current_exception();
  }
  s.capturing = false;
  s.snapshot_uploads = false;
  snapshots_.swap(s.snapshots);
  s.pool->end_private();  // the graph keeps its pool (pool_) for its lifetime
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s.stream, &graph);  // closed on every path: the stream stays usable
  if (failed || end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    release_snapshots(snapshots_);  // nothing captured ran: no copy reads them
    if (failed) std::rethrow_exception(failed);
    GNN_FAIL("cuda:", device, ": CUDA graph capture failed (", cudaGetErrorString(end),
             "): the captured work must only queue kernels and device copies on the stream");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) release_snapshots(snapshots_);
  GNN_CUDA_CHECK(inst);
  exec_ = exec;
}

CudaGraph::~CudaGraph() {
  if (exec_) {
    ++g_host_waits;
    cudaStreamSynchronize(state(device_).stream);  // no replay in flight when its private memory is released
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  }
  release_snapshots(snapshots_);  // (after the wait above: no replay reads them any more)
}

void CudaGraph::replay() {
  GNN_CUDA_CHECK(cudaSetDevice(device_));
  GNN_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), state(device_).stream));
}

MemoryStats cuda_pinned_stats() {
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mu);
  st.reclaim_locked();
  return st.pool.stats();
}

double cuda_time_ms(int device, const std::function<void()>& fn) {
  cudaStream_t s = state(device).stream;
  GNN_CUDA_CHECK(cudaSetDevice(device));
  struct Event {  // destroyed on every path out, fn throwing included
    cudaEvent_t e = nullptr;
    Event() { GNN_CUDA_CHECK(cudaEventCreate(&e)); }
    ~Event() { cudaEventDestroy(e); }
  } start, stop;
  GNN_CUDA_CHECK(cudaEventRecord(start.e, s));
  fn();
  GNN_CUDA_CHECK(cudaEventRecord(stop.e, s));
  ++g_host_waits;
  GNN_CUDA_CHECK(cudaEventSynchronize(stop.e));
  float ms = 0;
  GNN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));
  return double(ms);
}

}  // namespace gnn
