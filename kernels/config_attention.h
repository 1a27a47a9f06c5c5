// Cross-config attention, fused (the 1st place layout model's CrossConfigAttention, TPUGRAPHS.md
// section 6), with the block's residual and activation after it: over x [R, C, D] (row r's C configs
// next to each other, D channels each),
//   w[r, c, d] = softmax over c of (beta x[r, c, d]);   z[r, c, :] = [x[r, c, :] | x[r, c, :] w[r, c, :]]
//   y = act(z + res)   (res [R, C, 2D] optional; act kNone leaves z + res)
// so y is [R, C, 2D], in one pass instead of a scale, a segment softmax, a product, a concatenation, an
// addition and an activation (six passes). The softmax is computed as segment_softmax's: the maximum
// first, exp(s - max) summed over c in order, then multiplied by 1 / sum, and the activation is
// act_value, so y has the composed ops' bits. Backward, with dz = dy act'(z + res) (z recomputed from
// x and w, never stored), g = the second half of dz and a = g x:
//   dres = dz;   dx = (first half of dz) + g w + beta w (a - sum_c a w)
//   dbeta = sum over r, c, d of a w (x - sum_c w x)
// Dropout after the activation may be fused too (RowsDropout, kernels/dropout.h): y = drop(act(z + res)),
// and dy is masked before the rest of the backward, the bits of the dropout op applied to the composed y;
// the mask ag::dropout draws over y [R, C*2D] (element (r, c, j) at its own index) or, with configs C, the
// one ag::dropout_configs draws (a row's C configs alike: index r*2D + j), config c's first index
// drop.first(r, c, C, 2D).
// w [R, C, D] is kept by the forward for the backward. beta is read through a pointer (on the GPU it
// stays on the device). On the host dbeta is summed in double per (row, channel) over c, then over a
// row's channels in order, then over rows in fixed chunks (one double per channel, so the loop that
// writes dx vectorises; a single running double made it scalar); on the GPU per (row, channel), then in
// one block in a fixed order: the same bits for any thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/common.h"
#include "kernels/activation.h"
#include "kernels/dropout.h"
#include "kernels/math_fn.h"

namespace gnn {

// The softmax's first passes: w [C, D] = exp(beta x - m) with m the maximum over c, and sum[d] = 1 / their
// sum over c in order; w[c, d] * sum[d] is then the weight (config_attention_row multiplies as it writes y).
template <class T>
GNN_INLINE inline void config_attention_exp(T* w, const T* x, int64_t C, int64_t D, T beta, T* m, T* sum) {
  for (int64_t d = 0; d < D; ++d) m[d] = x[d] * beta, sum[d] = T(0);
  for (int64_t c = 1; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T v = x[c * D + d] * beta;
      m[d] = m[d] < v ? v : m[d];  // std::max's choice, written out: nothing out of line in an ISA clone
    }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T v = math_exp(x[c * D + d] * beta - m[d]);
      w[c * D + d] = v;
      sum[d] += v;
    }
  for (int64_t d = 0; d < D; ++d) sum[d] = T(1) / sum[d];
}

// One row's weights w [C, D] alone, config_attention_row's bits (for a backward that recomputes them).
// These two are forced inline too, like the row functions below.
template <class T>
GNN_INLINE inline void config_attention_weights(T* w, const T* x, int64_t C, int64_t D, T beta, T* m, T* sum) {
  config_attention_exp(w, x, C, D, beta, m, sum);
  for (int64_t c = 0; c < C; ++c) {
    T* __restrict wc = w + c * D;
    for (int64_t d = 0; d < D; ++d) wc[d] *= sum[d];
  }
}

// One row: w [C, D] from x [C, D], and y [C, 2D] = act([x | x w] + res) (res [C, 2D] may be null). The
// last pass writes w and both halves of y for one config at a time, one activation per loop (so that
// each loop vectorises, as in config_attention_dz): y is written once, not stored and then reread (with
// dropout, its mask then scales the config's 2D values while they are in L1).
// `a` is an Act, or a std::integral_constant<Act, ...> (dispatch_act) so that the CPU loops see a
// constant and vectorise. Forced inline: the body must be compiled inside each CPU clone.
template <class T, class A>
GNN_INLINE inline void config_attention_row(T* y, T* w, const T* x, const T* res, int64_t C, int64_t D, T beta, A a,
                                            T* m, T* sum, const RowsDropout<T>& drop, int64_t r) {
  config_attention_exp(w, x, C, D, beta, m, sum);
  for (int64_t c = 0; c < C; ++c) {
    T* __restrict y1 = y + c * 2 * D;
    T* __restrict y2 = y1 + D;
    T* __restrict wc = w + c * D;
    const T* __restrict xc = x + c * D;
    for (int64_t d = 0; d < D; ++d) wc[d] *= sum[d];
    if (res) {
      const T* __restrict r1 = res + c * 2 * D;
      const T* __restrict r2 = r1 + D;
      for (int64_t d = 0; d < D; ++d) y1[d] = act_value<T>(a, xc[d] + r1[d], T(0));
      for (int64_t d = 0; d < D; ++d) y2[d] = act_value<T>(a, xc[d] * wc[d] + r2[d], T(0));
    } else {
      for (int64_t d = 0; d < D; ++d) y1[d] = act_value<T>(a, xc[d], T(0));
      for (int64_t d = 0; d < D; ++d) y2[d] = act_value<T>(a, xc[d] * wc[d], T(0));
    }
    if (drop.mask.on) {  // the config's values, still in L1, through the pointers that wrote them
      const int64_t i0 = drop.first(r, c, C, 2 * D);
      drop.mask.apply(y1, y1, D, i0);
      drop.mask.apply(y2, y2, D, i0 + D);
    }
  }
}

// One row's dz [C*2D] = dy act'(z + res), z = [x | x w] recomputed. One statement per loop, so that
// each vectorises (two activations' worth of erf and exp in one loop body does not). This and the two
// row functions below are forced inline like config_attention_row: the backward's row function was left
// out of line, a weak symbol compiled for the baseline ISA, and ran as SSE code from the AVX-512 clone.
// With dropout, dz = (dy masked) act'(z + res): the masked dy written first, then multiplied in place
// (nothing more to do without an activation; res is not read then).
template <class T, class A>
GNN_INLINE inline void config_attention_dz(T* dz, const T* dy, const T* x, const T* w, const T* res, int64_t C,
                                           int64_t D, A a, const RowsDropout<T>& drop, int64_t r) {
  for (int64_t c = 0; c < C; ++c) {
    T *__restrict g1 = dz + c * 2 * D, *__restrict g2 = g1 + D;
    const T *__restrict d1 = dy + c * 2 * D, *__restrict d2 = d1 + D;
    const T *__restrict xc = x + c * D, *__restrict wc = w + c * D;
    if (drop.mask.on) {
      const int64_t i0 = drop.first(r, c, C, 2 * D);
      drop.mask.apply(g1, d1, D, i0);
      drop.mask.apply(g2, d2, D, i0 + D);
      if (Act(a) == Act::kNone) continue;
      if (res) {
        const T* __restrict r1 = res + c * 2 * D, * __restrict r2 = r1 + D;
        for (int64_t d = 0; d < D; ++d) g1[d] = g1[d] * act_derivative<T>(a, xc[d] + r1[d], T(0));
        for (int64_t d = 0; d < D; ++d) g2[d] = g2[d] * act_derivative<T>(a, xc[d] * wc[d] + r2[d], T(0));
      } else {
        for (int64_t d = 0; d < D; ++d) g1[d] = g1[d] * act_derivative<T>(a, xc[d], T(0));
        for (int64_t d = 0; d < D; ++d) g2[d] = g2[d] * act_derivative<T>(a, xc[d] * wc[d], T(0));
      }
    } else if (res) {
      const T *__restrict r1 = res + c * 2 * D, *__restrict r2 = r1 + D;
      for (int64_t d = 0; d < D; ++d) g1[d] = d1[d] * act_derivative<T>(a, xc[d] + r1[d], T(0));
      for (int64_t d = 0; d < D; ++d) g2[d] = d2[d] * act_derivative<T>(a, xc[d] * wc[d] + r2[d], T(0));
    } else {
      for (int64_t d = 0; d < D; ++d) g1[d] = d1[d] * act_derivative<T>(a, xc[d], T(0));
      for (int64_t d = 0; d < D; ++d) g2[d] = d2[d] * act_derivative<T>(a, xc[d] * wc[d], T(0));
    }
  }
}

// One row's backward: dx [C, D]; returns the row's part of dbeta. aw, wx: D scratch values each; db: D
// doubles, the per-channel partial sums of dbeta (summed over d in order at the end).
template <class T>
GNN_INLINE inline double config_attention_row_backward(T* __restrict dx, const T* __restrict dy, const T* __restrict x,
                                                       const T* __restrict w, int64_t C, int64_t D, T beta,
                                                       T* __restrict aw, T* __restrict wx, double* __restrict db) {
  for (int64_t d = 0; d < D; ++d) aw[d] = T(0), wx[d] = T(0), db[d] = 0.0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T xv = x[c * D + d], wv = w[c * D + d];
      aw[d] += dy[c * 2 * D + D + d] * xv * wv;
      wx[d] += wv * xv;
    }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < D; ++d) {
      const T xv = x[c * D + d], wv = w[c * D + d], g = dy[c * 2 * D + D + d], a = g * xv;
      dx[c * D + d] = dy[c * 2 * D + d] + g * wv + beta * wv * (a - aw[d]);
      db[d] += double(a * wv * (xv - wx[d]));
    }
  double dbeta = 0;
  for (int64_t d = 0; d < D; ++d) dbeta += db[d];
  return dbeta;
}

// One row's backward with the dropout and the activation undone first: dz into dres's row when the
// residual wants its gradient, else into scratch (C*2D values); dy itself when there is nothing to undo.
template <class T, class A>
GNN_INLINE inline double config_attention_row_backward_act(T* dx, T* dres, const T* dy, const T* x, const T* w,
                                                           const T* res, int64_t C, int64_t D, T beta, A a, T* scratch,
                                                           T* aw, T* wx, double* db, const RowsDropout<T>& drop,
                                                           int64_t r) {
  const T* dz = dy;
  if (Act(a) != Act::kNone || drop.mask.on) {
    T* to = dres ? dres : scratch;
    config_attention_dz(to, dy, x, w, res, C, D, a, drop, r);
    dz = to;
  } else if (dres) {
    for (int64_t i = 0; i < C * 2 * D; ++i) dres[i] = dy[i];
  }
  return config_attention_row_backward(dx, dz, x, w, C, D, beta, aw, wx, db);
}

// res and dres may be null (dres: when the residual wants its gradient); the backward reads res only
// under an activation.
template <class T>
void config_attention_forward_ref(T* y, T* w, const T* x, const T* res, int64_t R, int64_t C, int64_t D, const T* beta,
                                  Act a, RowsDropout<T> drop) {
  std::vector<T> m(static_cast<size_t>(D)), sum(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r)
    config_attention_row(y + r * C * 2 * D, w + r * C * D, x + r * C * D, res ? res + r * C * 2 * D : nullptr, C, D,
                         *beta, a, m.data(), sum.data(), drop, r);
}

template <class T>
void config_attention_backward_ref(T* dx, T* dres, T* dbeta, const T* dy, const T* x, const T* w, const T* res,
                                   int64_t R, int64_t C, int64_t D, const T* beta, Act a, RowsDropout<T> drop) {
  std::vector<T> aw(static_cast<size_t>(D)), wx(static_cast<size_t>(D)), scratch(static_cast<size_t>(C * 2 * D));
  std::vector<double> part(static_cast<size_t>(D));
  double db = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t o = r * C * 2 * D;
    db += config_attention_row_backward_act(dx + r * C * D, dres ? dres + o : nullptr, dy + o, x + r * C * D,
                                            w + r * C * D, res ? res + o : nullptr, C, D, *beta, a, scratch.data(),
                                            aw.data(), wx.data(), part.data(), drop, r);
  }
  *dbeta = T(db);
}

// The same over all threads (rows over threads; dbeta summed in fixed chunks, config_attention_dbeta).
inline constexpr int64_t kConfigAttentionChunks = 64;  // dbeta's partial sums, whatever the thread count
// dbeta from each row's part (config_attention_row_backward_act's return): the rows summed in order within
// each of the fixed chunks, then the chunks in order; the same bits for any thread count. The fused SE +
// attention's backward (kernels/squeeze_excite_cpu.cpp) sums its nodes' parts here too: one dbeta for both.
inline double config_attention_dbeta(const double* rows, int64_t R) {
  const int64_t chunks = std::min<int64_t>(kConfigAttentionChunks, std::max<int64_t>(R, 1));
  double total = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    double part = 0;
    for (int64_t r = k * R / chunks; r < (k + 1) * R / chunks; ++r) part += rows[r];
    total += part;
  }
  return total;
}
void config_attention_forward_cpu(float* y, float* w, const float* x, const float* res, int64_t R, int64_t C, int64_t D,
                                  const float* beta, Act a, RowsDropout<float> drop);
void config_attention_backward_cpu(float* dx, float* dres, float* dbeta, const float* dy, const float* x,
                                   const float* w, const float* res, int64_t R, int64_t C, int64_t D, const float* beta,
                                   Act a, RowsDropout<float> drop);
// On a GPU: one thread per (row, channel). The backward's workspace: config_attention_workspace_cuda(R,
// D) floats (each (row, channel)'s part of dbeta, then summed in one block).
int64_t config_attention_workspace_cuda(int64_t R, int64_t D);
void config_attention_forward_cuda(float* y, float* w, const float* x, const float* res, int64_t R, int64_t C,
                                   int64_t D, const float* beta, Act a, RowsDropout<float> drop, Stream stream);
void config_attention_backward_cuda(float* dx, float* dres, float* dbeta, const float* dy, const float* x,
                                    const float* w, const float* res, int64_t R, int64_t C, int64_t D,
                                    const float* beta, Act a, RowsDropout<float> drop, float* workspace,
                                    Stream stream);

}  // namespace gnn
