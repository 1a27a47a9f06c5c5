// Embeddings on the CPU: the forward copies rows; the backward sorts idx by counting, which gives each
// table row its list of uses in index order, and spreads the rows over threads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/embedding.h"

namespace gnn {

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
