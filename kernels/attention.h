// The row maps of graph self-attention (autograd/op_attention.cpp), on one graph and head: n rows of D
// values read from or written to a strided matrix with row stride ld (the head's columns of q, k, v, y);
// the other operands are contiguous [n, D] or [n].
//   phi_rows:   a[i, d] = phi(q[i*ld + d]),  phi(x) = elu(x) + 1 (> 0: the linear attention's feature map)
//   div_rows:   y[i*ld + d] = num[i, d] / den[i]
//   coef_rows:  u[i, d] = dy[i*ld + d] / den[i];  c[i] = -(sum_d dy[i*ld + d] y[i, d]) / den[i]
//   dphi_rows:  dq[i*ld + d] = da[i, d] * phi'(q[i*ld + d])
// Host templates (float and double) and CUDA versions (a thread per element; coef_rows a warp per row,
// its lanes combined in a fixed butterfly).
//
// The full (softmax) attention also has a fused CUDA form for head widths D <= kFlashMaxD: the tiling of
// FlashAttention (Dao et al. 2022) on CUDA cores in fp32, over every graph and head of a disjoint union in
// one launch forward and two backward, the n x n scores never written to memory. q, k, v, y, dy, dq, dk,
// dv are [N, H*D] (head h: columns h*D .. h*D+D-1); lse, delta are [N, H]; tiles is flash_tiles(graph_ptr)
// copied to the device: {first row, graph's first row, graph's end} per tile of kFlashTile rows.
//   forward:  y = softmax_rows(Q K^T / sqrt(D)) V per graph and head, lse[i, h] = log sum_j exp(s_ij),
//             a running max and sum over key tiles (a block per query tile and head)
//   backward: P recomputed from lse; dq (and delta[i, h] = <dy_i, y_i>) a block per query tile, then dk, dv
//             a block per key tile, each summing over the other side's tiles in order: no atomics, the
//             same bits every run.
#pragma once
#include <cmath>
#include <vector>

#include "base/common.h"
#include "kernels/math_fn.h"

namespace gnn {

template <class T>
GNN_HD GNN_INLINE inline T attn_phi(T x) {
  return x > T(0) ? x + T(1) : math_exp(x);
}
template <class T>
GNN_HD GNN_INLINE inline T attn_dphi(T x) {
  return x > T(0) ? T(1) : math_exp(x);
}

template <class T>
GNN_INLINE inline void phi_rows_ref(T* a, const T* q, int64_t n, int64_t D, int64_t ld) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) a[i * D + d] = attn_phi(q[i * ld + d]);
}
template <class T>
void div_rows(T* y, int64_t ld, const T* num, const T* den, int64_t n, int64_t D) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) y[i * ld + d] = num[i * D + d] / den[i];
}
template <class T>
void coef_rows(T* u, T* c, const T* dy, int64_t ld, const T* y, const T* den, int64_t n, int64_t D) {
  for (int64_t i = 0; i < n; ++i) {
    T dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      u[i * D + d] = dy[i * ld + d] / den[i];
      dot += dy[i * ld + d] * y[i * D + d];
    }
    c[i] = -dot / den[i];
  }
}
template <class T>
GNN_INLINE inline void dphi_rows_ref(T* dq, int64_t ld, const T* da, const T* q, int64_t n, int64_t D) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) dq[i * ld + d] = da[i * D + d] * attn_dphi(q[i * ld + d]);
}

void phi_rows_cuda(float* a, const float* q, int64_t n, int64_t D, int64_t ld, Stream stream);
void div_rows_cuda(float* y, int64_t ld, const float* num, const float* den, int64_t n, int64_t D, Stream stream);
void coef_rows_cuda(float* u, float* c, const float* dy, int64_t ld, const float* y, const float* den, int64_t n,
                    int64_t D, Stream stream);
// The two maps with an exponential, in float on the host: the _ref templates compiled in the AVX-512 /
// AVX2 clones (kernels/attention_cpu.cpp), the same bits.
void phi_rows_cpu(float* a, const float* q, int64_t n, int64_t D, int64_t ld);
void dphi_rows_cpu(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D);
void dphi_rows_cuda(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D, Stream stream);

inline constexpr int64_t kFlashTile = 32, kFlashMaxD = 64;

// The tiles of the graphs graph_ptr[0..G] delimits, kFlashTile rows each (a graph's last one shorter; an
// empty graph has none), as {first row, graph's first row, graph's end} triples.
inline std::vector<int64_t> flash_tiles(const int64_t* graph_ptr, int64_t G) {
  std::vector<int64_t> t;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = graph_ptr[g]; r < graph_ptr[g + 1]; r += kFlashTile)
      t.insert(t.end(), {r, graph_ptr[g], graph_ptr[g + 1]});
  return t;
}

// num_tiles = flash_tiles(...).size() / 3; 1 <= D <= kFlashMaxD.
void flash_attention_forward_cuda(float* y, float* lse, const float* q, const float* k, const float* v,
                                  const int64_t* tiles, int64_t num_tiles, int64_t H, int64_t D, Stream stream);
// delta: [N, H] scratch the first kernel fills and the second reads. dq, dk, dv are written, not added to.
void flash_attention_backward_cuda(float* dq, float* dk, float* dv, float* delta, const float* dy, const float* y,
                                   const float* lse, const float* q, const float* k, const float* v,
                                   const int64_t* tiles, int64_t num_tiles, int64_t H, int64_t D, Stream stream);

}  // namespace gnn
