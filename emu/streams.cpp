// The emulator's streams (emu/README.md): each queues its work until something waits for it (or the queue
// grows long); a capture records the work instead, and a call a capture forbids invalidates it. Also the
// statistics GNN_CUDA_EMU_STATS prints at exit.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "emu/emu_state.h"

namespace gnn_emu {

thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;
std::vector<CUstream_st*>& g_captures = *new std::vector<CUstream_st*>;  // never destroyed (emu_state.h)
std::vector<CUstream_st*>& g_streams = *new std::vector<CUstream_st*>;

bool capture_forbids(const char* call) {
  if (t_mode == cudaStreamCaptureModeRelaxed) return false;
  bool forbidden = false;
  for (CUstream_st* s : g_captures) {
    if (s->mode == cudaStreamCaptureModeRelaxed) continue;
    const bool mine = s->capture_thread == std::this_thread::get_id();
    if (mine || (s->mode == cudaStreamCaptureModeGlobal && t_mode == cudaStreamCaptureModeGlobal)) {
      s->invalidated = true;
      forbidden = true;
    }
  }
  if (forbidden) std::fprintf(stderr, "gnn CUDA emulator: %s while a stream capture is open\n", call);
  return forbidden;
}

constexpr size_t kMaxQueued = 4096;  // a longer queue runs, as a GPU makes progress on its own

void run_queue(CUstream_st* s) {
  if (s->queue.empty()) return;
  Window w;
  while (!s->queue.empty()) {
    auto op = std::move(s->queue.front());
    s->queue.pop_front();
    op();
  }
}
void run_all() {
  for (CUstream_st* s : g_streams) run_queue(s);
}

namespace {

// GNN_CUDA_EMU_STATS=calls: the host calls that queued device work (into a stream or a capture), counted
// per kernel or API name and listed at exit, most first: a step's launch profile without a GPU.
struct CallCounts {
  std::mutex mu;
  std::map<std::string, uint64_t> n;
  const bool on = [] {
    const char* v = std::getenv("GNN_CUDA_EMU_STATS");
    return v && std::string(v) == "calls";
  }();
  void add(const char* what) {
    if (!on) return;
    std::lock_guard<std::mutex> lock(mu);
    ++n[what];
  }
  ~CallCounts() {
    if (!on) return;
    std::vector<std::pair<uint64_t, std::string>> v;
    for (const auto& [name, count] : n) v.emplace_back(count, name);
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::fprintf(stderr, "gnn CUDA emulator: device work queued, per call (%zu names):\n", v.size());
    for (const auto& [count, name] : v) std::fprintf(stderr, "%10llu  %s\n", (unsigned long long)count, name.c_str());
  }
};
CallCounts g_calls;  // before g_stats: destroyed after it, so its list prints below the summary

}  // namespace

void count_call(const char* what) { g_calls.add(what); }

Stats g_stats;  // after g_calls: destroyed before it, so the summary prints above the call list
Stats::~Stats() {
  if (const char* v = std::getenv("GNN_CUDA_EMU_STATS"); v && *v && std::string(v) != "0")
    std::fprintf(stderr,
                 "gnn CUDA emulator: %llu kernel launches, %llu blocks, %llu threads, %llu barrier and warp "
                 "waits, %llu host waits for the device, %.2f s in kernels\n",
                 (unsigned long long)launches, (unsigned long long)blocks, (unsigned long long)threads,
                 (unsigned long long)waits.load(), (unsigned long long)host_waits, seconds);
}

cudaError_t enqueue(cudaStream_t s, const char* what, std::function<void()> op) {
  if (s == nullptr)
    die(
        fmt("%s on the legacy default stream: gnn queues all device work on its device's stream (runtime/cuda.h); "
            "work on stream 0 is not ordered with it",
            what));
  if (s->device != t_device)
    return fail(cudaErrorInvalidResourceHandle,
                fmt("%s on a stream of cuda:%d while cuda:%d is current", what, s->device, t_device));
  g_calls.add(what);
  if (s->capturing) {
    s->captured.push_back(std::move(op));
    return cudaSuccess;
  }
  s->queue.push_back(std::move(op));
  if (s->queue.size() > kMaxQueued) run_queue(s);
  return cudaSuccess;
}

}  // namespace gnn_emu
