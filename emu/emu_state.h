// The CUDA emulator's private header (emu/README.md): what its parts share, in namespace gnn_emu. Only
// emu/*.cpp include it; gnn's code sees emu/include. The parts:
//   runtime_api.cpp  the lock, faults, errors and devices; the CUDA runtime API
//   memory.cpp       device and page-locked allocations, their protection, the SIGSEGV handler
//   streams.cpp      stream queues, capture, the exit statistics (GNN_CUDA_EMU_STATS)
//   engine.cpp       the kernel engine: a fiber per CUDA thread, barriers and warp operations
//   cublas.cpp, cusparse.cpp  the cuBLAS and cuSPARSE calls gnn makes
// The engine's entry points for kernels (launch_kernel, block_barrier, warp_collective, device_fault)
// are declared in emu/include/cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using Ops = std::vector<std::function<void()>>;

struct CUstream_st {
  int device = 0;
  std::deque<std::function<void()>> queue;  // queued, not yet run
  bool capturing = false, invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  Ops captured;
};

namespace gnn_emu {

// ---- the lock, faults, errors, devices (runtime_api.cpp) -----------------------------------------------

// The emulator's state is never destroyed (each such object is `*new`): static destructors elsewhere (a
// caching pool emptying itself at exit) still call the API.
extern std::recursive_mutex& g_mu;  // every API call; kernels run under it
using Lock = std::lock_guard<std::recursive_mutex>;

// A device fault ends the process, as a fault poisons a CUDA context: the message, then exit status 3
// (not a signal, so a test can match the message; break on gnn_emu::die in a debugger).
constexpr int kFaultStatus = 3;
[[noreturn]] void die(const std::string& msg);
std::string fmt(const char* f, ...);

// Errors of API calls: returns e, which becomes the thread's last error; says why on stderr.
cudaError_t fail(cudaError_t e, const std::string& why = {});

int device_count();
extern thread_local int t_device;

// ---- memory (memory.cpp) -----------------------------------------------------------------------------

size_t page_bytes();

struct Region {
  size_t bytes = 0, mapped = 0;  // mapped: the pages handed out plus one guard page
  int device = -1;  // -1: page-locked host memory
};
extern std::map<uintptr_t, Region>& g_regions;  // by start address
extern size_t g_device_bytes;
constexpr size_t kDeviceCapacity = size_t(16) << 30;

// The allocation holding [p, p + bytes) (p one past the end counts for bytes = 0), or null.
const std::pair<const uintptr_t, Region>* region_of(const void* p, size_t bytes = 0);

struct Window {  // device memory open for the duration (kernels, copies, library calls)
  Window();
  ~Window();
};

// A new allocation of `bytes` on `device` (-1: page-locked host memory) with a guard page after it.
void* map_region(size_t bytes, int device);

extern const char* g_kernel;  // the kernel running, for fault messages (set by the engine)

// ---- streams and capture (streams.cpp) ---------------------------------------------------------------

extern thread_local cudaStreamCaptureMode t_mode;
extern std::vector<CUstream_st*>& g_captures;  // streams with a capture open
extern std::vector<CUstream_st*>& g_streams;

// An unsafe call (cudaMalloc, a synchronising call) made while a capture forbids it: the captures it
// disturbs are invalidated, as CUDA does.
bool capture_forbids(const char* call);

void run_queue(CUstream_st* s);
void run_all();

// Queues op on s (or records it into the capture open on s). `what` names the call for messages.
cudaError_t enqueue(cudaStream_t s, const char* what, std::function<void()> op);

// GNN_CUDA_EMU_STATS=calls: counts a host call that queued device work (enqueue counts its own).
void count_call(const char* what);

// GNN_CUDA_EMU_STATS=1 (or calls): what ran, printed at exit.
struct Stats {
  uint64_t launches = 0, blocks = 0, threads = 0, host_waits = 0;
  std::atomic<uint64_t> waits{0};
  double seconds = 0;
  ~Stats();
};
extern Stats g_stats;

}  // namespace gnn_emu
