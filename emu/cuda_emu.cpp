// gnn.cpp's CUDA emulator (emu/README.md): device memory, streams that really are asynchronous, events,
// graph capture, the kernel engine (a fiber per CUDA thread), and the cuBLAS and cuSPARSE calls gnn makes.
//
// What it checks that a plain host build cannot: every kernel's indexing over real grid/block shapes, its
// barriers and warp shuffles (a lane that exited or waits elsewhere while its warp shuffles is a fault,
// as is a __syncthreads some threads never reach), 16-byte alignment of vector loads, kernel pointer
// arguments outside device or page-locked memory, host code dereferencing device memory (device
// allocations are mapped inaccessible except while device work runs), reading results or reusing a
// staging buffer before the stream has done the work (streams run their queue only when synchronised
// or when the queue grows long), work queued on the legacy default stream, and calls a CUDA graph
// capture forbids. All API calls take one lock; kernels run on the host thread that synchronises.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cusparse.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// Saves the callee-saved registers on the current stack, stores the stack pointer in *save and continues
// on the stack `load` (saved the same way, or prepared by init_stack). MXCSR and the x87 control word are
// not switched: no kernel changes them, so every fiber runs with the host thread's.
extern "C" void gnn_emu_switch(void** save, void* load);
asm(R"(
  .pushsection .text
  .globl gnn_emu_switch
  .hidden gnn_emu_switch
  .type gnn_emu_switch, @function
gnn_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gnn_emu_switch, .-gnn_emu_switch
  .popsection
)");

using Ops = std::vector<std::function<void()>>;

struct CUstream_st {
  int device = 0;
  std::deque<std::function<void()>> queue;  // queued, not yet run
  bool capturing = false, invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  Ops captured;
};
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

thread_local ThreadState* t_current = nullptr;

namespace {

// The emulator's state is never destroyed: static destructors elsewhere (a caching pool emptying itself
// at exit) still call the API.
std::recursive_mutex& g_mu = *new std::recursive_mutex;  // every API call; kernels run under it
using Lock = std::lock_guard<std::recursive_mutex>;

// A device fault ends the process, as a fault poisons a CUDA context: the message, then exit status 3
// (not a signal, so a test can match the message; break on gnn_emu::(anonymous)::die in a debugger).
constexpr int kFaultStatus = 3;
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

// Errors of API calls: the value returned and the thread's last error.
thread_local cudaError_t t_last_error = cudaSuccess;
cudaError_t fail(cudaError_t e, const std::string& why = {}) {
  if (!why.empty()) std::fprintf(stderr, "gnn CUDA emulator: %s\n", why.c_str());
  t_last_error = e;
  return e;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

int device_count() {
  static const int n = std::max(0, env_int("GNN_CUDA_EMU_DEVICES", 1));
  return n;
}
thread_local int t_device = 0;

// ---- memory --------------------------------------------------------------------------------------------

size_t page_bytes() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}
size_t round_pages(size_t b) { return (b + page_bytes() - 1) / page_bytes() * page_bytes(); }

struct Region {
  size_t bytes = 0, mapped = 0;  // mapped: the pages handed out plus one guard page
  int device = -1;               // -1: page-locked host memory
};
std::map<uintptr_t, Region>& g_regions = *new std::map<uintptr_t, Region>;  // by start address
int g_window = 0;                       // > 0 while device work runs: device memory is accessible
size_t g_device_bytes = 0;
constexpr size_t kDeviceCapacity = size_t(16) << 30;

// The allocation holding [p, p + bytes) (p one past the end counts for bytes = 0), or null.
const std::pair<const uintptr_t, Region>* region_of(const void* p, size_t bytes = 0) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_regions.upper_bound(a);
  if (it == g_regions.begin()) return nullptr;
  --it;
  if (a - it->first + bytes > it->second.bytes && !(bytes == 0 && a - it->first == it->second.bytes)) return nullptr;
  return &*it;
}

void protect_devices(bool open) {
  for (auto& [base, r] : g_regions)
    if (r.device >= 0 && r.bytes > 0)
      mprotect(reinterpret_cast<void*>(base), round_pages(r.bytes), open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

struct Window {  // device memory open for the duration (kernels, copies, library calls)
  Window() {
    if (g_window++ == 0) protect_devices(true);
  }
  ~Window() {
    if (--g_window == 0) protect_devices(false);
  }
};

const char* g_kernel = nullptr;  // the kernel running, for fault messages

void on_segv(int sig, siginfo_t* si, void*) {
  const void* addr = si->si_addr;
  const auto* r = region_of(addr, 1);
  char msg[512];
  int n = 0;
  if (r && r->second.device >= 0 && g_window == 0) {
    n = std::snprintf(msg, sizeof msg,
                      "gnn CUDA emulator: host code touched device memory at %p (in a %zu-byte allocation on cuda:%d "
                      "at %p): a device pointer dereferenced on the host\n",
                      addr, r->second.bytes, r->second.device, reinterpret_cast<const void*>(r->first));
  } else if (t_current) {
    const ThreadState& t = *t_current;
    n = std::snprintf(msg, sizeof msg,
                      "gnn CUDA emulator: kernel %s, block (%u,%u,%u), thread (%u,%u,%u) touched %p, outside every "
                      "live allocation (an out-of-bounds access)\n",
                      g_kernel ? g_kernel : "?", t.block_idx.x, t.block_idx.y, t.block_idx.z, t.thread_idx.x,
                      t.thread_idx.y, t.thread_idx.z, addr);
  } else if (g_window > 0) {
    n = std::snprintf(msg, sizeof msg, "gnn CUDA emulator: a device copy or library call touched %p, outside every "
                      "live allocation\n", addr);
  }
  if (n > 0) {
    if (write(2, msg, size_t(std::min(n, int(sizeof msg) - 1))) < 0) {
    }
    _exit(kFaultStatus);
  }
  signal(sig, SIG_DFL);  // not ours: the default action when the access is retried
}

void install_fault_handler() {
  static const bool done = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    return true;
  }();
  (void)done;
}

void* map_region(size_t bytes, int device) {
  install_fault_handler();
  const size_t mapped = round_pages(std::max<size_t>(bytes, 1)) + page_bytes();
  const int prot = device >= 0 && g_window == 0 ? PROT_NONE : PROT_READ | PROT_WRITE;
  void* p = mmap(nullptr, mapped, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  mprotect(static_cast<char*>(p) + mapped - page_bytes(), page_bytes(), PROT_NONE);  // guard page
  g_regions[reinterpret_cast<uintptr_t>(p)] = {bytes, mapped, device};
  return p;
}

// ---- streams and capture -----------------------------------------------------------------------------

thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;
std::vector<CUstream_st*>& g_captures = *new std::vector<CUstream_st*>;  // streams with a capture open

// An unsafe call (cudaMalloc, a synchronising call) made while a capture forbids it: the captures it
// disturbs are invalidated, as CUDA does.
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

std::vector<CUstream_st*>& g_streams = *new std::vector<CUstream_st*>;
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
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    std::fprintf(stderr, "gnn CUDA emulator: device work queued, per call (%zu names):\n", v.size());
    for (const auto& [count, name] : v) std::fprintf(stderr, "%10llu  %s\n", (unsigned long long)count, name.c_str());
  }
};
CallCounts g_calls;  // before g_stats: destroyed after it, so its list prints below the summary

// Queues op on s (or records it into the capture open on s). `what` names the call for messages.
cudaError_t enqueue(cudaStream_t s, const char* what, std::function<void()> op) {
  if (s == nullptr)
    die(fmt("%s on the legacy default stream: gnn queues all device work on its device's stream (runtime/cuda.h); "
            "work on stream 0 is not ordered with it",
            what));
  if (s->device != t_device)
    return fail(cudaErrorInvalidResourceHandle, fmt("%s on a stream of cuda:%d while cuda:%d is current", what, s->device, t_device));
  g_calls.add(what);
  if (s->capturing) {
    s->captured.push_back(std::move(op));
    return cudaSuccess;
  }
  s->queue.push_back(std::move(op));
  if (s->queue.size() > kMaxQueued) run_queue(s);
  return cudaSuccess;
}

// ---- the kernel engine -------------------------------------------------------------------------------

struct Fiber {
  void* sp = nullptr;
  enum State : uint8_t { kNew, kReady, kAtBarrier, kAtWarp, kDone } state = kNew;
  unsigned slot = 0;  // its stack, while it has one
  Vote vote = Vote::kNone;
  WarpOp op = WarpOp::kSync;
  int pred = 0, arg = 0, width = 32;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  ThreadState ts{};
};

struct Engine {
  static constexpr size_t kStack = size_t(64) << 10;
  static constexpr unsigned kMaxThreads = 1024;
  char* stacks = nullptr;
  std::vector<Fiber> fibers;
  void* sched_sp = nullptr;
  Fiber* current = nullptr;
  std::vector<unsigned> free_slots;  // stacks not in use: a thread that never waits hands its own on
  const std::function<void()>* body = nullptr;
  uint64_t waits = 0;
};
// One engine per host thread that runs blocks (blocks of a grid run in parallel on the OpenMP threads;
// __shared__ is thread_local, so each has its own shared memory).
thread_local Engine* t_engine = nullptr;
Engine& engine() {
  if (!t_engine) {
    t_engine = new Engine;  // never freed: the OpenMP threads live as long as the process
    const size_t bytes = Engine::kStack * Engine::kMaxThreads;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot map the fibers' stacks");
    t_engine->stacks = static_cast<char*>(p);
    for (unsigned i = 0; i < Engine::kMaxThreads; ++i)  // a guard page below each stack
      mprotect(t_engine->stacks + size_t(i) * Engine::kStack, page_bytes(), PROT_NONE);
    t_engine->fibers.resize(Engine::kMaxThreads);
  }
  return *t_engine;
}
bool reverse_order() {  // GNN_CUDA_EMU_ORDER=reverse: blocks and threads in reverse order
  static const bool r = [] {
    const char* order = std::getenv("GNN_CUDA_EMU_ORDER");
    return order && std::string(order) == "reverse";
  }();
  return r;
}

// GNN_CUDA_EMU_STATS=1 (or calls): what ran, printed at exit.
struct Stats {
  uint64_t launches = 0, blocks = 0, threads = 0, host_waits = 0;
  std::atomic<uint64_t> waits{0};
  double seconds = 0;
  ~Stats() {
    if (const char* v = std::getenv("GNN_CUDA_EMU_STATS"); v && *v && std::string(v) != "0")
      std::fprintf(stderr, "gnn CUDA emulator: %llu kernel launches, %llu blocks, %llu threads, %llu barrier and warp "
                   "waits, %llu host waits for the device, %.2f s in kernels\n", (unsigned long long)launches,
                   (unsigned long long)blocks, (unsigned long long)threads, (unsigned long long)waits.load(),
                   (unsigned long long)host_waits, seconds);
  }
};
Stats g_stats;

extern "C" [[noreturn]] void gnn_emu_fiber_main() {
  Engine& e = *t_engine;
  (*e.body)();
  e.current->state = Fiber::kDone;
  gnn_emu_switch(&e.current->sp, e.sched_sp);
  __builtin_trap();  // a finished fiber is never resumed
}

void* init_stack(Engine& e, unsigned slot) {
  char* top = e.stacks + (size_t(slot) + 1) * Engine::kStack;
  auto* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                                  // gnn_emu_fiber_main's (absent) return address
  *--sp = reinterpret_cast<uint64_t>(&gnn_emu_fiber_main);    // where the switch returns to
  for (int r = 0; r < 6; ++r) *--sp = 0;                      // rbp rbx r12 r13 r14 r15
  return sp;
}

void resume(Engine& e, Fiber& f) {
  e.current = &f;
  t_current = &f.ts;
  gnn_emu_switch(&e.sched_sp, f.sp);
  t_current = nullptr;
  e.current = nullptr;
}

Fiber& self(const char* what) {
  if (!t_engine || !t_engine->current) die(fmt("%s called outside a kernel", what));
  return *t_engine->current;
}

void suspend(Fiber& f) {
  ++t_engine->waits;
  gnn_emu_switch(&f.sp, t_engine->sched_sp);
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kSync: return "__syncwarp";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflIdx: return "__shfl_sync";
  }
  return "?";
}

[[noreturn]] void block_fault(const Fiber& f, const std::string& what) {
  const ThreadState& t = f.ts;
  die(fmt("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s", g_kernel, t.block_idx.x, t.block_idx.y, t.block_idx.z,
          t.thread_idx.x, t.thread_idx.y, t.thread_idx.z, what.c_str()));
}

// Completes the warp operations every named lane has reached; faults where one cannot complete.
bool resolve_warps(Engine& e, unsigned n) {
  std::vector<Fiber>& fs = e.fibers;
  bool any = false;
  for (unsigned w0 = 0; w0 < n; w0 += 32) {
    const unsigned lanes = std::min(32u, n - w0);
    const Fiber* ref = nullptr;
    for (unsigned l = 0; l < lanes && !ref; ++l)
      if (fs[w0 + l].state == Fiber::kAtWarp) ref = &fs[w0 + l];
    if (!ref) continue;
    for (unsigned l = 0; l < lanes; ++l) {
      const Fiber& f = fs[w0 + l];
      const bool named = (ref->mask >> l) & 1u;
      if (f.state == Fiber::kAtWarp && (f.op != ref->op || f.mask != ref->mask || f.width != ref->width))
        block_fault(f, fmt("lanes of warp %u wait at different warp operations (%s mask %08x, and %s mask %08x)",
                           w0 / 32, op_name(f.op), f.mask, op_name(ref->op), ref->mask));
      if (f.state == Fiber::kAtWarp && !named)
        block_fault(f, fmt("%s with mask %08x, which does not name the calling lane %u", op_name(f.op), f.mask, l));
      if (named && f.state == Fiber::kDone)
        block_fault(*ref, fmt("%s with mask %08x names lane %u, which has exited", op_name(ref->op), ref->mask, l));
      if (named && f.state == Fiber::kAtBarrier)
        block_fault(*ref, fmt("%s with mask %08x names lane %u, which waits at __syncthreads (a deadlock)",
                              op_name(ref->op), ref->mask, l));
    }
    if (lanes < 32 && (ref->mask >> lanes) != 0)
      block_fault(*ref, fmt("%s with mask %08x names lanes beyond the block's %u threads", op_name(ref->op), ref->mask, n));
    const int width = ref->width;
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
      block_fault(*ref, fmt("%s with width %d (a power of two up to 32)", op_name(ref->op), width));
    for (unsigned l = 0; l < lanes; ++l) {
      Fiber& f = fs[w0 + l];
      if (!((ref->mask >> l) & 1u)) continue;
      const int base = int(l) & ~(width - 1);
      int src = int(l);
      switch (f.op) {
        case WarpOp::kSync: break;
        case WarpOp::kShflXor: src = int(l) ^ f.arg; break;
        case WarpOp::kShflDown: src = int(l) + f.arg; break;
        case WarpOp::kShflUp: src = int(l) - f.arg; break;
        case WarpOp::kShflIdx: src = base + (f.arg & (width - 1)); break;
      }
      if (src < base || src >= base + width) src = int(l);  // outside the lane's segment: its own value
      if (!((ref->mask >> src) & 1u))
        block_fault(f, fmt("%s reads lane %d, which its mask %08x does not name", op_name(f.op), src, f.mask));
      f.result = fs[w0 + unsigned(src)].value;
    }
    for (unsigned l = 0; l < lanes; ++l)
      if ((ref->mask >> l) & 1u) fs[w0 + l].state = Fiber::kReady;
    any = true;
  }
  return any;
}

void run_block(Engine& e, dim3 grid, dim3 block, uint3 bidx) {
  const bool reverse = reverse_order();
  const unsigned n = block.x * block.y * block.z;
  e.free_slots.clear();
  for (unsigned i = n; i-- > 0;) e.free_slots.push_back(i);  // slot 0 on top
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = e.fibers[i];
    f.state = Fiber::kNew;
    f.ts = {{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)}, bidx, block, grid};
  }
  for (;;) {
    for (unsigned k = 0; k < n; ++k) {
      Fiber& f = e.fibers[reverse ? n - 1 - k : k];
      if (f.state == Fiber::kNew) {
        f.slot = e.free_slots.back();
        e.free_slots.pop_back();
        f.sp = init_stack(e, f.slot);
        f.state = Fiber::kReady;
      }
      if (f.state != Fiber::kReady) continue;
      resume(e, f);
      if (f.state == Fiber::kDone) e.free_slots.push_back(f.slot);
    }
    if (resolve_warps(e, n)) continue;
    unsigned done = 0;
    const Fiber* first = nullptr;
    for (unsigned i = 0; i < n; ++i) {
      const Fiber& f = e.fibers[i];
      if (f.state == Fiber::kDone) ++done;
      if (f.state == Fiber::kAtBarrier) {
        if (!first) first = &f;
        else if (f.vote != first->vote) block_fault(f, "threads of the block wait at different kinds of __syncthreads");
      }
    }
    if (done == n) return;
    // every thread not at the barrier has exited (warp operations all completed above)
    int any = 0, all = 1, count = 0;
    for (unsigned i = 0; i < n; ++i) {
      const Fiber& f = e.fibers[i];
      if (f.state != Fiber::kAtBarrier) continue;
      any |= f.pred != 0, all &= f.pred != 0, count += f.pred != 0;
    }
    const int result = first->vote == Vote::kOr ? any : first->vote == Vote::kAnd ? all : first->vote == Vote::kCount ? count : 0;
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = e.fibers[i];
      if (f.state != Fiber::kAtBarrier) continue;
      f.result = uint64_t(unsigned(result));
      f.state = Fiber::kReady;
    }
  }
}

void run_grid(const char* name, dim3 grid, dim3 block, const std::function<void()>& body) {
  Window w;
  const auto t0 = std::chrono::steady_clock::now();
  const char* outer = g_kernel;
  g_kernel = name;
  const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
  const bool reverse = reverse_order();
#pragma omp parallel if (blocks > 1)
  {
    Engine& e = engine();
    e.body = &body;
    const uint64_t w0 = e.waits;
#pragma omp for schedule(dynamic, 4)
    for (int64_t k = 0; k < blocks; ++k) {
      const uint64_t b = uint64_t(reverse ? blocks - 1 - k : k);
      run_block(e, grid, block,
                {unsigned(b % grid.x), unsigned((b / grid.x) % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y))});
    }
    e.body = nullptr;
    g_stats.waits += e.waits - w0;
  }
  g_kernel = outer;
  g_stats.launches += 1, g_stats.blocks += uint64_t(blocks), g_stats.threads += uint64_t(blocks) * block.x * block.y * block.z;
  g_stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber& f = self(op_name(op));
  f.state = Fiber::kAtWarp;
  f.op = op, f.mask = mask, f.value = value, f.arg = arg, f.width = width;
  suspend(f);
  return f.result;
}

int block_barrier(Vote vote, int predicate) {
  Fiber& f = self("__syncthreads");
  f.state = Fiber::kAtBarrier;
  f.vote = vote, f.pred = predicate;
  suspend(f);
  return int(f.result);
}

void device_fault(const char* what, const void* address) {
  if (t_engine && t_engine->current) block_fault(*t_engine->current, fmt("%s at %p", what, address));
  die(fmt("%s at %p", what, address));
}

void launch_kernel(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   std::function<void()> body, std::vector<const void*> pointers) {
  Lock lock(g_mu);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > Engine::kMaxThreads || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    fail(cudaErrorInvalidValue, fmt("kernel %s launched with grid (%u,%u,%u) and block (%u,%u,%u)", name, grid.x,
                                    grid.y, grid.z, block.x, block.y, block.z));
    return;
  }
  if (smem > 0) die(fmt("kernel %s: dynamic shared memory is not emulated", name));
  const int dev = stream ? stream->device : t_device;
  for (size_t k = 0; k < pointers.size(); ++k) {
    if (!pointers[k]) continue;
    const auto* r = region_of(pointers[k]);
    if (!r)
      die(fmt("kernel %s: pointer argument %zu (%p) is not in device or page-locked memory (host memory, or freed)",
              name, k + 1, pointers[k]));
    if (r->second.device >= 0 && r->second.device != dev)
      die(fmt("kernel %s on cuda:%d: pointer argument %zu is memory of cuda:%d", name, dev, k + 1, r->second.device));
  }
  enqueue(stream, name, [name, grid, block, body = std::move(body)] { run_grid(name, grid, block, body); });
}

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
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown: return "unknown error";
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
cudaError_t free_region(void* p, bool device, const char* call) {
  if (!p) return cudaSuccess;
  if (capture_forbids(call)) return fail(cudaErrorStreamCaptureUnsupported);
  auto it = g_regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_regions.end() || (it->second.device >= 0) != device)
    return fail(cudaErrorInvalidValue, fmt("%s(%p): not the start of a live %s allocation", call, p,
                                           device ? "device" : "page-locked"));
  ++g_stats.host_waits;
  run_all();  // freeing synchronises
  if (device) g_device_bytes -= it->second.bytes;
  munmap(p, it->second.mapped);
  g_regions.erase(it);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaFree(void* p) {
  Lock lock(g_mu);
  return free_region(p, true, "cudaFree");
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
    case cudaMemcpyHostToDevice: ok = dst_dev && !src_dev; break;
    case cudaMemcpyDeviceToHost: ok = !dst_dev && src_dev; break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyHostToHost: ok = !dst_dev && !src_dev; break;
    case cudaMemcpyDefault: break;
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
    g_calls.add(call);
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

// ---- cuBLAS ------------------------------------------------------------------------------------------

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // null: cuBLAS's own pool (what cublasSetStream puts back)
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  h->workspace = nullptr;  // as documented: back to the default workspace pool
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* w, size_t bytes) {
  Lock lock(g_mu);
  if (w && !region_of(w, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = w;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  h->math = m;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
float tf32(float v) {  // rounds to TF32's 10-bit mantissa (nearest, ties away), as the tensor cores read inputs
  if (!std::isfinite(v)) return v;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b = (b + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&v, &b, 4);
  return v;
}
bool device_span(const float* p, int64_t rows, int64_t cols, int64_t ld) {  // column-major rows x cols
  if (rows == 0 || cols == 0) return true;
  const auto* r = region_of(p, size_t((cols - 1) * ld + rows) * sizeof(float));
  return r && r->second.device >= 0;
}
}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  Lock lock(g_mu);
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int64_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  const int64_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max<int64_t>(1, ar) || ldb < std::max<int64_t>(1, br) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!device_span(A, ar, ac, lda) || !device_span(B, br, bc, ldb) || !device_span(C, m, n, ldc))
    die(fmt("cublasSgemm (m %d, n %d, k %d): an operand is not wholly in device memory", m, n, k));
  if (h->stream && h->stream->capturing && !h->workspace)
    die("cublasSgemm captured on cuBLAS's default workspace: cuBLAS would allocate inside the capture (bind a "
        "workspace with cublasSetWorkspace after each cublasSetStream)");
  const float al = *alpha, be = *beta;
  const bool round = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  const cudaError_t e = enqueue(h->stream, "cublasSgemm", [=] {
    Window w;
    auto a = [&](int64_t i, int64_t l) { return ta == CUBLAS_OP_N ? A[i + l * lda] : A[l + i * lda]; };
    auto b = [&](int64_t l, int64_t j) { return tb == CUBLAS_OP_N ? B[l + j * ldb] : B[j + l * ldb]; };
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t l = 0; l < k; ++l) acc += round ? tf32(a(i, l)) * tf32(b(l, j)) : a(i, l) * b(l, j);
        float& c = C[i + j * ldc];
        c = be == 0.0f ? al * acc : al * acc + be * c;  // beta = 0: C is not read (it may hold NaN)
      }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// ---- cuSPARSE ----------------------------------------------------------------------------------------

struct cusparseContext {
  cudaStream_t stream = nullptr;
};
struct cusparseSpMatEmu {
  int64_t rows, cols, nnz;
  const int32_t *indptr, *indices;
  const float* values;
};
struct cusparseDnMatEmu {
  int64_t rows, cols, ld;
  float* values;
  cusparseOrder_t order;
};

const char* cusparseGetErrorString(cusparseStatus_t s) {
  switch (s) {
    case CUSPARSE_STATUS_SUCCESS: return "CUSPARSE_STATUS_SUCCESS";
    case CUSPARSE_STATUS_INVALID_VALUE: return "CUSPARSE_STATUS_INVALID_VALUE";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "CUSPARSE_STATUS_NOT_SUPPORTED";
    default: return "cuSPARSE error";
  }
}
cusparseStatus_t cusparseCreate(cusparseHandle_t* h) {
  *h = new cusparseContext;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroy(cusparseHandle_t h) {
  delete h;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseSetStream(cusparseHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateConstCsr(cusparseConstSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz,
                                        const void* indptr, const void* indices, const void* values,
                                        cusparseIndexType_t rt, cusparseIndexType_t ct, cusparseIndexBase_t base,
                                        cudaDataType vt) {
  if (rt != CUSPARSE_INDEX_32I || ct != CUSPARSE_INDEX_32I || base != CUSPARSE_INDEX_BASE_ZERO || vt != CUDA_R_32F)
    return CUSPARSE_STATUS_NOT_SUPPORTED;
  *d = new cusparseSpMatEmu{rows, cols, nnz, static_cast<const int32_t*>(indptr), static_cast<const int32_t*>(indices),
                            static_cast<const float*>(values)};
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld, void* values,
                                     cudaDataType vt, cusparseOrder_t order) {
  if (vt != CUDA_R_32F || order != CUSPARSE_ORDER_ROW || ld < cols) return CUSPARSE_STATUS_NOT_SUPPORTED;
  *d = new cusparseDnMatEmu{rows, cols, ld, static_cast<float*>(values), order};
  return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld,
                                          const void* values, cudaDataType vt, cusparseOrder_t order) {
  cusparseDnMatDescr_t m = nullptr;
  const cusparseStatus_t s = cusparseCreateDnMat(&m, rows, cols, ld, const_cast<void*>(values), vt, order);
  *d = m;
  return s;
}
cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}

namespace {
cusparseStatus_t check_spmm(cusparseOperation_t oa, cusparseOperation_t ob, cusparseConstSpMatDescr_t a,
                            cusparseConstDnMatDescr_t b, cusparseDnMatDescr_t c, cudaDataType t) {
  if (oa != CUSPARSE_OPERATION_NON_TRANSPOSE || ob != CUSPARSE_OPERATION_NON_TRANSPOSE || t != CUDA_R_32F)
    return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (b->rows != a->cols || c->rows != a->rows || c->cols != b->cols) return CUSPARSE_STATUS_INVALID_VALUE;
  return CUSPARSE_STATUS_SUCCESS;
}
}  // namespace

cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t, cusparseOperation_t oa, cusparseOperation_t ob, const void*,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void*,
                                         cusparseDnMatDescr_t c, cudaDataType t, cusparseSpMMAlg_t, size_t* bytes) {
  *bytes = size_t(a->rows + 1) * sizeof(int32_t);  // a buffer, so the caller's allocation of it is exercised
  return check_spmm(oa, ob, a, b, c, t);
}
cusparseStatus_t cusparseSpMM_preprocess(cusparseHandle_t, cusparseOperation_t oa, cusparseOperation_t ob, const void*,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void*,
                                         cusparseDnMatDescr_t c, cudaDataType t, cusparseSpMMAlg_t, void* buffer) {
  Lock lock(g_mu);
  if (!region_of(buffer, size_t(a->rows + 1) * sizeof(int32_t))) return CUSPARSE_STATUS_INVALID_VALUE;
  return check_spmm(oa, ob, a, b, c, t);
}
cusparseStatus_t cusparseSpMM(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha,
                              cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta,
                              cusparseDnMatDescr_t c, cudaDataType t, cusparseSpMMAlg_t, void* buffer) {
  Lock lock(g_mu);
  if (const cusparseStatus_t s = check_spmm(oa, ob, a, b, c, t); s != CUSPARSE_STATUS_SUCCESS) return s;
  if (!region_of(buffer, size_t(a->rows + 1) * sizeof(int32_t))) return CUSPARSE_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const cusparseSpMatEmu A = *a;
  const cusparseDnMatEmu B = *b, C = *c;
  const cudaError_t e = enqueue(h->stream, "cusparseSpMM", [=] {
    Window w;
    for (int64_t r = 0; r < A.rows; ++r)
      for (int64_t f = 0; f < C.cols; ++f) {
        float acc = 0.0f;
        for (int32_t q = A.indptr[r]; q < A.indptr[r + 1]; ++q) acc += A.values[q] * B.values[A.indices[q] * B.ld + f];
        float& out = C.values[r * C.ld + f];
        out = be == 0.0f ? al * acc : al * acc + be * out;
      }
  });
  return e == cudaSuccess ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}
