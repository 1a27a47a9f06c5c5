// A GraphSAGE layer with mean aggregation, as one product:
//   h = [mean_{j -> i} x_j | x_i]   [N, 2F]
//   z = h W + b                     W [2F, O] (rows 0..F-1 act on the aggregate, F..2F-1 on the root), b [O] or null
//   y = act(z)                      y, z [N, O]
// Backward, from dy:
//   dz = dy * act'(z);  dW = h^T dz;  db = sum_i dz_i;  dh = dz W^T = [d_agg | d_root]
//   dx = d_root + the transposed mean-gather of d_agg   (CSC, no atomics)
// The CPU version builds h one row block at a time and multiplies it at once (one GEMM with K = 2F per
// block, bias and activation applied while the block is in cache). For training it also keeps h, so
// the backward is whole-matrix products: dW = h^T dz (one GEMM, K split over the nodes) and
// dh = dz W^T as two GEMMs (the root half written straight into dx, the aggregate half into scratch),
// then the transposed gather of the aggregate half added into dx. db sums per fixed chunk of rows and then in order:
// bitwise identical for any thread count.
#pragma once
#include <vector>

#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/spmm.h"

namespace gnn {

template <class T>
void sage_forward_ref(T* y, T* z, const T* x, const CsrView& g, const T* W, const T* b, int64_t F, int64_t O, Act act,
                      T slope) {
  const int64_t N = g.num_rows;
  std::vector<T> h(size_t(N * 2 * F));
  spmm_forward_ref<T>(h.data(), nullptr, x, nullptr, g, F, F, 2 * F, Reduce::kMean);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t f = 0; f < F; ++f) h[size_t(i * 2 * F + F + f)] = x[i * F + f];
  gemm_ref<T>(false, false, N, O, 2 * F, T(1), h.data(), 2 * F, W, O, T(0), z, O);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < O; ++o) {
      if (b) z[i * O + o] += b[o];
      y[i * O + o] = act_value(act, z[i * O + o], slope);
    }
}

template <class T>
void sage_backward_ref(T* dx, T* dW, T* db, const T* dy, const T* z, const T* x, const CsrView& g, const T* W,
                       int64_t F, int64_t O, Act act, T slope) {
  const int64_t N = g.num_rows;
  std::vector<T> h(size_t(N * 2 * F)), dz(size_t(N * O)), dh(size_t(N * 2 * F)), dagg(size_t(N * F));
  spmm_forward_ref<T>(h.data(), nullptr, x, nullptr, g, F, F, 2 * F, Reduce::kMean);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t f = 0; f < F; ++f) h[size_t(i * 2 * F + F + f)] = x[i * F + f];
  for (int64_t i = 0; i < N * O; ++i) dz[size_t(i)] = dy[i] * act_derivative(act, z[i], slope);
  gemm_ref<T>(true, false, 2 * F, O, N, T(1), h.data(), 2 * F, dz.data(), O, T(0), dW, O);
  if (db)
    for (int64_t o = 0; o < O; ++o) {
      db[o] = 0;
      for (int64_t i = 0; i < N; ++i) db[o] += dz[size_t(i * O + o)];
    }
  gemm_ref<T>(false, true, N, 2 * F, O, T(1), dz.data(), O, W, O, T(0), dh.data(), 2 * F);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t f = 0; f < F; ++f) dagg[size_t(i * F + f)] = dh[size_t(i * 2 * F + f)];
  spmm_backward_x_ref<T>(dx, dagg.data(), nullptr, nullptr, g, F, F, F, Reduce::kMean);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t f = 0; f < F; ++f) dx[i * F + f] += dh[size_t(i * 2 * F + F + f)];
}

// x [N, F], y and z [N, O], h [N, 2F], contiguous. z and h are what the backward needs; pass null
// for both when no backward will follow (inference).
void sage_forward_cpu(float* y, float* z, float* h, const float* x, const CsrView& g, const float* W, const float* b,
                      int64_t F, int64_t O, Act act, float slope);
// db may be null (no bias). z and h come from the forward. workspace: sage_backward_workspace(N, F, O)
// floats from the caller (a buffer reused across steps: fresh pages would be faulted in every call).
int64_t sage_backward_workspace(int64_t N, int64_t F, int64_t O);
void sage_backward_cpu(float* dx, float* dW, float* db, const float* dy, const float* z, const float* h,
                       const CsrView& g, const float* W, int64_t F, int64_t O, Act act, float slope, float* workspace);

// The same on the GPU (kernels/sage.cu), every pointer on the device, work on `stream`, the GEMMs
// through `blas` (runtime's cuBLAS handle for the device). Training passes
// z and h (kept for the backward); inference passes neither and `scratch` of N * 2F floats for h.
// The backward's workspace: sage_backward_workspace_cuda(N, F, O) floats.
void sage_forward_cuda(float* y, float* z, float* h, float* scratch, const float* x, const CsrView& g, const float* W,
                       const float* b, int64_t F, int64_t O, Act act, float slope, const BlasHandle& blas,
                       Stream stream);
int64_t sage_backward_workspace_cuda(int64_t N, int64_t F, int64_t O);
void sage_backward_cuda(float* dx, float* dW, float* db, const float* dy, const float* z, const float* h,
                        const CsrView& g, const float* W, int64_t F, int64_t O, Act act, float slope, float* workspace,
                        const BlasHandle& blas, Stream stream);

// A SAGE layer that narrows (O outputs from F > O inputs), its product first: with q = x [W_agg | W_root]
// computed per (node, config), q [S, C, 2O] (S source rows, C configs side by side in each row), then
//   y[v, c, :] = mean_{p in row v} q[src p, c, 0:O] + q[v, c, O:2O] + b          (y [N, C*O], b [O] or null)
// the mean 0 for a row without edges, formed as the edges' sum in CSR order times 1 / deg(v), then the root
// and the bias added in that order. It is [mean x | x] W + b reassociated: the product reads x (K = F) rather
// than [mean x | x] (K = 2F), the gather moves O values a neighbour rather than F, and [mean x] is never
// written. The graph must be square (N = S: the root term is the row's own). Backward, no atomics:
//   dq[u, c, 0:O] = sum over u's CSC entries (in CSC order) of (1 / deg(v)) dy[v, c, :];  dq[u, c, O:2O] = dy[u, c, :]
// (db is the column sums of dy, left to the caller). The CPU versions give the reference's bits in float,
// for any thread count (each output value has one owner and one order); so does CUDA's.
template <class T>
void sage_combine_forward_ref(T* y, const T* q, const T* b, const CsrView& g, int64_t C, int64_t O) {
  const int64_t W = C * O;
  for (int64_t v = 0; v < g.num_rows; ++v) {
    const int32_t e0 = g.indptr[v], e1 = g.indptr[v + 1];
    for (int64_t j = 0; j < W; ++j) {
      const int64_t c = j / O, o = j % O;
      T acc = T(0);
      for (int32_t p = e0; p < e1; ++p) acc += q[int64_t(g.indices[p]) * 2 * W + c * 2 * O + o];
      const T mean = e1 > e0 ? acc * (T(1) / T(e1 - e0)) : T(0);
      const T z = mean + q[v * 2 * W + c * 2 * O + O + o];
      y[v * W + j] = b ? z + b[o] : z;
    }
  }
}

template <class T>
void sage_combine_backward_ref(T* dq, const T* dy, const CsrView& g, int64_t C, int64_t O) {
  const int64_t W = C * O;
  for (int64_t u = 0; u < g.num_cols; ++u)
    for (int64_t j = 0; j < W; ++j) {
      const int64_t c = j / O, o = j % O;
      T acc = T(0);
      for (int32_t k = g.csc_indptr[u]; k < g.csc_indptr[u + 1]; ++k) {
        const int32_t v = g.csc_indices[k];
        acc += T(1) / T(g.indptr[v + 1] - g.indptr[v]) * dy[int64_t(v) * W + j];
      }
      dq[u * 2 * W + c * 2 * O + o] = acc;
      dq[u * 2 * W + c * 2 * O + O + o] = dy[u * W + j];
    }
}

void sage_combine_forward_cpu(float* y, const float* q, const float* b, const CsrView& g, int64_t C, int64_t O);
void sage_combine_backward_cpu(float* dq, const float* dy, const CsrView& g, int64_t C, int64_t O);
// One thread per output value (forward: per (v, c, o); backward: per (u, c, o), both halves of dq).
void sage_combine_forward_cuda(float* y, const float* q, const float* b, const CsrView& g, int64_t C, int64_t O,
                               Stream stream);
void sage_combine_backward_cuda(float* dq, const float* dy, const CsrView& g, int64_t C, int64_t O, Stream stream);

}  // namespace gnn
