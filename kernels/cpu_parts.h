// Splitting a CPU kernel's range over the OpenMP threads so that each part runs in a GNN_CPU_CLONES
// function. target_clones compiles a function's own body for each ISA (and the OpenMP regions outlined
// from that body get clones of their own), but not a lambda it calls: a lambda is a function of its own,
// compiled for the baseline ISA (SSE2), with any OpenMP region inside it. So a per-element loop written
// in a lambda (dispatch_act's, say) either is inlined into the clone (GNN_INLINE) or runs in a part
// function that is cloned itself: over_threads splits [0, n) into the threads' contiguous parts (as
// schedule(static) would) and each thread calls a cloned function on its part.
#pragma once
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gnn {

// part(begin, end) on each thread's share of [0, n); one thread when n <= grain.
template <class Part>
void over_threads(int64_t n, int64_t grain, Part&& part) {
#ifdef _OPENMP
#pragma omp parallel if (n > grain)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads(), b = n * t / T, e = n * (t + 1) / T;
    if (b < e) part(b, e);
  }
#else
  (void)grain;
  if (n > 0) part(int64_t(0), n);
#endif
}

}  // namespace gnn
