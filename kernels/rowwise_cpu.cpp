// Row-wise kernels on the CPU: rows over threads. The per-row maths is the reference's own (called
// in float), so the two cannot drift.
#include "kernels/rowwise.h"

namespace gnn {

GNN_CPU_CLONES void rowwise_forward_cpu(float* y, const float* x, int64_t R, int64_t F, RowOp op, float eps) {
#pragma omp parallel for schedule(static) if (R * F > 16384)
  for (int64_t r = 0; r < R; ++r) rowwise_forward_ref<float>(y + r * F, x + r * F, 1, F, op, eps);
}

GNN_CPU_CLONES void rowwise_backward_cpu(float* dx, const float* y, const float* dy, const float* x, int64_t R,
                                         int64_t F, RowOp op, float eps) {
#pragma omp parallel for schedule(static) if (R * F > 16384)
  for (int64_t r = 0; r < R; ++r)
    rowwise_backward_ref<float>(dx + r * F, y + r * F, dy + r * F, x ? x + r * F : nullptr, 1, F, op, eps);
}

}  // namespace gnn
