// Embedding lookups on the GPU (kernels/embedding.h). Forward: a thread per output element, a gather.
// Backward, with no atomics: a thread per (chunk of kEmbedChunk uses, column) sums the chunk in use
// order into the workspace, then a thread per (row, column) adds the row's chunks in order, the
// CPU's order, so both give the same bits.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/embedding.h"

namespace gnn {
namespace {

__global__ void embedding_kernel(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F) {
  GNN_GRID_STRIDE(i, n * F)
  y[i] = __ldg(table + int64_t(__ldg(idx + i / F)) * F + i % F);
}

// ws[c, f] = the sum over chunk c's uses (of row k, c - chunk_ptr[k] kEmbedChunk-use steps into
// ptr[k] .. ptr[k+1]) of dy[use, f], in order; consecutive threads consecutive f.
__global__ void embedding_chunk_kernel(float* ws, const float* dy, const int64_t* ptr, const int64_t* uses,
                                       const int64_t* chunk_ptr, int64_t chunks, int64_t K, int64_t F) {
  GNN_GRID_STRIDE(t, chunks * F) {
    const int64_t c = t / F, f = t % F, k = segment_of(chunk_ptr, K, c);
    const int64_t begin = __ldg(ptr + k) + (c - __ldg(chunk_ptr + k)) * kEmbedChunk;
    const int64_t row_end = __ldg(ptr + k + 1), end = begin + kEmbedChunk < row_end ? begin + kEmbedChunk : row_end;
    float acc = 0.0f;
    for (int64_t u = begin; u < end; ++u) acc += __ldg(dy + __ldg(uses + u) * F + f);
    ws[t] = acc;
  }
}

// dtable[k, f] = the sum of row k's chunk sums, in order.
__global__ void embedding_rows_kernel(float* dtable, const float* ws, const int64_t* chunk_ptr, int64_t K, int64_t F) {
  GNN_GRID_STRIDE(t, K * F) {
    const int64_t k = t / F, f = t % F;
    float acc = 0.0f;
    for (int64_t c = __ldg(chunk_ptr + k); c < __ldg(chunk_ptr + k + 1); ++c) acc += __ldg(ws + c * F + f);
    dtable[t] = acc;
  }
}

// embedding_renorm_ref (kernels/embedding.h) with a thread per listed row: the host's arithmetic in its order.
__global__ void embedding_renorm_kernel(float* table, const int32_t* rows, int64_t U, int64_t F, double max_norm) {
  GNN_GRID_STRIDE(u, U) {
    float* row = table + int64_t(__ldg(rows + u)) * F;
    double ss = 0;
    for (int64_t f = 0; f < F; ++f) ss = fma(double(row[f]), double(row[f]), ss);
    const double norm = sqrt(ss);
    if (norm > max_norm) {
      const float scale = float(max_norm / (norm + 1e-7));
      for (int64_t f = 0; f < F; ++f) row[f] *= scale;
    }
  }
}

}  // namespace

void embedding_forward_cuda(float* y, const float* table, const int32_t* idx, int64_t n, int64_t F, Stream stream) {
  if (n * F == 0) return;
  embedding_kernel<<<grid_for(n * F, "embedding_forward_cuda"), kThreads, 0, stream>>>(y, table, idx, n, F);
  GNN_CUDA_LAUNCH_CHECK("embedding_forward_cuda");
}

void embedding_backward_cuda(float* dtable, const float* dy, const int64_t* ptr, const int64_t* uses,
                             const int64_t* chunk_ptr, int64_t chunks, int64_t K, int64_t F, float* workspace,
                             Stream stream) {
  if (K * F == 0) return;
  if (chunks > 0) {
    embedding_chunk_kernel<<<grid_for(chunks * F, "embedding_backward_cuda"), kThreads, 0, stream>>>(
        workspace, dy, ptr, uses, chunk_ptr, chunks, K, F);
    GNN_CUDA_LAUNCH_CHECK("embedding_backward_cuda");
  }
  GNN_LAUNCH_N("embedding_backward_cuda", K * F, embedding_rows_kernel, dtable, workspace, chunk_ptr, K, F);
}

void embedding_renorm_cuda(float* table, const int32_t* rows, int64_t U, int64_t F, double max_norm, Stream stream) {
  GNN_LAUNCH_N("embedding_renorm_cuda", U, embedding_renorm_kernel, table, rows, U, F, max_norm);
}

}  // namespace gnn
