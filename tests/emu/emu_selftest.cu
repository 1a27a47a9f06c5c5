// The CUDA emulator's own checks (emu/README.md), one mode per run: `ok` computes with barriers, shuffles,
// shared memory, async copies and a graph and says "emulator self-test ok" (or FAILED: what); every other mode commits
// one fault the emulator must stop with its message (tests/CMakeLists.txt matches each message). Built only against the
// emulator: on a GPU these faults are undefined behaviour, not messages.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

// Block sum: a warp butterfly, then the warps' partials through shared memory after a barrier.
__global__ void block_sum_kernel(float* out, const float* x, int n) {
  __shared__ float part[8];
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  float v = i < n ? x[i] : 0.0f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += part[w];
    out[blockIdx.x] = s;
  }
}

// Each thread reads its neighbour's shared value after the barrier: wrong without real barrier semantics.
__global__ void rotate_kernel(int* out) {
  __shared__ int v[256];
  v[threadIdx.x] = int(threadIdx.x) * 3;
  __syncthreads();
  out[threadIdx.x] = v[(threadIdx.x + 1) % blockDim.x];
}

__global__ void vote_kernel(int* out) {
  out[threadIdx.x] = __syncthreads_or(threadIdx.x == 77) + 2 * __syncthreads_count(threadIdx.x % 2);
}

__global__ void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

__global__ void split_barrier_kernel(float* out) {  // half the warp at __syncthreads, half at __syncwarp
  if (threadIdx.x < 16) __syncthreads();
  else __syncwarp();
  out[threadIdx.x] = 1.0f;
}

__global__ void write_kernel(float* out, long long at) { out[at] = 1.0f; }

__global__ void load4_kernel(float* out, const float* in) {
  const float4 v = __ldg(reinterpret_cast<const float4*>(in));
  out[0] = v.x;
}

__global__ void store4_kernel(float* out) { *reinterpret_cast<float4*>(out) = make_float4(1, 2, 3, 4); }

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}

float* device_floats(size_t n) {
  void* p = nullptr;
  cudaMalloc(&p, n * sizeof(float));
  return static_cast<float*>(p);
}

int run_ok() {
  cudaStream_t s = make_stream();
  // block sums of 1000 values over 4 blocks of 256
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7);
  float* dx = device_floats(1000);
  float* dout = device_floats(4);
  cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, s);
  block_sum_kernel<<<4, 256, 0, s>>>(dout, dx, 1000);
  float sums[4];
  cudaMemcpyAsync(sums, dout, sizeof sums, cudaMemcpyDeviceToHost, s);  // pageable: returns when done
  for (int b = 0; b < 4; ++b) {
    float want = 0;
    for (int i = b * 256; i < std::min(1000, (b + 1) * 256); ++i) want += x[size_t(i)];
    expect(sums[b] == want, "block sums");
  }
  // barrier semantics through shared memory, and block-wide votes
  int* di = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&di), 256 * sizeof(int));
  rotate_kernel<<<1, 256, 0, s>>>(di);
  std::vector<int> got(256);
  cudaMemcpyAsync(got.data(), di, 256 * sizeof(int), cudaMemcpyDeviceToHost, s);
  for (int t = 0; t < 256; ++t) expect(got[size_t(t)] == ((t + 1) % 256) * 3, "rotation through shared memory");
  vote_kernel<<<1, 128, 0, s>>>(di);
  cudaMemcpyAsync(got.data(), di, 128 * sizeof(int), cudaMemcpyDeviceToHost, s);
  expect(got[0] == 1 + 2 * 64 && got[127] == 1 + 2 * 64, "__syncthreads_or and __syncthreads_count");
  // a copy into page-locked memory is queued: the host sees it only after synchronising
  float* pinned = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&pinned), 4 * sizeof(float), cudaHostAllocDefault);
  std::memset(pinned, 0, 4 * sizeof(float));
  cudaMemcpyAsync(pinned, dout, 4 * sizeof(float), cudaMemcpyDeviceToHost, s);
  expect(pinned[0] == 0.0f, "an async copy has not run before the stream is synchronised");
  cudaStreamSynchronize(s);
  expect(pinned[0] == sums[0], "the copy has run after cudaStreamSynchronize");
  // a captured graph replays; a synchronisation inside a capture invalidates it
  cudaGraph_t g = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  block_sum_kernel<<<4, 256, 0, s>>>(dout, dx, 1000);
  expect(cudaStreamEndCapture(s, &g) == cudaSuccess && g != nullptr, "capture");
  cudaGraphExec_t ge = nullptr;
  cudaGraphInstantiate(&ge, g, 0);
  cudaMemcpyAsync(dout, x.data(), 4 * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaGraphLaunch(ge, s);
  cudaMemcpyAsync(pinned, dout, 4 * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  expect(pinned[3] == sums[3], "the graph's replay wrote the sums again");
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  expect(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported, "no sync inside a capture");
  expect(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated, "the capture is invalidated");
  cudaGetLastError();
  void* p = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  expect(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported, "no cudaMalloc inside a thread-local capture");
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  expect(cudaMalloc(&p, 64) == cudaSuccess, "cudaMalloc in relaxed mode");
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaStreamEndCapture(s, &g);
  cudaGetLastError();
  // a block freed on a stream and then again by cudaFree (a double free) is an error, not a crash; the
  // queued unmapping leaves alone a block mapped since at the same address (here: none is)
  void* a = nullptr;
  expect(cudaMallocAsync(&a, 256, s) == cudaSuccess, "cudaMallocAsync");
  expect(cudaFreeAsync(a, s) == cudaSuccess, "cudaFreeAsync queues the unmapping");
  expect(cudaFree(a) == cudaErrorInvalidValue, "cudaFree of a block a queued cudaFreeAsync freed");
  cudaGetLastError();
  expect(cudaFreeAsync(a, s) == cudaErrorInvalidValue, "cudaFreeAsync of a freed block");
  cudaGetLastError();
  if (failures == 0) std::printf("emulator self-test ok\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode == "ok") return run_ok();
  cudaStream_t s = make_stream();
  float* d = device_floats(256);
  if (mode == "shuffle-after-exit") shuffle_after_exit_kernel<<<1, 32, 0, s>>>(d);
  if (mode == "split-barrier") split_barrier_kernel<<<1, 64, 0, s>>>(d);
  if (mode == "out-of-bounds") write_kernel<<<1, 1, 0, s>>>(d, 1024);  // 4 KiB in: the guard page after the allocation
  if (mode == "misaligned") load4_kernel<<<1, 1, 0, s>>>(d, d + 1);
  if (mode == "misaligned-store") store4_kernel<<<1, 1, 0, s>>>(d + 2);
  if (mode == "legacy-stream") write_kernel<<<1, 1, 0, nullptr>>>(d, 0);
  if (mode == "host-pointer") {
    std::vector<float> host(16);
    write_kernel<<<1, 1, 0, s>>>(host.data(), 0);
  }
  if (mode == "host-deref") {
    cudaStreamSynchronize(s);
    std::printf("%f\n", double(d[3]));  // a device pointer read on the host
  }
  cudaStreamSynchronize(s);
  std::printf("mode %s ran without a fault\n", mode.c_str());
  return 1;
}
