// The many-tensor passes of kernels/optim.h on the host: chunks spread over the OpenMP threads, each
// element computed by the same function as the reference.
#include "kernels/optim.h"

namespace gnn {
namespace {

// fn(entry, begin, end) for every chunk. A chunk is 8192 elements, so small lists stay on one thread.
template <class E, class Fn>
void for_each_chunk(const E* list, int64_t count, int64_t chunks, Fn fn) {
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const E& e = list[chunk_owner(list, count, c)];
    int64_t begin = 0, end = 0;
    chunk_range(e, c, begin, end);
    fn(e, c, begin, end);
  }
}

}  // namespace

template <class T>
void adam_multi_cpu(const AdamTensor<T>* list, int64_t count, int64_t chunks) {
  for_each_chunk(list, count, chunks, [](const AdamTensor<T>& e, int64_t, int64_t b, int64_t end) {
    adam_update_ref(e.w + b, e.g + b, e.m + b, e.v + b, end - b, e.s);
  });
}

template <class T>
void sgd_multi_cpu(const SgdTensor<T>* list, int64_t count, int64_t chunks) {
  for_each_chunk(list, count, chunks, [](const SgdTensor<T>& e, int64_t, int64_t b, int64_t end) {
    sgd_update_ref(e.w + b, e.g + b, e.buf ? e.buf + b : nullptr, end - b, e.s);
  });
}

template <class T>
void sum_squares_multi_cpu(double* partial, const SumSquaresTensor<T>* list, int64_t count, int64_t chunks) {
  for_each_chunk(list, count, chunks, [partial](const SumSquaresTensor<T>& e, int64_t c, int64_t b, int64_t end) {
    double acc = 0;
    for (int64_t i = b; i < end; ++i) acc += double(e.x[i]) * double(e.x[i]);
    partial[c] = acc;
  });
}

template <class T>
void scale_multi_cpu(const ScaleTensor<T>* list, int64_t count, int64_t chunks, double s) {
  for_each_chunk(list, count, chunks, [s](const ScaleTensor<T>& e, int64_t, int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) e.y[i] = T(double(e.x[i]) * s);
  });
}

#define GNN_INSTANTIATE(T)                                                                       \
  template void adam_multi_cpu<T>(const AdamTensor<T>*, int64_t, int64_t);                       \
  template void sgd_multi_cpu<T>(const SgdTensor<T>*, int64_t, int64_t);                         \
  template void sum_squares_multi_cpu<T>(double*, const SumSquaresTensor<T>*, int64_t, int64_t); \
  template void scale_multi_cpu<T>(const ScaleTensor<T>*, int64_t, int64_t, double);
GNN_INSTANTIATE(float)
GNN_INSTANTIATE(double)
#undef GNN_INSTANTIATE

}  // namespace gnn
