// Splitting a CPU kernel's range over the OpenMP threads so that each part runs in a GNN_CPU_CLONES
// function. target_clones compiles a function's own body for each ISA, not the lambdas or OpenMP
// regions outlined from it (those stay baseline SSE2): a loop written inside `#pragma omp parallel for`
// in a cloned function, or in a lambda it calls, never runs as AVX2. So the threads split [0, n) here
// and each calls a cloned function on its contiguous part (the same parts as schedule(static)).
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
