// The emulator's kernel engine (emu/README.md): every CUDA thread of a block runs on a fiber of its own, so
// __syncthreads, __syncwarp and the shuffles wait for the threads they name, and a wait that cannot
// complete on a GPU (an exited lane, a split barrier) stops the run. Blocks of a grid run in parallel on
// the OpenMP threads.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "emu/emu_state.h"

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

namespace gnn_emu {

thread_local ThreadState* t_current = nullptr;
const char* g_kernel = nullptr;

namespace {

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
  *--sp = 0;  // gnn_emu_fiber_main's (absent) return address
  *--sp = reinterpret_cast<uint64_t>(&gnn_emu_fiber_main);  // where the switch returns to
  for (int r = 0; r < 6; ++r) *--sp = 0;  // rbp rbx r12 r13 r14 r15
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
    case WarpOp::kSync:
      return "__syncwarp";
    case WarpOp::kShflXor:
      return "__shfl_xor_sync";
    case WarpOp::kShflDown:
      return "__shfl_down_sync";
    case WarpOp::kShflUp:
      return "__shfl_up_sync";
    case WarpOp::kShflIdx:
      return "__shfl_sync";
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
      block_fault(*ref,
                  fmt("%s with mask %08x names lanes beyond the block's %u threads", op_name(ref->op), ref->mask, n));
    const int width = ref->width;
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
      block_fault(*ref, fmt("%s with width %d (a power of two up to 32)", op_name(ref->op), width));
    for (unsigned l = 0; l < lanes; ++l) {
      Fiber& f = fs[w0 + l];
      if (!((ref->mask >> l) & 1u)) continue;
      const int base = int(l) & ~(width - 1);
      int src = int(l);
      switch (f.op) {
        case WarpOp::kSync:
          break;
        case WarpOp::kShflXor:
          src = int(l) ^ f.arg;
          break;
        case WarpOp::kShflDown:
          src = int(l) + f.arg;
          break;
        case WarpOp::kShflUp:
          src = int(l) - f.arg;
          break;
        case WarpOp::kShflIdx:
          src = base + (f.arg & (width - 1));
          break;
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
    const int result = first->vote == Vote::kOr      ? any
                       : first->vote == Vote::kAnd   ? all
                       : first->vote == Vote::kCount ? count
                                                     : 0;
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
  g_stats.launches += 1, g_stats.blocks += uint64_t(blocks),
      g_stats.threads += uint64_t(blocks) * block.x * block.y * block.z;
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
