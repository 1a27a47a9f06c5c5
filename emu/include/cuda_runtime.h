// gnn.cpp's CUDA emulator (emu/README.md): the part of the CUDA runtime API, of device code and of the
// launch syntax that gnn's .cu files and runtime use, executed on the host so that the CUDA backend's
// code runs and is tested on machines without a GPU. Device code compiles as plain C++ (the qualifiers
// below expand to nothing, __shared__ to static thread_local); emu/rewrite_launches.cmake turns each
// `kernel<<<grid, block, smem, stream>>>(args)` into `gnn_emu::launch(...)(args)`. Every CUDA thread
// runs on a fiber of its own, so __syncthreads and the warp shuffles have their real semantics; the
// threads of a block take turns between their waits, and blocks run in parallel on the OpenMP threads.
// Not emulated: races between threads of a block (not seen), timing, and the GPU's floating-point
// details beyond plain IEEE single precision (no FMA contraction).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define GNN_CUDA_EMU 1

// ---- qualifiers ------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local  // each host thread running blocks has its own

// ---- vector and index types ------------------------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

// ---- runtime types ---------------------------------------------------------------------------------
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
inline constexpr unsigned cudaStreamNonBlocking = 0x01;
inline constexpr unsigned cudaEventDisableTiming = 0x02;
inline constexpr unsigned cudaHostAllocDefault = 0x00;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaDeviceSynchronize();

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
// Stream-ordered: the block is usable by work queued on the stream after the call; the free is queued.
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
// The stream-ordered allocator's pool: the emulator has one per device and nothing to tune in it.
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

// ---- the emulator's interface to device code -----------------------------------------------------------
namespace gnn_emu {

struct ThreadState {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
extern thread_local ThreadState* t_current;  // the emulated thread running on this host thread

enum class WarpOp { kSync, kShflXor, kShflDown, kShflUp, kShflIdx };
enum class Vote { kNone, kOr, kAnd, kCount };

// Suspends the calling emulated thread until the lanes its mask names reach the same operation; returns
// the value of the lane it reads (shuffles).
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
// Suspends the calling emulated thread until every thread of its block that has not exited gets here.
int block_barrier(Vote vote, int predicate);
// Stops the run with a message naming the kernel, block and thread (a device fault).
[[noreturn]] void device_fault(const char* what, const void* address);

// Queues body (one call per CUDA thread) on `stream`: run now, or recorded when the stream is captured.
// `pointers` are the kernel's pointer arguments, checked to lie in device or page-locked memory.
void launch_kernel(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   std::function<void()> body, std::vector<const void*> pointers);

template <class T>
void collect_pointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(v));
}

template <class... P>
struct Launch {
  const char* name;
  void (*kernel)(P...);
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;

  template <class... A>
  void operator()(A&&... a) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);  // converted as the call converts them
    std::vector<const void*> pointers;
    std::apply([&](const auto&... v) { (collect_pointer(pointers, v), ...); }, args);
    auto* k = kernel;
    launch_kernel(
        name, grid, block, smem, stream,
        [k, args] {
          auto mine = args;  // each thread its own copy of the parameters
          std::apply(k, mine);
        },
        std::move(pointers));
  }
};

template <class... P>
Launch<P...> launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0,
                    cudaStream_t stream = nullptr) {
  return {name, kernel, grid, block, smem, stream};
}

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of up to 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace gnn_emu

#define GNN_EMU_STR(...) #__VA_ARGS__

#define threadIdx (::gnn_emu::t_current->thread_idx)
#define blockIdx (::gnn_emu::t_current->block_idx)
#define blockDim (::gnn_emu::t_current->block_dim)
#define gridDim (::gnn_emu::t_current->grid_dim)
inline constexpr int warpSize = 32;

// ---- device intrinsics -----------------------------------------------------------------------------
template <class T>
inline T __ldg(const T* p) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) ::gnn_emu::device_fault("misaligned __ldg", p);
  return *p;
}
// One IEEE operation rounded to nearest, never contracted with another into a multiply-add: on the host,
// compiled with -ffp-contract=off, the plain operation already is that.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline void __syncthreads() { ::gnn_emu::block_barrier(::gnn_emu::Vote::kNone, 0); }
inline int __syncthreads_or(int p) { return ::gnn_emu::block_barrier(::gnn_emu::Vote::kOr, p); }
inline int __syncthreads_and(int p) { return ::gnn_emu::block_barrier(::gnn_emu::Vote::kAnd, p); }
inline int __syncthreads_count(int p) { return ::gnn_emu::block_barrier(::gnn_emu::Vote::kCount, p); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::gnn_emu::warp_collective(::gnn_emu::WarpOp::kSync, mask, 0, 0, 32);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::gnn_emu::from_bits<T>(
      ::gnn_emu::warp_collective(::gnn_emu::WarpOp::kShflXor, mask, ::gnn_emu::to_bits(v), lane_mask, width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::gnn_emu::from_bits<T>(
      ::gnn_emu::warp_collective(::gnn_emu::WarpOp::kShflDown, mask, ::gnn_emu::to_bits(v), int(delta), width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::gnn_emu::from_bits<T>(
      ::gnn_emu::warp_collective(::gnn_emu::WarpOp::kShflUp, mask, ::gnn_emu::to_bits(v), int(delta), width));
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::gnn_emu::from_bits<T>(
      ::gnn_emu::warp_collective(::gnn_emu::WarpOp::kShflIdx, mask, ::gnn_emu::to_bits(v), src_lane, width));
}
