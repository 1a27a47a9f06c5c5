// Instance norm: one task per graph running the reference's per-graph maths in float (so the two cannot
// drift), with per-graph dgamma/dbeta partials summed in graph order afterwards. Embedding backward:
// a counting sort of idx gives each table row its list of uses in index order; rows over threads.
#include <algorithm>
#include <cstring>

#include "kernels/norm_embed.h"

namespace gnn {

GNN_CPU_CLONES void instance_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                              const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F,
                                              float eps) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < G; ++g) {
    const int64_t local[2] = {0, graph_ptr[g + 1] - graph_ptr[g]};
    const int64_t b = graph_ptr[g];
    instance_norm_forward_ref<float>(y + b * F, mean + g * F, rstd + g * F, x + b * F, gamma, beta, local, 1, F, eps);
  }
}

GNN_CPU_CLONES void instance_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                               const float* mean, const float* rstd, const float* gamma,
                                               const int64_t* graph_ptr, int64_t G, int64_t F) {
  std::vector<float> pg(static_cast<size_t>(G * F)), pb(static_cast<size_t>(G * F));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < G; ++g) {
    const int64_t local[2] = {0, graph_ptr[g + 1] - graph_ptr[g]};
    const int64_t b = graph_ptr[g];
    instance_norm_backward_ref<float>(dx + b * F, pg.data() + g * F, pb.data() + g * F, dy + b * F, x + b * F,
                                      mean + g * F, rstd + g * F, gamma, local, 1, F);
  }
  for (int64_t f = 0; f < F; ++f) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t g = 0; g < G; ++g) sg += pg[size_t(g * F + f)], sb += pb[size_t(g * F + f)];
    if (dgamma) dgamma[f] = sg;
    if (dbeta) dbeta[f] = sb;
  }
}

GNN_CPU_CLONES void embedding_forward_cpu(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F) {
#pragma omp parallel for schedule(static) if (n * F > 16384)
  for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * F, table + int64_t(idx[i]) * F, size_t(F) * sizeof(float));
}

int64_t embedding_inverse(const int32_t* idx, int64_t n, int64_t K, int64_t* ptr, int64_t* uses, int64_t* chunk_ptr) {
  std::fill(ptr, ptr + K + 1, int64_t(0));
  for (int64_t i = 0; i < n; ++i) ptr[idx[i] + 1]++;
  for (int64_t k = 0; k < K; ++k) ptr[k + 1] += ptr[k];
  std::vector<int64_t> next(ptr, ptr + K);
  for (int64_t i = 0; i < n; ++i) uses[next[size_t(idx[i])]++] = i;
  int64_t chunks = 0;
  for (int64_t k = 0; k < K; ++k) {
    if (chunk_ptr) chunk_ptr[k] = chunks;
    chunks += ceil_div<int64_t>(ptr[k + 1] - ptr[k], kEmbedChunk);
  }
  if (chunk_ptr) chunk_ptr[K] = chunks;
  return chunks;
}

GNN_CPU_CLONES void embedding_backward_cpu(float* dtable, const float* dy, const int32_t* idx, int64_t n, int64_t K,
                                           int64_t F) {
  std::vector<int64_t> ptr(static_cast<size_t>(K + 1)), uses(static_cast<size_t>(n));
  embedding_inverse(idx, n, K, ptr.data(), uses.data());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t k = 0; k < K; ++k) {
    float* row = dtable + k * F;
    std::vector<float> part(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) row[f] = 0.0f;
    for (int64_t c = ptr[size_t(k)]; c < ptr[size_t(k + 1)]; c += kEmbedChunk) {  // the GPU's order
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t u = c; u < std::min(c + kEmbedChunk, ptr[size_t(k + 1)]); ++u) {
        const float* g = dy + uses[size_t(u)] * F;
        for (int64_t f = 0; f < F; ++f) part[size_t(f)] += g[f];
      }
      for (int64_t f = 0; f < F; ++f) row[f] += part[size_t(f)];
    }
  }
}

}  // namespace gnn
