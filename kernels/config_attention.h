// Cross-config attention, fused (the 1st place layout model's CrossConfigAttention, TPUGRAPHS.md
// section 6): over x [R, C, D] (row r's C configs next to each other, D channels each),
//   w[r, c, d] = softmax over c of (beta x[r, c, d]);   y[r, c, :] = [x[r, c, :] | x[r, c, :] w[r, c, :]]
// so y is [R, C, 2D], in one pass instead of a scale, a segment softmax, a product and a concatenation
// (four passes over [R*C, D] and one over [R*C, 2D]). The softmax is computed as segment_softmax's: the
// maximum first, exp(s - max) summed over c in order, then multiplied by 1 / sum, so y has its bits.
// Backward, with g = the second half of dy and a = g x:
//   dx = (first half of dy) + g w + beta w (a - sum_c a w)
//   dbeta = sum over r, c, d of a w (x - sum_c w x)
// w [R, C, D] is kept by the forward for the backward. dbeta is summed per row, then over rows in
// fixed chunks, in double: the same bits for any thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/math_fn.h"

namespace gnn {

// One row: y [C, 2D], w [C, D] from x [C, D].
template <class T>
inline void config_attention_row(T* y, T* w, const T* x, int64_t C, int64_t D, T beta, T* m, T* sum) {
  for (int64_t d = 0; d < D; ++d) m[d] = x[d] * beta, sum[d] = T(0);
  for (int64_t c = 1; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) m[d] = std::max(m[d], x[c * D + d] * beta);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T v = math_exp(x[c * D + d] * beta - m[d]);
      w[c * D + d] = v;
      sum[d] += v;
    }
  for (int64_t d = 0; d < D; ++d) sum[d] = T(1) / sum[d];
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T xv = x[c * D + d], wv = w[c * D + d] * sum[d];
      w[c * D + d] = wv;
      y[c * 2 * D + d] = xv;
      y[c * 2 * D + D + d] = xv * wv;
    }
}

// One row's backward: dx [C, D]; returns the row's part of dbeta. aw, wx: D scratch values each.
template <class T>
inline double config_attention_row_backward(T* dx, const T* dy, const T* x, const T* w, int64_t C, int64_t D, T beta,
                                            T* aw, T* wx) {
  for (int64_t d = 0; d < D; ++d) aw[d] = T(0), wx[d] = T(0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T xv = x[c * D + d], wv = w[c * D + d];
      aw[d] += dy[c * 2 * D + D + d] * xv * wv;
      wx[d] += wv * xv;
    }
  double dbeta = 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T xv = x[c * D + d], wv = w[c * D + d], g = dy[c * 2 * D + D + d], a = g * xv;
      dx[c * D + d] = dy[c * 2 * D + d] + g * wv + beta * wv * (a - aw[d]);
      dbeta += double(a * wv * (xv - wx[d]));
    }
  return dbeta;
}

template <class T>
void config_attention_forward_ref(T* y, T* w, const T* x, int64_t R, int64_t C, int64_t D, T beta) {
  std::vector<T> m(static_cast<size_t>(D)), sum(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r)
    config_attention_row(y + r * C * 2 * D, w + r * C * D, x + r * C * D, C, D, beta, m.data(), sum.data());
}

template <class T>
T config_attention_backward_ref(T* dx, const T* dy, const T* x, const T* w, int64_t R, int64_t C, int64_t D, T beta) {
  std::vector<T> aw(static_cast<size_t>(D)), wx(static_cast<size_t>(D));
  double dbeta = 0;
  for (int64_t r = 0; r < R; ++r)
    dbeta += config_attention_row_backward(dx + r * C * D, dy + r * C * 2 * D, x + r * C * D, w + r * C * D, C, D, beta,
                                           aw.data(), wx.data());
  return T(dbeta);
}

// The same over all threads (rows in fixed chunks; dbeta summed over the chunks in order).
void config_attention_forward_cpu(float* y, float* w, const float* x, int64_t R, int64_t C, int64_t D, float beta);
float config_attention_backward_cpu(float* dx, const float* dy, const float* x, const float* w, int64_t R, int64_t C,
                                    int64_t D, float beta);

}  // namespace gnn
