// The squeeze-and-excitation block of the 1st place's layout model (ChannelAttention, apps/train/blocks.h)
// as one op, over rows x [R, F] with W1 [F, H], W2 [H, F]:
//   h = relu(x W1 + b1)   [R, H]  (kept for the backward)
//   z = h W2 + b2         [R, F]  (recomputed in the backward: H multiply-adds a value)
//   y = x * sigmoid(z)
// The composed ops (matmul, bias_act, matmul, gate) write z and its gradient, [R, F] each, and read x and
// dy once per product; here each row block of x and dy is read once and the [R, F] intermediates live in
// the cache. The backward, with s = sigmoid(z), g = dy x s (1 - s) and p = (g W2^T) * [h > 0]:
//   dx = dy s + p W1^T;   dW2 = h^T g;   db2 = the column sums of g;   dW1 = x^T p;   db1 = the sums of p
// The weight gradients are sums over rows in fixed chunks of kSqueezeExciteChunk rows, each chunk's rows in
// order (on AMX tiles each chunk's 32-row blocks in order, on VDPBF16PS its row pairs), then the chunks in
// order: the same bits for any thread count. b1, b2 may be null (no bias); dx, dw1, db1, dw2, db2 may each
// be null (not wanted), and dx (when given) is written, not added to.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/config_attention.h"
#include "kernels/math_fn.h"

namespace gnn {

inline constexpr int64_t kSqueezeExciteChunk = 256;

template <class T>
void squeeze_excite_forward_ref(T* y, T* h, const T* x, const T* w1, const T* b1, const T* w2, const T* b2, int64_t R,
                                int64_t F, int64_t H) {
  std::vector<T> z(static_cast<size_t>(F));
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * F;
    T* hr = h + r * H;
    for (int64_t m = 0; m < H; ++m) {
      T acc = T(0);
      for (int64_t k = 0; k < F; ++k) acc += xr[k] * w1[k * H + m];
      const T v = acc + (b1 ? b1[m] : T(0));
      hr[m] = v <= T(0) ? T(0) : v;  // act_value's ReLU (a NaN stays NaN)
    }
    for (int64_t f = 0; f < F; ++f) {
      T acc = T(0);
      for (int64_t m = 0; m < H; ++m) acc += hr[m] * w2[m * F + f];
      y[r * F + f] = xr[f] * math_sigmoid(acc + (b2 ? b2[f] : T(0)));
    }
  }
}

template <class T>
void squeeze_excite_backward_ref(T* dx, T* dw1, T* db1, T* dw2, T* db2, const T* dy, const T* x, const T* h,
                                 const T* w1, const T* w2, const T* b2, int64_t R, int64_t F, int64_t H) {
  const int64_t chunks = (R + kSqueezeExciteChunk - 1) / kSqueezeExciteChunk;
  // each chunk's partial sums, then the chunks in order
  std::vector<T> pw1(size_t(chunks * F * H), T(0)), pw2(size_t(chunks * H * F), T(0)), pb1(size_t(chunks * H), T(0)),
      pb2(size_t(chunks * F), T(0)), g(static_cast<size_t>(F)), p(static_cast<size_t>(H));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t c = r / kSqueezeExciteChunk;
    const T *xr = x + r * F, *hr = h + r * H, *dyr = dy + r * F;
    for (int64_t f = 0; f < F; ++f) {
      T acc = T(0);
      for (int64_t m = 0; m < H; ++m) acc += hr[m] * w2[m * F + f];
      const T s = math_sigmoid(acc + (b2 ? b2[f] : T(0)));
      if (dx) dx[r * F + f] = dyr[f] * s;
      g[size_t(f)] = dyr[f] * xr[f] * (s * (T(1) - s));
      pb2[size_t(c * F + f)] += g[size_t(f)];
    }
    for (int64_t m = 0; m < H; ++m) {
      T acc = T(0);
      for (int64_t f = 0; f < F; ++f) {
        acc += g[size_t(f)] * w2[m * F + f];
        pw2[size_t((c * H + m) * F + f)] += hr[m] * g[size_t(f)];
      }
      p[size_t(m)] = hr[m] > T(0) ? acc : T(0);
      pb1[size_t(c * H + m)] += p[size_t(m)];
    }
    for (int64_t k = 0; k < F; ++k) {
      T acc = dx ? dx[r * F + k] : T(0);
      for (int64_t m = 0; m < H; ++m) {
        acc += p[size_t(m)] * w1[k * H + m];
        pw1[size_t((c * F + k) * H + m)] += xr[k] * p[size_t(m)];
      }
      if (dx) dx[r * F + k] = acc;
    }
  }
  auto total = [&](T* out, const std::vector<T>& part, int64_t n) {
    if (!out) return;
    for (int64_t i = 0; i < n; ++i) {
      T acc = T(0);
      for (int64_t c = 0; c < chunks; ++c) acc += part[size_t(c * n + i)];
      out[i] = acc;
    }
  };
  total(dw1, pw1, F * H);
  total(dw2, pw2, H * F);
  total(db1, pb1, H);
  total(db2, pb2, F);
}

// Float on the host: AVX-512 row blocks over the threads, where gemm_isa() is AVX-512, H is 16 and F a
// multiple of 16 (squeeze_excite_vectorised; elsewhere an error: ag::squeeze_excite composes the ops
// there). With R at 0 the weight gradients are zeros.
inline constexpr int64_t kSqueezeExciteBlock = 32;  // the AVX-512 kernel's rows a block, per thread
bool squeeze_excite_vectorised(int64_t F, int64_t H);
void squeeze_excite_forward_cpu(float* y, float* h, const float* x, const float* w1, const float* b1, const float* w2,
                                const float* b2, int64_t R, int64_t F, int64_t H);
void squeeze_excite_backward_cpu(float* dx, float* dw1, float* db1, float* dw2, float* db2, const float* dy,
                                 const float* x, const float* h, const float* w1, const float* w2, const float* b2,
                                 int64_t R, int64_t F, int64_t H);
// The AVX-512 kernels (squeeze_excite_avx512.cpp, which describes the workspace that squeeze_excite_cpu.cpp
// allocates, zeroing the partial sums, and fills). Each thread's buffers end in a pad of 80 floats, so that
// z[i], g[i] and dy s[i] are not 4 KiB apart: loads after stores to such addresses stall (the kernel,
// forward and backward, ran 7% slower with the buffers back to back).
inline constexpr int64_t kSqueezeExcitePad = 80;
inline int64_t squeeze_excite_thread_floats(int64_t F, bool backward) {
  const int64_t rows = kSqueezeExciteBlock * F + kSqueezeExcitePad;
  return backward ? 3 * rows + kSqueezeExciteBlock * 16 + kSqueezeExcitePad : rows;
}
// products: what runs them (below); amx_ws: the bf16 products' workspace, null for FMA chains
enum class SeProducts { kF32, kTiles, kDp };  // FMA chains | AMX tiles | VDPBF16PS
void squeeze_excite_forward_avx512(float* y, float* h, const float* x, const float* w1, const float* b1,
                                   const float* w2, int64_t R, int64_t F, float* ws, float* amx_ws,
                                   SeProducts products);
void squeeze_excite_backward_avx512(float* dx, float* dw1, float* db1, float* dw2, float* db2, const float* dy,
                                    const float* x, const float* h, const float* w2, int64_t R, int64_t F,
                                    float* ws, float* amx_ws, SeProducts products);

// Under --matmul-precision bf16 where the bf16 products run on AMX (gemm_bf16_kernel()) and F is a multiple
// of 32, squeeze_excite_amx(F): the AVX-512 kernels' four row products (x W1, h W2 (forward, and again in
// the backward), g W2^T and p W1^T) run on AMX tiles (squeeze_excite_amx.cpp), their operands rounded to
// bf16 as the bf16 GEMM rounds them and summed in f32 by the tiles (z's and dx's tiles start from the b2
// row and dy s); the weight gradients' sums over rows, h^T g and p^T x, run on tiles too (32 rows a tile
// product, dW1 transposed in the chunks' partials and turned when they are totalled): the composed ops'
// products, equal up to the order of the sums. The same bits
// for any thread count, and in the fused kernel below the two ops' bits, as in f32. The workspace (amx_ws,
// null for the f32 products): W1 as F/2 pair rows of 16 | W2 as F/16 tiles of 8 pair rows | W1^T likewise |
// W2^T as F/2 pair rows (the backward's two), packed by squeeze_excite_amx_pack, then each thread's bf16
// block [32, F] and tile output [32, 16] (the weight sums reuse them for the large operand's 16 pair rows
// [16, F] and the small one's transposed A tile [16, 16] u32).
bool squeeze_excite_amx(int64_t F);
inline int64_t squeeze_excite_amx_floats(int64_t F, int64_t threads) {
  return 32 * F + threads * (16 * F + kSqueezeExciteBlock * 16 + kSqueezeExcitePad);
}
struct SeAmx {  // one thread's view of amx_ws
  const uint32_t *w1 = nullptr, *w2 = nullptr, *w1t = nullptr, *w2t = nullptr;
  uint16_t* a = nullptr;
  float* c = nullptr;
  SeAmx() = default;
  SeAmx(float* amx_ws, int64_t F, int thread)
      : w1(reinterpret_cast<const uint32_t*>(amx_ws)), w2(w1 + 8 * F), w1t(w2 + 8 * F), w2t(w1t + 8 * F),
        a(reinterpret_cast<uint16_t*>(amx_ws + 32 * F + thread * (16 * F + kSqueezeExciteBlock * 16 +
                                                                  kSqueezeExcitePad))),
        c(reinterpret_cast<float*>(a + kSqueezeExciteBlock * F)) {}
};
// w1t, w2t (the backward's) may be null
void squeeze_excite_amx_pack(uint32_t* packed, const float* w1, const float* w2, const float* w1t, const float* w2t,
                             int64_t F);
void squeeze_excite_amx_begin();  // the calling thread's tile configuration
void squeeze_excite_amx_end();    // its tiles released
// h [n, 16] = relu(x W1 + b1) (b1 may be null); p [n, 16] = (g W2^T) where h > 0, else 0; out[i] = init row (not null)
// (ld_init 0: the same row for all) + u[i] w for w one of the [16, F] operands (amx.w2, amx.w1t). n <= 32.
void squeeze_excite_amx_squeeze(const float* x, int64_t n, int64_t F, const SeAmx& amx, const float* b1, float* h);
void squeeze_excite_amx_gate_grad(const float* g, int64_t n, int64_t F, const SeAmx& amx, const float* h, float* p);
void squeeze_excite_amx_rows_from_16(const float* u, int64_t n, const uint32_t* w, int64_t F, const SeAmx& amx,
                                     const float* init, int64_t ld_init, float* out, int64_t ld_out);
// part [16, F] += a^T u, a [n, 16] (h or p) and u [n, F] (g or x), n <= 32: dW2's and dW1^T's sums over a
// block's rows (uses amx.a and amx.c).
void squeeze_excite_amx_add_outer(float* part, const float* a, const float* u, int64_t n, int64_t F,
                                  const SeAmx& amx);

// Under --matmul-precision bf16 where the bf16 products run on AVX512-BF16 without AMX (gemm_bf16_kernel()
// is kAvx512Bf16), squeeze_excite_dpbf16(F): the same four row products from the same packed workspace on
// VDPBF16PS (squeeze_excite_amx.cpp), each output a chain over its k pairs in order from zero with the
// init row (b2, dy s) added after, as the bf16 GEMM sums a row whose k fit one of its K blocks (F up to
// gemm_detail::kKC, 256: the recipe's 128) and the composed ops add to it; and the weight gradients' sums
// over rows (h^T g, p^T x: dW1 transposed in the partials, as on tiles) a chain over the rows in pairs
// (2i, 2i + 1), a last odd row paired with zeros. A row's products do not depend on its block, nor the sums
// on where blocks end as long as they start at even rows (the fused op's rule below). The functions are the
// tile ones' (above), n <= 32 too; the tiles are not configured.
bool squeeze_excite_dpbf16(int64_t F);
void squeeze_excite_dp_squeeze(const float* x, int64_t n, int64_t F, const SeAmx& amx, const float* b1, float* h);
void squeeze_excite_dp_gate_grad(const float* g, int64_t n, int64_t F, const SeAmx& amx, const float* h, float* p);
void squeeze_excite_dp_rows_from_16(const float* u, int64_t n, const uint32_t* w, int64_t F, const SeAmx& amx,
                                    const float* init, int64_t ld_init, float* out, int64_t ld_out);
void squeeze_excite_dp_add_outer(float* part, const float* a, const float* u, int64_t n, int64_t F,
                                 const SeAmx& amx);

// The SE block and the cross-config attention after it (kernels/config_attention.h) as one kernel: per
// node, its C rows of x [N*C, F] through the SE block into the thread's buffer, then config_attention_row
// on that buffer (y [N, C*2F], h [N*C, 16]), so that neither the SE's output nor the attention's weights
// are written. The backward recomputes both from x and h (config_attention_weights), runs the attention's
// row backward into the thread's buffer and the SE blocks from there: the bits of
// squeeze_excite_forward_cpu / _backward_cpu and config_attention_forward_cpu / _backward_cpu composed,
// where each node's rows cover whole chunks of kSqueezeExciteChunk rows or a chunk whole nodes, C is at
// most kSqueezeExciteAttentionMaxConfigs (a thread holds six [C, F] buffers) and, where the products run on
// tiles (squeeze_excite_amx), a multiple of the 32-row block (a tile sums a block's rows at once, so the
// fused op's blocks, a node's, must be the SE op's), on VDPBF16PS (squeeze_excite_dpbf16) at least 2 (even:
// blocks then start at even rows and pair the rows as the SE op's do): squeeze_excite_attention_fused.
// Host only, where squeeze_excite_vectorised(F, 16); dres and each gradient may be null (not wanted).
inline constexpr int64_t kSqueezeExciteAttentionMaxConfigs = 1024;
bool squeeze_excite_attention_fused(int64_t C, int64_t F, int64_t H);
void squeeze_excite_attention_forward_cpu(float* y, float* h, const float* x, const float* w1,
                                          const float* b1, const float* w2, const float* b2, const float* res,
                                          int64_t N, int64_t C, int64_t F, int64_t H, const float* beta, Act a,
                                          RowsDropout<float> drop);
void squeeze_excite_attention_backward_cpu(float* dx, float* dres, float* dbeta, float* dw1, float* db1, float* dw2,
                                           float* db2, const float* dy, const float* x, const float* h,
                                           const float* res, const float* w1, const float* w2, const float* b2,
                                           int64_t N, int64_t C, int64_t F, int64_t H, const float* beta, Act a,
                                           RowsDropout<float> drop);
// Their AVX-512 halves. Each thread's buffers: forward z [32, F], then the SE's output and the attention's
// weights for a node [C, F] and its m and sum [F]; backward g and dy s [32, F], p [32, 16], then the SE's
// sigmoid s, its output and its gradient [C, F], the attention's scratch [C, 2F], its weights [C, F] and
// its aw, wx [F]; each [..] with a pad after it. The workspaces start as the SE kernels' (the b2 row;
// backward W1^T, W2^T and the chunks' partials, zeros). dws: each node's part of dbeta [N], then F doubles a thread.
inline int64_t squeeze_excite_attention_thread_floats(int64_t C, int64_t F, bool backward) {
  const int64_t node = C * F + kSqueezeExcitePad, block = kSqueezeExciteBlock * F + kSqueezeExcitePad;
  if (!backward) return block + 2 * node + 2 * F;
  return 2 * block + kSqueezeExciteBlock * 16 + kSqueezeExcitePad + 6 * node + 2 * F;
}
void squeeze_excite_attention_forward_avx512(float* y, float* h, const float* x, const float* w1,
                                             const float* b1, const float* w2, const float* res, int64_t N, int64_t C,
                                             int64_t F, float beta, Act a, RowsDropout<float> drop, float* ws,
                                             float* amx_ws, SeProducts products);
void squeeze_excite_attention_backward_avx512(float* dx, float* dres, double* dws, float* dw1, float* db1,
                                              float* dw2, float* db2, const float* dy, const float* x, const float* h,
                                              const float* res, const float* w2, int64_t N, int64_t C,
                                              int64_t F, float beta, Act a, RowsDropout<float> drop, float* ws,
                                              float* amx_ws, SeProducts products);

}  // namespace gnn
