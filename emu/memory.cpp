// The emulator's memory (emu/README.md): every allocation is its own mapping with a guard page after it;
// device allocations stay inaccessible except while device work runs (a Window is open), and the SIGSEGV
// handler turns a fault into a message naming the kernel, block and thread.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "emu/emu_state.h"

namespace gnn_emu {

std::map<uintptr_t, Region>& g_regions = *new std::map<uintptr_t, Region>;  // never destroyed (emu_state.h)
size_t g_device_bytes = 0;

namespace {

size_t round_pages(size_t b) { return (b + page_bytes() - 1) / page_bytes() * page_bytes(); }

int g_window = 0;  // > 0 while device work runs: device memory is accessible

void protect_devices(bool open) {
  for (auto& [base, r] : g_regions)
    if (r.device >= 0 && r.bytes > 0)
      mprotect(reinterpret_cast<void*>(base), round_pages(r.bytes), open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

}  // namespace

size_t page_bytes() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

const std::pair<const uintptr_t, Region>* region_of(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_regions.upper_bound(a);
  if (it == g_regions.begin()) return nullptr;
  --it;
  if (a - it->first + bytes > it->second.bytes && !(bytes == 0 && a - it->first == it->second.bytes)) return nullptr;
  return &*it;
}

Window::Window() {
  if (g_window++ == 0) protect_devices(true);
}
Window::~Window() {
  if (--g_window == 0) protect_devices(false);
}

namespace {

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
    n = std::snprintf(msg, sizeof msg,
                      "gnn CUDA emulator: a device copy or library call touched %p, outside every "
                      "live allocation\n",
                      addr);
  }
  if (n > 0) {
    if (write(2, msg, size_t(std::min(n, int(sizeof msg) - 1))) < 0) {}
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

}  // namespace

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

}  // namespace gnn_emu
