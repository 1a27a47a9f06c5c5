// Readout per graph of a disjoint union: graph g owns node rows graph_ptr[g] .. graph_ptr[g+1]-1.
//   sum / mean / max over those rows, per feature; max keeps argmax (the node row, the first of equal ones,
//   the first NaN's where a row is NaN as torch's amax: max_takes; -1 and y = 0 for a graph with no
//   nodes). x [N, F], y [G, F].
//   log-sum-exp (below) per feature too.
// Backward: each node row belongs to one graph, so dx is a broadcast (sum, mean), a scatter to the
// argmax row (max) or dy times the row's softmax weight (log-sum-exp): no sums across threads. With a
// base (x's gradient so far, [N, F]; may be dx itself) sum, mean and max write dx = base + that, in one
// pass: autograd's accumulate's bits without dx's own buffer.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/math_fn.h"
#include "kernels/spmm.h"

namespace gnn {

template <class T>
void pool_forward_ref(T* y, int32_t* argmax, const T* x, const int64_t* graph_ptr, int64_t G, int64_t F, Reduce op) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t f = 0; f < F; ++f) {
      T acc = op == Reduce::kMax ? -std::numeric_limits<T>::infinity() : T(0);
      int32_t arg = -1;
      for (int64_t i = graph_ptr[g]; i < graph_ptr[g + 1]; ++i) {
        if (op != Reduce::kMax) acc += x[i * F + f];
        else if (arg < 0 || max_takes(x[i * F + f], acc)) acc = x[i * F + f], arg = int32_t(i);
      }
      const int64_t n = graph_ptr[g + 1] - graph_ptr[g];
      if (op == Reduce::kMean && n > 0) acc /= T(n);
      if (op == Reduce::kMax) {
        if (arg < 0) acc = T(0);
        argmax[g * F + f] = arg;
      }
      y[g * F + f] = acc;
    }
}

template <class T>
void pool_backward_ref(T* dx, const T* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t G, int64_t F,
                       Reduce op, const T* base = nullptr) {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t n = graph_ptr[g + 1] - graph_ptr[g];
    for (int64_t i = graph_ptr[g]; i < graph_ptr[g + 1]; ++i)
      for (int64_t f = 0; f < F; ++f) {
        const T v = op == Reduce::kMax    ? (argmax[g * F + f] == i ? dy[g * F + f] : T(0))
                    : op == Reduce::kMean ? dy[g * F + f] / T(n)
                                          : dy[g * F + f];
        dx[i * F + f] = base ? base[i * F + f] + v : v;
      }
  }
}

// Mean and max readouts summed, y = mean_g(x) + max_g(x) (the 6th place's SAGE readout), from one pass over
// x where the two pools and an add read it twice: the bits of pool(mean), pool(max) (argmax kept) and
// add. Backward: dx = base + dy / n (the mean's part), then + (the argmax row ? dy : 0) (the max's): the
// bits of the two pools' backwards, the mean's run first (as when the max pool is recorded first), in one
// pass where they wrote x's gradient twice. (The reference's mean divides, as pool_forward_ref; the CPU
// kernels multiply by 1 / n, as pool_forward_cpu: each is its own path's composition.)
template <class T>
void pool_mean_max_forward_ref(T* y, int32_t* argmax, const T* x, const int64_t* graph_ptr, int64_t G, int64_t F) {
  std::vector<T> mean(size_t(G * F));
  pool_forward_ref(mean.data(), nullptr, x, graph_ptr, G, F, Reduce::kMean);
  pool_forward_ref(y, argmax, x, graph_ptr, G, F, Reduce::kMax);
  for (int64_t i = 0; i < G * F; ++i) y[i] = mean[size_t(i)] + y[i];
}
template <class T>
void pool_mean_max_backward_ref(T* dx, const T* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t G,
                                int64_t F, const T* base = nullptr) {
  pool_backward_ref(dx, dy, argmax, graph_ptr, G, F, Reduce::kMean, base);
  pool_backward_ref(dx, dy, argmax, graph_ptr, G, F, Reduce::kMax, dx);
}
void pool_mean_max_forward_cpu(float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t G,
                               int64_t F);
void pool_mean_max_backward_cpu(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t G,
                                int64_t F, const float* base = nullptr);

// Log-sum-exp readout: y[g, f] = log sum_i exp(x[i, f]) over graph g's rows, computed as
// m + log sum_i exp(x[i, f] - m) with m the rows' max (0 for a graph with no rows; m itself when m is
// infinite, as torch.logsumexp: -inf for a column of -inf, +inf when a row is +inf; NaN when a row is NaN,
// whatever the others). The sum is in double: in float, a million rows lost 4e-3 of it. A runtime that is a
// sum of positive per-node costs, each predicted as a log cost x[i], is y in log space.
// Backward: dx[i, f] = dy[g, f] exp(x[i, f] - y[g, f]), the softmax of the graph's rows.
// The running max of log-sum-exp, max_takes' rule: a NaN, once met, stays (std::max would pass over it).
template <class T>
GNN_HD inline T lse_max(T m, T v) {
  return max_takes(v, m) ? v : m;
}

template <class T>
void pool_logsumexp_forward_ref(T* y, const T* x, const int64_t* graph_ptr, int64_t G, int64_t F) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t f = 0; f < F; ++f) {
      const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
      T m = -std::numeric_limits<T>::infinity();
      double s = 0;
      for (int64_t i = b; i < e; ++i) m = lse_max(m, x[i * F + f]);
      for (int64_t i = b; i < e; ++i) s += double(math_exp(x[i * F + f] - m));
      y[g * F + f] = e == b ? T(0) : std::isinf(m) ? m : m + math_log(T(s));
    }
}

template <class T>
void pool_logsumexp_backward_ref(T* dx, const T* dy, const T* x, const T* y, const int64_t* graph_ptr, int64_t G,
                                 int64_t F) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = graph_ptr[g]; i < graph_ptr[g + 1]; ++i)
      for (int64_t f = 0; f < F; ++f) dx[i * F + f] = dy[g * F + f] * math_exp(x[i * F + f] - y[g * F + f]);
}

void pool_forward_cpu(float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F,
                      Reduce op);
void pool_backward_cpu(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t G,
                       int64_t F, Reduce op, const float* base = nullptr);
// CUDA: a block of 8 warps per (graph, 32 features) strides over the graph's rows and combines the
// warps' partial results in warp order (the same bits every run); the backward is one thread per
// element, finding its graph by binary search in graph_ptr.
void pool_forward_cuda(float* y, int32_t* argmax, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F,
                       Reduce op, Stream stream);
void pool_backward_cuda(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t N,
                        int64_t G, int64_t F, Reduce op, const float* base, Stream stream);
void pool_logsumexp_forward_cpu(float* y, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F);
void pool_logsumexp_backward_cpu(float* dx, const float* dy, const float* x, const float* y, const int64_t* graph_ptr,
                                 int64_t G, int64_t F);
// CUDA: as the other readouts, a block of 8 warps per (graph, 32 features): the warps' maxima, then the
// warps' sums of exp(x - max), each combined in warp order.
void pool_logsumexp_forward_cuda(float* y, const float* x, const int64_t* graph_ptr, int64_t G, int64_t F,
                                 Stream stream);
void pool_logsumexp_backward_cuda(float* dx, const float* dy, const float* x, const float* y, const int64_t* graph_ptr,
                                  int64_t N, int64_t G, int64_t F, Stream stream);

}  // namespace gnn
