// Layer norm on the CPU: rows over threads, each row the reference's own maths (called in float), so
// the two cannot drift; dgamma and dbeta sum per fixed chunk of rows and then in chunk order, so the
// bits do not depend on the thread count.
#include <vector>

#include "kernels/layer_norm.h"

namespace gnn {

GNN_CPU_CLONES void layer_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                           const float* beta, int64_t R, int64_t F, float eps) {
#pragma omp parallel for schedule(static) if (R * F > 16384)
  for (int64_t r = 0; r < R; ++r)
    layer_norm_forward_ref<float>(y + r * F, mean + r, rstd + r, x + r * F, gamma, beta, 1, F, eps);
}

GNN_CPU_CLONES void layer_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                            const float* mean, const float* rstd, const float* gamma, int64_t R,
                                            int64_t F) {
  constexpr int64_t kChunks = 16;
  const int64_t chunks = std::max<int64_t>(1, std::min(kChunks, R));
  std::vector<float> pg(static_cast<size_t>(chunks * F), 0.0f), pb(static_cast<size_t>(chunks * F), 0.0f);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * R / chunks, r1 = (c + 1) * R / chunks;
    layer_norm_backward_ref<float>(dx + r0 * F, pg.data() + c * F, pb.data() + c * F, dy + r0 * F, x + r0 * F,
                                   mean + r0, rstd + r0, gamma, r1 - r0, F);
  }
  for (int64_t f = 0; f < F; ++f) {
    float g = 0.0f, b = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) g += pg[size_t(c * F + f)], b += pb[size_t(c * F + f)];
    if (dgamma) dgamma[f] = g;
    if (dbeta) dbeta[f] = b;
  }
}

}  // namespace gnn
