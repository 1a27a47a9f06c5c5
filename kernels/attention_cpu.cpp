// The linear attention's feature map and its derivative on the CPU (kernels/attention.h): the
// templates' loops in each ISA's clone, so vmath's exp vectorises and its multiply-adds are FMA
// instructions rather than calls.
#include "kernels/attention.h"

namespace gnn {

GNN_CPU_CLONES void phi_rows_cpu(float* a, const float* q, int64_t n, int64_t D, int64_t ld) {
  phi_rows_ref<float>(a, q, n, D, ld);
}

GNN_CPU_CLONES void dphi_rows_cpu(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D) {
  dphi_rows_ref<float>(dq, ld, da, q, n, D);
}

}  // namespace gnn
