// Elementwise arithmetic on the CPU in float, where a step spends enough in it to matter: each thread's
// part in a GNN_CPU_CLONES function, so its loop runs as AVX2 / AVX-512 lanes. The templates in
// kernels/elementwise.h are instantiated in their callers' code, which is compiled for the baseline ISA
// (SSE2); gradient accumulation (autograd/var.cpp) ran there at 4% of layout-tgraph's step. The same
// bits as the template: one addition and one multiplication per value, no contraction.
#include "base/common.h"
#include "kernels/cpu_parts.h"
#include "kernels/elementwise.h"

namespace gnn {

namespace {

GNN_CPU_CLONES void add_to_part(float* __restrict y, const float* __restrict a, const float* __restrict b,
                                int64_t begin, int64_t end, float sb) {
  for (int64_t i = begin; i < end; ++i) y[i] = a[i] + sb * b[i];
}

GNN_CPU_CLONES void add_into_part(float* __restrict y, const float* __restrict b, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) y[i] = y[i] + b[i];
}

}  // namespace

GNN_CPU_CLONES void column_rows_cpu(float* __restrict part, const float* __restrict x, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) part[f] += x[r * F + f];
}

void column_sum_cpu(float* out, const float* x, int64_t R, int64_t F, bool accumulate) {
  column_sum_of(out, R, F, accumulate,
                [&](int64_t r0, int64_t r1, float* part) { column_rows_cpu(part, x + r0 * F, r1 - r0, F); });
}

void add_into_cpu(float* y, const float* b, int64_t n) {
  over_threads(n, kElementwiseGrain, [&](int64_t begin, int64_t end) { add_into_part(y, b, begin, end); });
}

void add_to_cpu(float* y, const float* a, const float* b, int64_t n, float sb) {
  over_threads(n, kElementwiseGrain, [&](int64_t begin, int64_t end) { add_to_part(y, a, b, begin, end, sb); });
}

}  // namespace gnn
