#include "runtime/parallel.h"

#include "base/error.h"

#ifdef GNN_WITH_OPENMP
#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>
#endif

namespace gnn {

#ifdef GNN_WITH_OPENMP
int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) {
  GNN_CHECK(n >= 1, "thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}
bool openmp_enabled() { return true; }

void start_threads() {
  const int n = std::min(omp_get_max_threads(), omp_get_thread_limit());
  if (n <= 1) return;
  // libgomp that cannot start a thread (`ulimit -u`, a container's pids.max, `ulimit -v` or `-s` for the
  // stacks) prints its own line and exits, no destructor run: n - 1 threads alive at once are tried first.
  // Best effort: near the limit the team can still fail after it (a thread that exited is counted a while
  // longer; a second team, such as a prefetching thread's, needs as many again).
  std::mutex gate;
  std::vector<pthread_t> started;
  int err = 0;
  {
    std::lock_guard<std::mutex> hold(gate);
    for (int i = 0; i < n - 1 && err == 0; ++i) {
      pthread_t t;
      err = ::pthread_create(
          &t, nullptr,
          [](void* g) -> void* {
            std::lock_guard<std::mutex> wait(*static_cast<std::mutex*>(g));
            return nullptr;
          },
          &gate);
      if (err == 0) started.push_back(t);
    }
  }
  for (pthread_t t : started) ::pthread_join(t, nullptr);
  GNN_CHECK(err == 0, "cannot start ", n, " CPU threads (", std::strerror(err), " at thread ", started.size() + 2,
            "): lower --threads or OMP_NUM_THREADS, or raise the limit that stops them (this user's processes, "
            "ulimit -u; a container's pids.max; the address space for their stacks, ulimit -v and -s)");
#pragma omp parallel
  {  // the team started now, while it can be
  }
}
#else
int num_threads() { return 1; }
void set_num_threads(int n) { GNN_CHECK(n >= 1, "thread count must be at least 1, got ", n); }
bool openmp_enabled() { return false; }
void start_threads() {}
#endif

}  // namespace gnn
