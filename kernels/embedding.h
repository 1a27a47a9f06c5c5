// Embedding lookups: rows of a table [K, F] gathered by index, and the scatter-add back.
//   y[i, :] = table[idx[i], :];  dtable[k, :] = sum_{i: idx[i] = k} dy[i, :], summed in i order
//   (in chunks of 64 uses, see embedding_inverse)
// The backward goes through a counting-sort inverse of idx (no atomics: bitwise stable for any thread
// count, and the same bits on the CPU and the GPU). y, dy [n, F]; idx [n] in [0, K).
#pragma once
#include <cmath>
#include <vector>

#include "base/common.h"

namespace gnn {

template <class T>
void embedding_forward_ref(T* y, const T* table, const int32_t* idx, int64_t n, int64_t F) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t f = 0; f < F; ++f) y[i * F + f] = table[int64_t(idx[i]) * F + f];
}

template <class T>
void embedding_backward_ref(T* dtable, const T* dy, const int32_t* idx, int64_t n, int64_t K, int64_t F) {
  for (int64_t k = 0; k < K * F; ++k) dtable[k] = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t f = 0; f < F; ++f) dtable[int64_t(idx[i]) * F + f] += dy[i * F + f];
}

// torch.nn.Embedding's max_norm, in place: each of the U table rows listed in `rows` whose l2 norm exceeds
// max_norm is scaled by max_norm / (norm + 1e-7), as torch's embedding_renorm_ does before a lookup: the
// scale rounded to T, then each value multiplied in T (torch's bits wherever its norm rounds as ours).
// The norm is summed in f64 by fma in column order, so the host (one template for float and double)
// and the GPU (a thread per row) give the same bits. rows: distinct, in [0, K).
template <class T>
void embedding_renorm_ref(T* table, const int32_t* rows, int64_t U, int64_t F, double max_norm) {
  for (int64_t u = 0; u < U; ++u) {
    T* row = table + int64_t(rows[u]) * F;
    double ss = 0;
    for (int64_t f = 0; f < F; ++f) ss = std::fma(double(row[f]), double(row[f]), ss);
    const double norm = std::sqrt(ss);
    if (!(norm > max_norm)) continue;
    const T scale = T(max_norm / (norm + 1e-7));
    for (int64_t f = 0; f < F; ++f) row[f] *= scale;
  }
}
void embedding_renorm_cuda(float* table, const int32_t* rows, int64_t U, int64_t F, double max_norm, Stream stream);

// idx values must lie in [0, K): callers check at the op boundary.
void embedding_forward_cpu(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F);
void embedding_forward_cuda(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F, Stream stream);
void embedding_backward_cpu(float* dtable, const float* dy, const int32_t* idx, int64_t n, int64_t K, int64_t F);
// The inverse of idx as a CSR: the uses of row k are uses[ptr[k] .. ptr[k+1]), in increasing i
// (a stable counting sort). ptr has K + 1 entries, uses n. Both backward kernels sum in that order, in
// chunks of kEmbedChunk uses: each chunk summed in order, then the row's chunks in order. An opcode
// embedding has a hundred rows and some of them tens of thousands of uses; the chunks let the GPU spread
// such a row over many threads, and the CPU adds in the same order, so both give the same bits.
// chunk_ptr (K + 1 entries, may be null): row k's chunks are chunk_ptr[k] .. chunk_ptr[k+1]; returns
// the number of chunks.
inline constexpr int64_t kEmbedChunk = 64;
int64_t embedding_inverse(const int32_t* idx, int64_t n, int64_t K, int64_t* ptr, int64_t* uses,
                          int64_t* chunk_ptr = nullptr);
// CUDA: one thread per (chunk, f) sums a chunk into workspace [chunks, F], then one per (k, f) adds
// row k's chunks (ptr, uses and chunk_ptr on the device, from embedding_inverse): no atomics, the same
// bits as the CPU.
void embedding_backward_cuda(float* dtable, const float* dy, const int64_t* ptr, const int64_t* uses,
                             const int64_t* chunk_ptr, int64_t chunks, int64_t K, int64_t F, float* workspace,
                             Stream stream);

}  // namespace gnn
