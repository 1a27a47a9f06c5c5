// The emulator's CUDA runtime API (emu/README.md): devices, errors, allocations, copies, streams, events,
// capture and graphs; and what every part shares: the lock, die, fmt, fail and the current device. All
// API calls take the one lock; kernels run on the host thread that synchronises.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "emu/emu_state.h"

struct CUevent_st {
  bool timing = true, recorded = false;
  uint64_t pending = 0;  // queued records not yet run
  double ms = 0;
};
struct CUgraph_st {
  Ops ops;
};
struct CUgraphExec_st {
  Ops ops;
};

namespace gnn_emu {

std::recursive_mutex& g_mu = *new std::recursive_mutex;  // never destroyed (emu_state.h)

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "gnn CUDA emulator: %s\n", msg.c_str());
  std::fflush(stderr);
  std::_Exit(kFaultStatus);
}

std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;  // what cudaGetLastError answers

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

cudaError_t fail(cudaError_t e, const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "gnn CUDA emulator: %s\n", why.c_str());
  t_last_error = e;
  return e;
}

int device_count() {
  static const int n = std::max(0, env_int("GNN_CUDA_EMU_DEVICES", 1));
  return n;
}
thread_local int t_device = 0;

}  // namespace gnn_emu

using namespace gnn_emu;  // NOLINT: the C API below is the emulator's own

// ---- runtime API ---------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return device_count() > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  *p = {};
  std::snprintf(p->name, sizeof p->name, "gnn CUDA emulator (host)");
  p->totalGlobalMem = kDeviceCapacity;
  p->major = 9, p->minor = 0, p->multiProcessorCount = 1, p->warpSize = 32, p->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread:
      return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorUnknown:
      return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unknown error";
}

cudaError_t cudaDeviceSynchronize() {
  Lock lock(g_mu);
  if (capture_forbids("cudaDeviceSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
  ++g_stats.host_waits;
  run_all();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Lock lock(g_mu);
  *p = nullptr;
  if (capture_forbids("cudaMalloc")) return fail(cudaErrorStreamCaptureUnsupported);
  if (bytes == 0) return cudaSuccess;
  if (g_device_bytes + bytes > kDeviceCapacity) return fail(cudaErrorMemoryAllocation);
  *p = map_region(bytes, t_device);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  g_device_bytes += bytes;
  return cudaSuccess;
}

namespace {
// The region's pages returned and its record dropped (device bytes counted down for a device block).
void unmap_region(std::map<uintptr_t, Region>::iterator it) {
  if (it->second.device >= 0) g_device_bytes -= it->second.bytes;
  munmap(reinterpret_cast<void*>(it->first), it->second.mapped);
  g_regions.erase(it);
}

cudaError_t free_region(void* p, bool device, const char* call) {
  if (!p) return cudaSuccess;
  if (capture_forbids(call)) return fail(cudaErrorStreamCaptureUnsupported);
  auto it = g_regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_regions.end() || (it->second.device >= 0) != device)
    return fail(cudaErrorInvalidValue,
                fmt("%s(%p): not the start of a live %s allocation", call, p, device ? "device" : "page-locked"));
  ++g_stats.host_waits;
  run_all();  // freeing synchronises; the queued work may hold a cudaFreeAsync of p (a double free)
  it = g_regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_regions.end())
    return fail(cudaErrorInvalidValue, fmt("%s(%p): freed by a cudaFreeAsync queued before it", call, p));
  unmap_region(it);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaFree(void* p) {
  Lock lock(g_mu);
  return free_region(p, true, "cudaFree");
}
// The emulator maps the block at once (as cudaMalloc) and queues its unmapping on the stream: a kernel
// queued before the free still finds it, one queued after it faults.
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  {
    Lock lock(g_mu);
    if (s == nullptr) die("cudaMallocAsync on the legacy default stream");
    if (s->capturing) return fail(cudaErrorStreamCaptureUnsupported, "cudaMallocAsync inside a stream capture");
  }
  return cudaMalloc(p, bytes);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  Lock lock(g_mu);
  if (!p) return cudaSuccess;
  if (s == nullptr) die("cudaFreeAsync on the legacy default stream");
  if (s->capturing) return fail(cudaErrorStreamCaptureUnsupported, "cudaFreeAsync inside a stream capture");
  auto it = g_regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_regions.end() || it->second.device < 0)
    return fail(cudaErrorInvalidValue, fmt("cudaFreeAsync(%p): not the start of a live device allocation", p));
  return enqueue(s, "cudaFreeAsync", [p] {
    auto r = g_regions.find(reinterpret_cast<uintptr_t>(p));  // (a device block: not one mapped there since)
    if (r != g_regions.end() && r->second.device >= 0) unmap_region(r);
  });
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  *pool = reinterpret_cast<cudaMemPool_t>(uintptr_t(device) + 1);
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr, void* value) {
  return pool && value ? cudaSuccess : fail(cudaErrorInvalidValue);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  Lock lock(g_mu);
  *p = nullptr;
  if (capture_forbids("cudaHostAlloc")) return fail(cudaErrorStreamCaptureUnsupported);
  *p = map_region(bytes, -1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  Lock lock(g_mu);
  return free_region(p, false, "cudaFreeHost");
}

namespace {

enum class Where { kPageable, kPinned, kDevice };
Where where(const void* p, size_t bytes) {
  const auto* r = region_of(p);
  if (!r) return Where::kPageable;
  if (!region_of(p, bytes))
    die(fmt("a copy of %zu bytes at %p runs past the end of its %zu-byte allocation", bytes, p, r->second.bytes));
  return r->second.device >= 0 ? Where::kDevice : Where::kPinned;
}

// Checks a copy against its kind and its spans against their allocations; says where each side is.
cudaError_t check_copy(void* dst, size_t dst_span, const void* src, size_t src_span, cudaMemcpyKind kind, Where* wd,
                       Where* ws) {
  *wd = where(dst, dst_span), *ws = where(src, src_span);
  const bool dst_dev = *wd == Where::kDevice, src_dev = *ws == Where::kDevice;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_dev && src_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (!ok)
    return fail(cudaErrorInvalidValue,
                fmt("a copy of kind %d from %p to %p: the pointers are not of that kind", int(kind), src, dst));
  return cudaSuccess;
}

// rows rows of `bytes` bytes, dpitch and spitch apart, with device memory open.
void copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t bytes, size_t rows) {
  Window w;
  for (size_t r = 0; r < rows; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, bytes);
}

cudaError_t copy_async(const char* call, void* dst, const void* src, size_t bytes, size_t rows, size_t dpitch,
                       size_t spitch, cudaMemcpyKind kind, cudaStream_t s) {
  Where wd, ws;
  const size_t span_d = dpitch * (rows - 1) + bytes, span_s = spitch * (rows - 1) + bytes;
  if (const cudaError_t e = check_copy(dst, span_d, src, span_s, kind, &wd, &ws); e != cudaSuccess) return e;
  auto copy = [=] { copy_rows(dst, dpitch, src, spitch, bytes, rows); };
  if (s && s->capturing && (wd == Where::kPageable || ws == Where::kPageable)) {
    s->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported, fmt("%s with pageable host memory inside a stream capture", call));
  }
  if (ws == Where::kPageable && wd == Where::kDevice) {  // the source is staged at once: reusable on return
    auto staged = std::make_shared<std::vector<char>>(span_s);
    std::memcpy(staged->data(), src, span_s);
    return enqueue(s, call, [=] { copy_rows(dst, dpitch, staged->data(), spitch, bytes, rows); });
  }
  if (wd == Where::kPageable && ws != Where::kPageable) {  // to pageable memory: returns when done
    if (s == nullptr) die(fmt("%s on the legacy default stream", call));
    if (s->capturing) return fail(cudaErrorStreamCaptureUnsupported);
    ++g_stats.host_waits;
    count_call(call);
    run_queue(s);
    copy();
    return cudaSuccess;
  }
  return enqueue(s, call, copy);
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  Lock lock(g_mu);
  if (capture_forbids("cudaMemcpy")) return fail(cudaErrorStreamCaptureUnsupported);
  Where wd, ws;
  if (const cudaError_t e = check_copy(dst, bytes, src, bytes, kind, &wd, &ws); e != cudaSuccess) return e;
  ++g_stats.host_waits;
  run_all();  // the legacy stream waits for every other stream
  copy_rows(dst, bytes, src, bytes, bytes, 1);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  Lock lock(g_mu);
  if (bytes == 0) return cudaSuccess;
  return copy_async("cudaMemcpyAsync", dst, src, bytes, 1, bytes, bytes, kind, s);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
  Lock lock(g_mu);
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: width beyond a pitch");
  if (width == 0 || height == 0) return cudaSuccess;
  return copy_async("cudaMemcpy2DAsync", dst, src, width, height, dpitch, spitch, kind, s);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  Lock lock(g_mu);
  *s = new CUstream_st;
  (*s)->device = t_device;
  g_streams.push_back(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  Lock lock(g_mu);
  run_queue(s);
  g_streams.erase(std::remove(g_streams.begin(), g_streams.end(), s), g_streams.end());
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  Lock lock(g_mu);
  if (s == nullptr) return cudaDeviceSynchronize();
  if (s->capturing) {
    s->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize on a stream being captured");
  }
  ++g_stats.host_waits;
  run_queue(s);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  Lock lock(g_mu);
  *e = new CUevent_st;
  (*e)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  Lock lock(g_mu);
  if (e && e->pending > 0) run_all();  // a queued record still refers to it
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  Lock lock(g_mu);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (s && !s->capturing) ++e->pending;
  return enqueue(s, "cudaEventRecord", [e, counted = s && !s->capturing] {
    e->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    e->recorded = true;
    if (counted) --e->pending;
  });
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  Lock lock(g_mu);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  return e->pending > 0 ? fail(cudaErrorNotReady) : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  Lock lock(g_mu);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  ++g_stats.host_waits;
  if (e->pending > 0) run_all();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  Lock lock(g_mu);
  if (!start || !stop || !start->timing || !stop->timing) return fail(cudaErrorInvalidResourceHandle);
  if (start->pending > 0 || stop->pending > 0) return fail(cudaErrorNotReady);
  if (!start->recorded || !stop->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = float(stop->ms - start->ms);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  Lock lock(g_mu);
  if (!s) return fail(cudaErrorStreamCaptureUnsupported, "capturing the legacy default stream");
  if (s->capturing) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture on a stream already capturing");
  s->capturing = true, s->invalidated = false, s->mode = mode, s->capture_thread = std::this_thread::get_id();
  s->captured.clear();
  g_captures.push_back(s);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  Lock lock(g_mu);
  *graph = nullptr;
  if (!s || !s->capturing) return fail(cudaErrorIllegalState, "cudaStreamEndCapture on a stream not capturing");
  if (s->mode != cudaStreamCaptureModeRelaxed && s->capture_thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  s->capturing = false;
  g_captures.erase(std::remove(g_captures.begin(), g_captures.end(), s), g_captures.end());
  Ops ops = std::move(s->captured);
  s->captured.clear();
  if (s->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = new CUgraph_st{std::move(ops)};
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(t_mode, *mode);
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  Lock lock(g_mu);
  if (!graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  Lock lock(g_mu);
  if (!exec) return fail(cudaErrorInvalidValue);
  return enqueue(s, "cudaGraphLaunch", [exec] {
    for (const auto& op : exec->ops) op();
  });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Lock lock(g_mu);
  run_all();  // a queued launch of it may still run
  delete exec;
  return cudaSuccess;
}
