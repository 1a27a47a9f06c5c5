// Embeddings on the CPU: the forward copies rows; the backward sorts idx by counting, which gives each
// table row its list of uses in index order, and spreads the chunks of those lists over threads.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/embedding.h"

namespace gnn {

GNN_CPU_CLONES void embedding_forward_cpu(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F) {
#pragma omp parallel for schedule(static) if (n * F > 16384)
  for (int64_t i = 0; i < n; ++i) {
    const float* __restrict src = table + int64_t(idx[i]) * F;
    float* __restrict dst = y + i * F;
    for (int64_t f = 0; f < F; ++f) dst[f] = src[f];  // a few values a row: a call to memcpy cost more
  }
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

// Each chunk of kEmbedChunk uses summed on its own (a chunk per task: one row may hold most of the uses,
// as the constant row layout-tgraph's first layer gathers for every node that is not configurable,
// nn::Linear::forward_joined_rows), then each row's chunks added in order: the order of the GPU kernel,
// for any thread count. A row of one chunk is summed straight into dtable: its sum starts at +0, so 0 +
// the sum, what adding it to a zeroed row gives, is the sum itself.
GNN_CPU_CLONES void embedding_backward_cpu(float* dtable, const float* dy, const int32_t* idx, int64_t n, int64_t K,
                                           int64_t F) {
  std::vector<int64_t> ptr(static_cast<size_t>(K + 1)), uses(static_cast<size_t>(n)),
      chunk_ptr(static_cast<size_t>(K + 1));
  const int64_t chunks = embedding_inverse(idx, n, K, ptr.data(), uses.data(), chunk_ptr.data());
  std::vector<int64_t> first(static_cast<size_t>(chunks + 1)), row_of(static_cast<size_t>(chunks));
  bool longer = false;  // any row of several chunks
  for (int64_t k = 0; k < K; ++k) {
    longer = longer || chunk_ptr[size_t(k + 1)] - chunk_ptr[size_t(k)] > 1;
    for (int64_t q = chunk_ptr[size_t(k)]; q < chunk_ptr[size_t(k + 1)]; ++q)
      first[size_t(q)] = ptr[size_t(k)] + (q - chunk_ptr[size_t(k)]) * kEmbedChunk, row_of[size_t(q)] = k;
  }
  first[size_t(chunks)] = n;  // chunk q: uses[first[q] .. first[q+1])
  // the chunks of rows of several chunks; written only there
  const auto part = longer ? std::make_unique_for_overwrite<float[]>(size_t(chunks * F)) : nullptr;
  auto single = [&](int64_t k) { return chunk_ptr[size_t(k + 1)] - chunk_ptr[size_t(k)] == 1; };
#pragma omp parallel if (n * F > 16384)
  {
#pragma omp for schedule(static)
    for (int64_t q = 0; q < chunks; ++q) {
      const int64_t k = row_of[size_t(q)];
      float* __restrict sum = single(k) ? dtable + k * F : part.get() + q * F;
      for (int64_t f = 0; f < F; ++f) sum[f] = 0.0f;
      for (int64_t u = first[size_t(q)]; u < first[size_t(q + 1)]; ++u) {
        const float* __restrict g = dy + uses[size_t(u)] * F;
        for (int64_t f = 0; f < F; ++f) sum[f] += g[f];
      }
    }
#pragma omp for schedule(static)
    for (int64_t k = 0; k < K; ++k) {
      if (single(k)) continue;
      float* __restrict row = dtable + k * F;
      for (int64_t f = 0; f < F; ++f) row[f] = 0.0f;
      for (int64_t q = chunk_ptr[size_t(k)]; q < chunk_ptr[size_t(k + 1)]; ++q)
        for (int64_t f = 0; f < F; ++f) row[f] += part[size_t(q * F + f)];
    }
  }
}

}  // namespace gnn
