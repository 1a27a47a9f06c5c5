// The CUDA runtime: device discovery, a caching allocator and a compute stream per device, copies.
#include "runtime/cuda.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/caching_pool.h"
#include "runtime/cuda_check.h"

namespace gnn {
namespace {

struct DeviceState {
  std::unique_ptr<CachingPool> pool;
  cudaStream_t stream = nullptr;
};

std::mutex g_mu;
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
    s->pool = std::make_unique<CachingPool>(
        "cuda:" + std::to_string(device),
        [device](size_t bytes) -> void* {
          void* p = nullptr;
          cudaSetDevice(device);
          if (cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
          }
          return p;
        },
        [device](void* p) {
          cudaSetDevice(device);
          cudaFree(p);
        });
  }
  return *s;
}

}  // namespace

bool cuda_sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("GNN_SYNC");
    return v != nullptr && std::string(v) != "0";
  }();
  return on;
}

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
MemoryStats cuda_memory_stats(int device) { return state(device).pool->stats(); }
void cuda_empty_cache(int device) { state(device).pool->empty_cache(); }
void cuda_reset_peak(int device) { state(device).pool->reset_peak(); }
Stream cuda_stream(int device) { return state(device).stream; }

void cuda_synchronize(int device) { GNN_CUDA_CHECK(cudaStreamSynchronize(state(device).stream)); }

void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  const int dev = dst_device.is_cuda() ? dst_device.index : src_device.index;
  cudaStream_t s = state(dev).stream;
  GNN_CUDA_CHECK(cudaSetDevice(dev));
  GNN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  GNN_CUDA_CHECK(cudaStreamSynchronize(s));
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
  GNN_CUDA_CHECK(cudaEventSynchronize(stop.e));
  float ms = 0;
  GNN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));
  return double(ms);
}

}  // namespace gnn
