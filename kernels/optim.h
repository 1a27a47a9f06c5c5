// The optimiser updates, per element, shared by the host and the GPU, and the passes over many tensors
// at once that nn/optim.cpp runs them through.
// One Adam / AdamW update of n parameters, with the moments kept in double:
//   g' = g + wd w (Adam, L2 in the gradient)   or   w' = w (1 - lr wd) (AdamW, decoupled)
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;  w = w' - lr (m / c1) / (sqrt(v / c2) + eps)
// with c1 = 1 - b1^t and c2 = 1 - b2^t for the parameter's step t.
#pragma once
#include <cmath>

#include "base/common.h"

namespace gnn {

struct AdamStep {
  double lr, b1, b2, eps, weight_decay, c1, c2;
  bool decoupled;
};

// One element, host or device: returns the new weight and updates its moments in place.
GNN_HD inline double adam_element(double wi, double gi, double& m, double& v, const AdamStep& s) {
  if (s.decoupled) wi *= 1 - s.lr * s.weight_decay;
  else gi += s.weight_decay * wi;
  m = s.b1 * m + (1 - s.b1) * gi;
  v = s.b2 * v + (1 - s.b2) * gi * gi;
  return wi - s.lr * (m / s.c1) / (std::sqrt(v / s.c2) + s.eps);
}

template <class T>
void adam_update_ref(T* w, const T* grad, double* m, double* v, int64_t n, const AdamStep& s) {
  for (int64_t i = 0; i < n; ++i) w[i] = T(adam_element(double(w[i]), double(grad[i]), m[i], v[i], s));
}

// One SGD update (torch.optim.SGD, dampening 0): d = g + wd w; with momentum, buf = first ? d : mu buf + d
// and d = buf (buf in double, null without momentum); w -= lr d.
struct SgdStep {
  double lr, momentum, weight_decay;
  bool first;
};

GNN_HD inline double sgd_element(double wi, double gi, double* buf, const SgdStep& s) {
  double d = gi + s.weight_decay * wi;
  if (buf) d = *buf = s.first ? d : s.momentum * *buf + d;
  return wi - s.lr * d;
}

template <class T>
void sgd_update_ref(T* w, const T* grad, double* buf, int64_t n, const SgdStep& s) {
  for (int64_t i = 0; i < n; ++i) w[i] = T(sgd_element(double(w[i]), double(grad[i]), buf ? buf + i : nullptr, s));
}

// ---- Many tensors in one pass --------------------------------------------------------------------------
// A model has tens of parameters, most of them small (a bias is 128 floats): one launch per parameter
// makes an optimiser step, the gradient norm and its clipping launch-bound on a GPU. So each pass takes
// a list of per-tensor entries, every entry knowing its element count n and the index of its first chunk
// of kMultiChunk elements; one CUDA block (one host task) does one chunk, and the whole list is one
// launch. The list lives in device memory for the _cuda versions (nn/optim.cpp uploads it, queued).
// Every element is computed as by the per-element functions above, so the results do not depend on the
// chunking; the sums of squares are per chunk, in a fixed order within it, so two runs agree bitwise.
inline constexpr int64_t kMultiChunk = 8192;

template <class T>
struct AdamTensor {
  T* w;
  const T* g;
  double *m, *v;
  int64_t n, first_chunk;
  AdamStep s;
};

template <class T>
struct SgdTensor {
  T* w;
  const T* g;
  double* buf;  // null without momentum
  int64_t n, first_chunk;
  SgdStep s;
};

template <class T>
struct SumSquaresTensor {  // partial[c] = sum of double(x)^2 over chunk c
  const T* x;
  int64_t n, first_chunk;
};

template <class T>
struct ScaleTensor {  // y = T(double(x) * s), y may be x
  T* y;
  const T* x;
  int64_t n, first_chunk;
};

// Numbers the chunks of the entries in order (sets each first_chunk); returns the chunk count.
template <class E>
int64_t plan_chunks(E* list, int64_t count) {
  int64_t c = 0;
  for (int64_t k = 0; k < count; ++k) {
    list[k].first_chunk = c;
    c += ceil_div<int64_t>(list[k].n, kMultiChunk);
  }
  return c;
}

// The entry that chunk c belongs to: the last with first_chunk <= c (an empty entry owns no chunk: the
// entry after it starts at the same chunk and is found instead).
template <class E>
GNN_HD inline int64_t chunk_owner(const E* list, int64_t count, int64_t c) {
  int64_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (list[mid].first_chunk <= c) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Elements [begin, end) of entry e that chunk c covers.
template <class E>
GNN_HD inline void chunk_range(const E& e, int64_t c, int64_t& begin, int64_t& end) {
  begin = (c - e.first_chunk) * kMultiChunk;
  end = begin + kMultiChunk < e.n ? begin + kMultiChunk : e.n;
}

// Host versions: the list in host memory, the chunks spread over the OpenMP threads (optim_cpu.cpp).
template <class T>
void adam_multi_cpu(const AdamTensor<T>* list, int64_t count, int64_t chunks);
template <class T>
void sgd_multi_cpu(const SgdTensor<T>* list, int64_t count, int64_t chunks);
template <class T>
void sum_squares_multi_cpu(double* partial, const SumSquaresTensor<T>* list, int64_t count, int64_t chunks);
template <class T>
void scale_multi_cpu(const ScaleTensor<T>* list, int64_t count, int64_t chunks, double s);

// CUDA versions (optim.cu): the list in device memory, one launch of `chunks` blocks.
void adam_multi_cuda(const AdamTensor<float>* list, int64_t count, int64_t chunks, Stream stream);
void sgd_multi_cuda(const SgdTensor<float>* list, int64_t count, int64_t chunks, Stream stream);
void sum_squares_multi_cuda(double* partial, const SumSquaresTensor<float>* list, int64_t count, int64_t chunks,
                            Stream stream);
void scale_multi_cuda(const ScaleTensor<float>* list, int64_t count, int64_t chunks, double s, Stream stream);

}  // namespace gnn
