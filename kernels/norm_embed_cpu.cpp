// Instance norm: one task per graph and block of channels, each channel's sums over the rows in the
// reference's order (so the two cannot drift), with per-graph dgamma/dbeta partials summed in graph
// order afterwards. Embedding backward:
// a counting sort of idx gives each table row its list of uses in index order; rows over threads.
#include <algorithm>
#include <cstring>

#include "kernels/norm_embed.h"

namespace gnn {

namespace {

// Channels per task: a graph's rows are walked once per pass with the block's channels contiguous in
// each row (the reference walks one channel at a time down the rows, a cache line per value), and a
// graph of many channels spreads over the threads. Each channel's sums still run over the rows in
// order, so the results are the reference's, bitwise, for any thread count.
constexpr int64_t kNormBlock = 64;

}  // namespace

GNN_CPU_CLONES void instance_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                              const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F,
                                              float eps) {
  const int64_t blocks = ceil_div<int64_t>(F, kNormBlock);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * kNormBlock, w = std::min(kNormBlock, F - f0);
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    float m[kNormBlock] = {}, v[kNormBlock] = {}, rs[kNormBlock];
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < w; ++f) m[f] += x[i * F + f0 + f];
    for (int64_t f = 0; f < w; ++f) m[f] = n ? m[f] / float(n) : 0.0f;
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < w; ++f) v[f] += (x[i * F + f0 + f] - m[f]) * (x[i * F + f0 + f] - m[f]);
    for (int64_t f = 0; f < w; ++f) {
      rs[f] = 1.0f / std::sqrt((n ? v[f] / float(n) : 0.0f) + eps);
      mean[g * F + f0 + f] = m[f], rstd[g * F + f0 + f] = rs[f];
    }
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < w; ++f)
        y[i * F + f0 + f] = (x[i * F + f0 + f] - m[f]) * rs[f] * (gamma ? gamma[f0 + f] : 1.0f) + (beta ? beta[f0 + f] : 0.0f);
  }
}

GNN_CPU_CLONES void instance_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                               const float* mean, const float* rstd, const float* gamma,
                                               const int64_t* graph_ptr, int64_t G, int64_t F) {
  std::vector<float> pg(static_cast<size_t>(G * F)), pb(static_cast<size_t>(G * F));
  const int64_t blocks = ceil_div<int64_t>(F, kNormBlock);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * kNormBlock, w = std::min(kNormBlock, F - f0);
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    const float* m = mean + g * F + f0;
    const float* rs = rstd + g * F + f0;
    float s1[kNormBlock] = {}, s2[kNormBlock] = {}, dg[kNormBlock] = {}, db[kNormBlock] = {}, gm[kNormBlock];
    for (int64_t f = 0; f < w; ++f) gm[f] = gamma ? gamma[f0 + f] : 1.0f;
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < w; ++f) {
        const float xh = (x[i * F + f0 + f] - m[f]) * rs[f], d = dy[i * F + f0 + f];
        s1[f] += d * gm[f], s2[f] += d * gm[f] * xh;
        dg[f] += d * xh, db[f] += d;
      }
    for (int64_t f = 0; f < w; ++f) {
      if (n) s1[f] /= float(n), s2[f] /= float(n);
      pg[size_t(g * F + f0 + f)] = dg[f], pb[size_t(g * F + f0 + f)] = db[f];
    }
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < w; ++f) {
        const float xh = (x[i * F + f0 + f] - m[f]) * rs[f];
        dx[i * F + f0 + f] = (dy[i * F + f0 + f] * gm[f] - s1[f] - xh * s2[f]) * rs[f];
      }
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
