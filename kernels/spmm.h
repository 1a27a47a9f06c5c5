// Gather SpMM over a CSR whose rows are destination nodes (runtime/graph.h): for each row v,
//   sum:  y[v, f] = sum_{p in row v} w[p] * x[src[p], f]
//   mean: y[v, f] = sum / deg(v)                      (0 for a row with no edges)
//   max:  y[v, f] = max_{p in row v} w[p] * x[src[p], f], argmax[v, f] = that p (its CSR position),
//         the first one on ties, the first NaN where a term is NaN (y NaN, as torch's amax; base/common.h's
//         max_takes); an empty row gives y = 0 and argmax = -1
// w (per CSR position) may be null: every weight 1. x: [*, F] with row stride ldx; y: [S, F] with
// stride ldy. F is any width, including C*F for config-batched activations laid out node-major, so
// one gather reads C*F contiguous floats per neighbour.
//
// Backward, with no atomics: each dx row is the transposed gather over its CSC row (runtime/graph.h),
// owned by one thread, summed in CSC order, so results are bitwise identical for any thread count.
// With a base (x's gradient so far; may be dx itself), dx = base + that sum (the sum formed first).
//   sum/mean: dx[u, f] = sum_{q in CSC row u} w[p] / (deg(v) for mean) * dy[v, f],  p = csc_to_csr[q], v = dst
//   max:      dx[u, f] = sum over the same q with argmax[v, f] == p of w[p] * dy[v, f]
//   weights:  dw[p] = sum_f dy[v, f] * x[src[p], f] (/ deg(v) for mean; only the argmax f for max)
// (The CPU kernel sums dw's products in 16 lanes, then the rest in order, sum and mean: spmm_cpu.cpp,
// dot_row; the max's in column order.)
#pragma once
#include <algorithm>
#include <limits>
#include <vector>

#include "base/common.h"
#include "kernels/elementwise.h"

namespace gnn {

enum class Reduce { kSum, kMean, kMax };
const char* reduce_name(Reduce r);

// The CSR and CSC of one graph as raw pointers (Graph's tensors, on the kernel's device).
struct CsrView {
  int64_t num_rows = 0;  // destination nodes
  int64_t num_cols = 0;  // source nodes (rows of x)
  const int32_t* indptr = nullptr;  // [num_rows + 1]
  const int32_t* indices = nullptr;  // [E] source of each entry
  const int32_t* csc_indptr = nullptr;  // [num_cols + 1]
  const int32_t* csc_indices = nullptr;  // [E] destination of each CSC entry
  const int32_t* csc_to_csr = nullptr;  // [E]
  int64_t num_edges = 0;  // E (what a GPU launch over the edges is sized by)
};

template <class T>
void spmm_forward_ref(T* y, int32_t* argmax, const T* x, const T* w, const CsrView& g, int64_t F, int64_t ldx,
                      int64_t ldy, Reduce op, const T* base = nullptr) {
  for (int64_t v = 0; v < g.num_rows; ++v) {
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    for (int64_t f = 0; f < F; ++f) {
      T acc = op == Reduce::kMax ? -std::numeric_limits<T>::infinity() : T(0);
      int32_t arg = -1;
      for (int32_t p = b; p < e; ++p) {
        const T val = (w ? w[p] : T(1)) * x[g.indices[p] * ldx + f];
        if (op == Reduce::kMax) {
          if (arg < 0 || max_takes(val, acc)) acc = val, arg = p;
        } else {
          acc += val;
        }
      }
      if (op == Reduce::kMean && e > b) acc /= T(e - b);
      if (op == Reduce::kMax) {
        if (arg < 0) acc = T(0);
        argmax[v * F + f] = arg;
      }
      y[v * ldy + f] = base ? base[v * ldy + f] + acc : acc;
    }
  }
}

template <class T>
void spmm_backward_x_ref(T* dx, const T* dy, const int32_t* argmax, const T* w, const CsrView& g, int64_t F,
                         int64_t ldx, int64_t ldy, Reduce op, const T* base = nullptr) {
  for (int64_t u = 0; u < g.num_cols; ++u) {
    for (int64_t f = 0; f < F; ++f) {
      T acc = 0;
      for (int32_t q = g.csc_indptr[u]; q < g.csc_indptr[u + 1]; ++q) {
        const int32_t p = g.csc_to_csr[q], v = g.csc_indices[q];
        const T c = (w ? w[p] : T(1)) / (op == Reduce::kMean ? T(g.indptr[v + 1] - g.indptr[v]) : T(1));
        if (op != Reduce::kMax || argmax[v * F + f] == p) acc += c * dy[v * ldy + f];
      }
      dx[u * ldx + f] = base ? base[u * ldx + f] + acc : acc;
    }
  }
}

template <class T>
void spmm_backward_w_ref(T* dw, const T* dy, const T* x, const int32_t* argmax, const CsrView& g, int64_t F,
                         int64_t ldx, int64_t ldy, Reduce op) {
  for (int64_t v = 0; v < g.num_rows; ++v) {
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    for (int32_t p = b; p < e; ++p) {
      T acc = 0;
      for (int64_t f = 0; f < F; ++f)
        if (op != Reduce::kMax || argmax[v * F + f] == p) acc += dy[v * ldy + f] * x[g.indices[p] * ldx + f];
      dw[p] = op == Reduce::kMean ? acc / T(e - b) : acc;
    }
  }
}

// With base ([S, F], ldy apart like y, not y itself): y = base + the aggregate (GIN's x + sum), each row
// added once it is formed: the bits of adding after.
void spmm_forward_cpu(float* y, int32_t* argmax, const float* x, const float* w, const CsrView& g, int64_t F,
                      int64_t ldx, int64_t ldy, Reduce op, const float* base = nullptr);
// With base (ldx apart, like dx; base == dx adds in place): dx = base + the gradient, the gradient summed
// first (the reference's and CUDA's order), instead of dx = the gradient (fused layers add it to their
// own part; autograd to the gradient x holds)
void spmm_backward_x_cpu(float* dx, const float* dy, const int32_t* argmax, const float* w, const CsrView& g, int64_t F,
                         int64_t ldx, int64_t ldy, Reduce op, const float* base = nullptr);
void spmm_backward_w_cpu(float* dw, const float* dy, const float* x, const int32_t* argmax, const CsrView& g, int64_t F,
                         int64_t ldx, int64_t ldy, Reduce op);

void spmm_forward_cuda(float* y, int32_t* argmax, const float* x, const float* w, const CsrView& g, int64_t F,
                       int64_t ldx, int64_t ldy, Reduce op, const float* base, Stream stream);
void spmm_backward_x_cuda(float* dx, const float* dy, const int32_t* argmax, const float* w, const CsrView& g,
                          int64_t F, int64_t ldx, int64_t ldy, Reduce op, const float* base, Stream stream);
void spmm_backward_w_cuda(float* dw, const float* dy, const float* x, const int32_t* argmax, const CsrView& g,
                          int64_t F, int64_t ldx, int64_t ldy, Reduce op, Stream stream);

// All heads in one call each (GAT's aggregation): per-head weights w [E, H] (row-major, per CSR
// position), x, y, dy, dx [N, H*Fh] with head h in columns h*Fh .. h*Fh+Fh-1, dw [E, H]. The same as one
// spmm_* call per head on that head's columns and weights, sum or mean (not max): the reference is those
// calls, and the CPU kernels have spmm_*_cpu's bits on each head (a row's heads in turn, one walk of the
// graph instead of H).
template <class T>
void spmm_heads_forward_ref(T* y, const T* x, const T* w, const CsrView& g, int64_t H, int64_t Fh, Reduce op) {
  const int64_t E = g.num_edges;
  std::vector<T> wt(size_t(E * H));  // head h's weights at wt + h * E
  transpose_ref(wt.data(), w, E, H);
  for (int64_t h = 0; h < H; ++h)
    spmm_forward_ref<T>(y + h * Fh, nullptr, x + h * Fh, wt.data() + h * E, g, Fh, H * Fh, H * Fh, op);
}
// (with base: dx = base + the gradient, as spmm_backward_x's base; the CPU kernel's, not CUDA's)
template <class T>
void spmm_heads_backward_x_ref(T* dx, const T* dy, const T* w, const CsrView& g, int64_t H, int64_t Fh, Reduce op,
                               const T* base = nullptr) {
  const int64_t E = g.num_edges;
  std::vector<T> wt(size_t(E * H));
  transpose_ref(wt.data(), w, E, H);
  for (int64_t h = 0; h < H; ++h)
    spmm_backward_x_ref<T>(dx + h * Fh, dy + h * Fh, nullptr, wt.data() + h * E, g, Fh, H * Fh, H * Fh, op,
                           base ? base + h * Fh : nullptr);
}
template <class T>
void spmm_heads_backward_w_ref(T* dw, const T* dy, const T* x, const CsrView& g, int64_t H, int64_t Fh, Reduce op) {
  const int64_t E = g.num_edges;
  std::vector<T> dwt(size_t(E * H));  // [H, E], then turned
  for (int64_t h = 0; h < H; ++h)
    spmm_backward_w_ref<T>(dwt.data() + h * E, dy + h * Fh, x + h * Fh, nullptr, g, Fh, H * Fh, H * Fh, op);
  transpose_ref(dw, dwt.data(), H, E);
}
void spmm_heads_forward_cpu(float* y, const float* x, const float* w, const CsrView& g, int64_t H, int64_t Fh,
                            Reduce op);
void spmm_heads_backward_x_cpu(float* dx, const float* dy, const float* w, const CsrView& g, int64_t H, int64_t Fh,
                               Reduce op, const float* base = nullptr);
void spmm_heads_backward_w_cpu(float* dw, const float* dy, const float* x, const CsrView& g, int64_t H, int64_t Fh,
                               Reduce op);
void spmm_heads_forward_cuda(float* y, const float* x, const float* w, const CsrView& g, int64_t H, int64_t Fh,
                             Reduce op, Stream stream);
void spmm_heads_backward_x_cuda(float* dx, const float* dy, const float* w, const CsrView& g, int64_t H, int64_t Fh,
                                Reduce op, Stream stream);
void spmm_heads_backward_w_cuda(float* dw, const float* dy, const float* x, const CsrView& g, int64_t H, int64_t Fh,
                                Reduce op, Stream stream);

}  // namespace gnn
