// Elementwise arithmetic on n values, the glue between the graph kernels: y = a*x + b*y, products,
// broadcasts of a row vector over rows, column sums, sums; and the CUDA side of the autograd ops'
// column plumbing. The host versions are templates, so the autograd ops run them in float (the fast
// path) and in double (gradient checks): each is its own reference. add_to_cpu is add_to in float with
// its loop in each ISA's clone (kernels/elementwise_cpu.cpp), for the hot caller.
// Memory-bound: one pass, OpenMP above 64k values. Column sums add per fixed chunk of rows, then
// chunks in order: bitwise stable for any thread count. CUDA versions: kernels/elementwise.cu.
#pragma once
#include <algorithm>
#include <vector>

#include "base/common.h"

namespace gnn {

inline constexpr int64_t kElementwiseGrain = 1 << 16;

template <class T>
void axpby(T* y, T a, const T* x, T b, int64_t n) {  // y = a x + b y  (b == 0: y is not read)
#pragma omp parallel for simd if (n > kElementwiseGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = b == T(0) ? a * x[i] : a * x[i] + b * y[i];
}

template <class T>
void add_to(T* y, const T* a, const T* b, int64_t n, T sb = T(1)) {  // y = a + sb b
#pragma omp parallel for simd if (n > kElementwiseGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + sb * b[i];
}

// add_to in float, each thread's part compiled for AVX2 / AVX-512 (the template runs as baseline code
// wherever it is instantiated): the same bits.
void add_to_cpu(float* y, const float* a, const float* b, int64_t n, float sb = 1.0f);
// y += b in place: add_to_cpu(y, y, b, n)'s bits, without aliasing its restrict arguments.
void add_into_cpu(float* y, const float* b, int64_t n);

template <class T>
void mul_to(T* y, const T* a, const T* b, int64_t n) {  // y = a * b
#pragma omp parallel for simd if (n > kElementwiseGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

template <class T>
void add_row(T* y, const T* x, const T* row, int64_t R, int64_t F) {  // y[r, f] = x[r, f] + row[f]
#pragma omp parallel for if (R * F > kElementwiseGrain)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) y[r * F + f] = x[r * F + f] + row[f];
}

// Column sums of [R, F] in a fixed order: rows in chunks of kColumnChunk, each chunk's sum from 0 in row
// order, then the chunks' sums in order (the bits do not depend on the thread count). rows(r0, r1, part)
// adds rows [r0, r1) into part (F values, zero) in row order; it may produce them first (a backward whose
// bias gradient is the column sums of what it writes, summed while the rows are in cache).
inline constexpr int64_t kColumnChunk = 256;
template <class T, class Rows>
void column_sum_of(T* out, int64_t R, int64_t F, bool accumulate, Rows&& rows) {
  const int64_t chunks = ceil_div<int64_t>(R, kColumnChunk);
  std::vector<T> part(size_t(chunks * F), T(0));
#pragma omp parallel for if (R * F > kElementwiseGrain)
  for (int64_t c = 0; c < chunks; ++c) rows(c * kColumnChunk, std::min(R, (c + 1) * kColumnChunk), part.data() + c * F);
  for (int64_t f = 0; f < F; ++f) {
    T acc = accumulate ? out[f] : T(0);
    for (int64_t c = 0; c < chunks; ++c) acc += part[size_t(c * F + f)];
    out[f] = acc;
  }
}
template <class T>
void column_sum(T* out, const T* x, int64_t R, int64_t F, bool accumulate = false) {  // out[f] (+)= sum_r x[r, f]
  column_sum_of(out, R, F, accumulate, [&](int64_t r0, int64_t r1, T* part) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t f = 0; f < F; ++f) part[f] += x[r * F + f];
  });
}
// The same in float with each chunk's rows summed in an AVX2 / AVX-512 clone (column_rows_cpu: part[f] +=
// x[r, f] over R rows in order), the template's bits; the template, inlined into its callers, ran as SSE.
void column_rows_cpu(float* part, const float* x, int64_t R, int64_t F);
void column_sum_cpu(float* out, const float* x, int64_t R, int64_t F, bool accumulate = false);

// CUDA versions, f32 on `stream`: y = a + sb b, y = a * b, y[r, f] = x[r, f] + row[f], and
// out[f] (+)= sum_r x[r, f] (8 warps per 32 columns and row slice, each summing a fixed stride of rows,
// the partials combined in warp order, then in slice order: the same bits on every run).
void add_cuda(float* y, const float* a, const float* b, int64_t n, float sb, Stream stream);
void mul_cuda(float* y, const float* a, const float* b, int64_t n, Stream stream);
void add_row_cuda(float* y, const float* x, const float* row, int64_t R, int64_t F, Stream stream);
// column_sum_cuda spreads the rows over up to 256 slices (at least 64 rows each, fixed by R alone) so a
// tall, narrow x (a bias gradient over N*C rows and 32 columns) uses the whole GPU, then sums the slices'
// partials in order: two launches, with workspace of column_sum_workspace_cuda(R, F) floats (0: one
// launch, no workspace needed).
int64_t column_sum_workspace_cuda(int64_t R, int64_t F);
void column_sum_cuda(float* out, const float* x, int64_t R, int64_t F, bool accumulate, float* workspace,
                     Stream stream);
void transpose_cuda(float* y, const float* x, int64_t R, int64_t C, Stream stream);  // x [R, C] -> y [C, R]
// The same on the host, any element type, serial (y must not overlap x): per-head edge weights [E, H] <->
// H columns of E.
template <class T>
void transpose_ref(T* y, const T* x, int64_t R, int64_t C) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) y[c * R + r] = x[r * C + c];
}
// The column plumbing of the autograd ops (autograd/op_columns.cpp, op_configs.cpp), f32 on `stream`:
//   scale:          y = s x, times *by when given (one value on the device, read there: no sync)
//   copy_block:     dst[r*wd + od + j] = src[r*ws + os + j], r < R, j < w (one cudaMemcpy2DAsync)
//   block_sum:      y[r, j] = s * sum_{k < K} x[r*ld + k*stride + j], j < w; y [R, w], k in order
//   head_broadcast: y[r, h*F + f] = s * x[r, f]; y [R, H*F]
//   head_dot:       y[r, h] = sum_d x[r, h*D + d] a[h, d] (d in order)
//   head_dot_bwd:   dx[r, h*D + d] = dy[r, h] a[h, d];  prod[r, h*D + d] = dy[r, h] x[r, h*D + d]  (either null)
//   mask_rows:      dx[r, :] = keep[r] ? dy[r, :] : 0 over rows of W values
//   join_configs:   y[n, k*(A+B) + j] = x[n, j] for j < A, c[n, k*B + j - A] otherwise; y [N, C*(A+B)]
//                   (one launch for what is C+1 strided copies)
//   sum:            out[0] = sum of x's n values (one block, a fixed order: the same bits every run)
void scale_cuda(float* y, const float* x, float s, int64_t n, Stream stream, const float* by = nullptr);
void copy_block_cuda(float* dst, int64_t wd, int64_t od, const float* src, int64_t ws, int64_t os, int64_t R, int64_t w,
                     Stream stream);
void block_sum_cuda(float* y, const float* x, int64_t R, int64_t w, int64_t K, int64_t ld, int64_t stride, float s,
                    Stream stream);
void head_broadcast_cuda(float* y, const float* x, int64_t R, int64_t H, int64_t F, float s, Stream stream);
void head_dot_cuda(float* y, const float* x, const float* a, int64_t R, int64_t H, int64_t D, Stream stream);
void head_dot_backward_cuda(float* dx, float* prod, const float* dy, const float* x, const float* a, int64_t R,
                            int64_t H, int64_t D, Stream stream);
void mask_rows_cuda(float* dx, const float* dy, const uint8_t* keep, int64_t R, int64_t W, Stream stream);
void join_configs_cuda(float* y, const float* x, const float* c, int64_t N, int64_t A, int64_t B, int64_t C,
                       Stream stream);
void sum_cuda(float* out, const float* x, int64_t n, Stream stream);

template <class T>
T sum_all(const T* x, int64_t n) {  // in fixed chunks, then in order: bitwise stable
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = ceil_div<int64_t>(n, kChunk);
  std::vector<double> part(size_t(chunks), 0.0);
#pragma omp parallel for if (n > kElementwiseGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    double acc = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) acc += double(x[i]);
    part[size_t(c)] = acc;
  }
  double acc = 0;
  for (double p : part) acc += p;
  return T(acc);
}

}  // namespace gnn
