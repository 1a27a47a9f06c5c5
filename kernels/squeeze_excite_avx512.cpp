// The squeeze-and-excitation block (kernels/squeeze_excite.h) on AVX-512, for H = 16: a row of h is one
// vector. Each thread takes blocks of 32 rows; a block's z, g and dy s (32 x F floats each) and p (32 x 16)
// stay in the thread's buffers, in L1 / L2, so x and dy are read once and y or dx written once. The
// products are FMA chains over k in order, with the k-th value of a row broadcast: h = x W1 and g W2^T
// run eight rows at a time (eight chains against one W1 row), z = h W2 and p W1^T a row at a time over up
// to eight vectors of columns (or, under bf16 products, those four and the weight gradients' sums on AMX
// tiles or VDPBF16PS: Products, and squeeze_excite_amx.cpp). The weight gradients go into per-chunk partials
// (kSqueezeExciteChunk rows, eight blocks), which the threads fill chunk by chunk and then sum in chunk
// order. The same blocks run inside the SE block + cross-config attention kernels at the end of the file, a
// node's rows at a time.
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>

#include "base/common.h"
#include "kernels/config_attention.h"
#include "kernels/squeeze_excite.h"
#include "kernels/vmath.h"

namespace gnn {
namespace {

constexpr int H = 16, RG = 8, VG = 8;  // h's width, rows a group, vectors a group
constexpr int64_t RB = kSqueezeExciteBlock;  // rows a block
static_assert(kSqueezeExciteChunk % RB == 0, "whole blocks a chunk");
using V = __m512;

int thread_index() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// store(i, sum_k a[i * lda + k] w[k]) over k < K in order, for N rows (w [K, 16])
template <int N, class Store>
GNN_INLINE inline void rows_by_16(const float* a, int64_t lda, int64_t K, const float* w, Store&& store) {
  V acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const V wk = _mm512_loadu_ps(w + k * H);
    for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + k]), wk, acc[i]);
  }
  for (int i = 0; i < N; ++i) store(i, acc[i]);
}

// h rows of a block: relu(x W1 + b1), as act_value's x <= 0 ? 0 : x (a NaN stays NaN; max would drop it)
template <int N>
GNN_INLINE inline void squeeze_rows(const float* x, int64_t F, const float* w1, V b1, float* h) {
  rows_by_16<N>(x, F, F, w1, [&](int i, V v) GNN_INLINE {
    const V z = _mm512_add_ps(v, b1), zero = _mm512_setzero_ps();
    _mm512_storeu_ps(h + i * H, _mm512_mask_mov_ps(z, _mm512_cmp_ps_mask(z, zero, _CMP_LE_OQ), zero));
  });
}

// p rows of a block: (g W2^T) where h > 0, else 0
template <int N>
GNN_INLINE inline void gate_grad_rows(const float* g, int64_t F, const float* w2t, const float* h, float* p) {
  rows_by_16<N>(g, F, F, w2t, [&](int i, V v) GNN_INLINE {
    const __mmask16 on = _mm512_cmp_ps_mask(_mm512_loadu_ps(h + i * H), _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_storeu_ps(p + i * H, _mm512_maskz_mov_ps(on, v));
  });
}

void squeeze_block(const float* x, int64_t n, int64_t F, const float* w1, V b1, float* h) {
  int64_t i = 0;
  for (; i + RG <= n; i += RG) squeeze_rows<RG>(x + i * F, F, w1, b1, h + i * H);
  for (; i < n; ++i) squeeze_rows<1>(x + i * F, F, w1, b1, h + i * H);
}

void gate_grad_block(const float* g, int64_t n, int64_t F, const float* w2t, const float* h, float* p) {
  int64_t i = 0;
  for (; i + RG <= n; i += RG) gate_grad_rows<RG>(g + i * F, F, w2t, h + i * H, p + i * H);
  for (; i < n; ++i) gate_grad_rows<1>(g + i * F, F, w2t, h + i * H, p + i * H);
}

// out[c] = init[c] (or 0) + sum_m u[m] w[m * F + c] over m < 16 in order, for one row (w [16, F])
template <int NV>
GNN_INLINE inline void row_from_16(const float* u, const float* w, int64_t F, int64_t c0, const float* init,
                                   float* out) {
  V acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = init ? _mm512_loadu_ps(init + c0 + 16 * v) : _mm512_setzero_ps();
  for (int m = 0; m < H; ++m) {
    const V um = _mm512_set1_ps(u[m]);
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(um, _mm512_loadu_ps(w + m * F + c0 + 16 * v), acc[v]);
  }
  for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + c0 + 16 * v, acc[v]);
}

// rows of n: out[i] = init (a row of F, the same for every row: b2; or row i of a block: dx's part) + u[i] w
void rows_from_16(const float* u, int64_t n, const float* w, int64_t F, const float* init, int64_t ld_init,
                  float* out, int64_t ld_out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* in = init ? init + i * ld_init : nullptr;
    float* o = out + i * ld_out;
    int64_t c0 = 0;
    for (; c0 + 16 * VG <= F; c0 += 16 * VG) row_from_16<VG>(u + i * H, w, F, c0, in, o);
    for (; c0 < F; c0 += 16) row_from_16<1>(u + i * H, w, F, c0, in, o);
  }
}

// part[m, c0 + 16v] += sum_r u[r, m] g[r, c0 + 16v] for v < NV, over the block's rows in order
template <int NV>
GNN_INLINE inline void outer_cols(float* part, const float* u, const float* g, int64_t n, int64_t F, int m,
                                  int64_t c0) {
  V acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_loadu_ps(part + m * F + c0 + 16 * v);
  for (int64_t r = 0; r < n; ++r) {
    const V ur = _mm512_set1_ps(u[r * H + m]);
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(ur, _mm512_loadu_ps(g + r * F + c0 + 16 * v), acc[v]);
  }
  for (int v = 0; v < NV; ++v) _mm512_storeu_ps(part + m * F + c0 + 16 * v, acc[v]);
}

// part[m, :] += sum_r u[r, m] g[r, :] over the block's rows in order (part [16, F])
void add_outer_16_by_f(float* part, const float* u, const float* g, int64_t n, int64_t F) {
  for (int m = 0; m < H; ++m) {
    int64_t c0 = 0;
    for (; c0 + 16 * VG <= F; c0 += 16 * VG) outer_cols<VG>(part, u, g, n, F, m, c0);
    for (; c0 < F; c0 += 16) outer_cols<1>(part, u, g, n, F, m, c0);
  }
}

// part[k, :] += sum_r x[r, k] p[r, :] over the block's rows in order (part [F, 16]), eight k at a time
void add_outer_f_by_16(float* part, const float* x, const float* p, int64_t n, int64_t F) {
  for (int64_t k0 = 0; k0 < F; k0 += RG) {
    V acc[RG];
    for (int i = 0; i < RG; ++i) acc[i] = _mm512_loadu_ps(part + (k0 + i) * H);
    for (int64_t r = 0; r < n; ++r) {
      const V pr = _mm512_loadu_ps(p + r * H);
      for (int i = 0; i < RG; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * F + k0 + i]), pr, acc[i]);
    }
    for (int i = 0; i < RG; ++i) _mm512_storeu_ps(part + (k0 + i) * H, acc[i]);
  }
}

// part[:] += the column sums of a [n, F] block, rows in order
void add_column_sums(float* part, const float* a, int64_t n, int64_t F) {
  for (int64_t c = 0; c < F; c += 16) {
    V acc = _mm512_loadu_ps(part + c);
    for (int64_t r = 0; r < n; ++r) acc = _mm512_add_ps(acc, _mm512_loadu_ps(a + r * F + c));
    _mm512_storeu_ps(part + c, acc);
  }
}

// The block's four row products and two weight sums, on FMA chains (above), or with amx_ws on AMX tiles or
// VDPBF16PS (squeeze_excite_amx.cpp): one per thread, inside its OpenMP region (the tiles are configured
// for the thread that runs them)
struct Products {
  const float *w1, *b1, *w2, *w1t, *w2t;  // w1t, w2t: the backward's (W1^T [16, F], W2^T [F, 16])
  int64_t F;
  V b1v;
  bool tiles, dp;
  SeAmx amx;
  Products(const float* w1_, const float* b1_, const float* w2_, const float* w1t_, const float* w2t_, int64_t F_,
           float* amx_ws, SeProducts products)
      : w1(w1_), b1(b1_), w2(w2_), w1t(w1t_), w2t(w2t_), F(F_), b1v(b1_ ? _mm512_loadu_ps(b1_) : _mm512_setzero_ps()),
        tiles(amx_ws && products == SeProducts::kTiles), dp(amx_ws && products == SeProducts::kDp),
        amx(amx_ws ? SeAmx(amx_ws, F_, thread_index()) : SeAmx()) {
    if (tiles) squeeze_excite_amx_begin();
  }
  ~Products() {
    if (tiles) squeeze_excite_amx_end();
  }
  Products(const Products&) = delete;
  Products& operator=(const Products&) = delete;
  // h = relu(x W1 + b1)
  void squeeze(const float* x, int64_t n, float* h) const {
    if (tiles) return squeeze_excite_amx_squeeze(x, n, F, amx, b1, h);
    if (dp) return squeeze_excite_dp_squeeze(x, n, F, amx, b1, h);
    squeeze_block(x, n, F, w1, b1v, h);
  }
  // z = b2 + h W2 (b2row: b2 or zeros)
  void excite(const float* h, int64_t n, const float* b2row, float* z) const {
    if (tiles) return squeeze_excite_amx_rows_from_16(h, n, amx.w2, F, amx, b2row, 0, z, F);
    if (dp) return squeeze_excite_dp_rows_from_16(h, n, amx.w2, F, amx, b2row, 0, z, F);
    rows_from_16(h, n, w2, F, b2row, 0, z, F);
  }
  // s = sigmoid(b2 + h W2): the backward's gate, from z as the forward computed it
  void gate(const float* h, int64_t n, const float* b2row, float* s) const {
    excite(h, n, b2row, s);
    for (int64_t i = 0; i < n * F; ++i) s[i] = vm::sigmoid(s[i]);
  }
  // p = (g W2^T) where h > 0
  void gate_grad(const float* g, int64_t n, const float* h, float* p) const {
    if (tiles) return squeeze_excite_amx_gate_grad(g, n, F, amx, h, p);
    if (dp) return squeeze_excite_dp_gate_grad(g, n, F, amx, h, p);
    gate_grad_block(g, n, F, w2t, h, p);
  }
  // dx = dy s + p W1^T
  void input_grad(const float* p, int64_t n, const float* dys, float* dx) const {
    if (tiles) return squeeze_excite_amx_rows_from_16(p, n, amx.w1t, F, amx, dys, F, dx, F);
    if (dp) return squeeze_excite_dp_rows_from_16(p, n, amx.w1t, F, amx, dys, F, dx, F);
    rows_from_16(p, n, w1t, F, dys, F, dx, F);
  }
  // dW2 [16, F] += h^T g over the block's rows
  void add_dw2(float* part, const float* h, const float* g, int64_t n) const {
    if (tiles) return squeeze_excite_amx_add_outer(part, h, g, n, F, amx);
    if (dp) return squeeze_excite_dp_add_outer(part, h, g, n, F, amx);
    add_outer_16_by_f(part, h, g, n, F);
  }
  // dW1 += x^T p: [F, 16] on FMA chains, transposed ([16, F], p^T x) in bf16 (total_partials turns it)
  void add_dw1(float* part, const float* x, const float* p, int64_t n) const {
    if (tiles) return squeeze_excite_amx_add_outer(part, p, x, n, F, amx);
    if (dp) return squeeze_excite_dp_add_outer(part, p, x, n, F, amx);
    add_outer_f_by_16(part, x, p, n, F);
  }
};

// One block of n rows forward: h (into hb), z = h W2 + b2 in the thread's buffer, y = x * sigmoid(z)
GNN_INLINE inline void block_forward(const Products& pr, const float* xb, int64_t n, const float* b2row, float* hb,
                                     float* z, float* yb) {
  pr.squeeze(xb, n, hb);
  pr.excite(hb, n, b2row, z);
  for (int64_t i = 0; i < n * pr.F; ++i) yb[i] = xb[i] * vm::sigmoid(z[i]);
}

// The sums one chunk's rows add to: dW1 [F, 16] ([16, F] under bf16 products) | dW2 [16, F] | db1 [16] | db2 [F]
struct Partials {
  float *w1, *w2, *b1, *b2;
  Partials(float* parts, int64_t chunk, int64_t F)
      : w1(parts + chunk * (2 * F * H + H + F)), w2(w1 + F * H), b1(w2 + H * F), b2(b1 + H) {}
};

// One block of n rows backward from s = sigmoid(z) and dy: g = dy x s (1 - s) and p = (g W2^T) [h > 0]
// added to the chunk's partials, and dx = dy s + p W1^T written (when dxb is given). g, dys and p are the
// thread's buffers.
GNN_INLINE inline void block_backward(const Products& pr, const float* s, const float* dyb, const float* xb,
                                      const float* hb, int64_t n, const Partials& part, float* g, float* dys, float* p,
                                      float* dxb) {
  const int64_t F = pr.F;
  for (int64_t i = 0; i < n * F; ++i) {
    dys[i] = dyb[i] * s[i];
    g[i] = dyb[i] * xb[i] * (s[i] * (1.0f - s[i]));
  }
  add_column_sums(part.b2, g, n, F);
  pr.add_dw2(part.w2, hb, g, n);
  pr.gate_grad(g, n, hb, p);
  add_column_sums(part.b1, p, n, H);
  pr.add_dw1(part.w1, xb, p, n);
  if (dxb) pr.input_grad(p, n, dys, dxb);
}

// The chunks' partials summed in chunk order into the gradients asked for, each element on its own (dW1's
// read transposed where bf16 products summed it as [16, F]: w1_rows)
void total_partials(float* dw1, float* db1, float* dw2, float* db2, const float* parts, int64_t chunks, int64_t F,
                    bool w1_rows) {
  const int64_t part_size = 2 * F * H + H + F;
  auto total = [&](float* out, int64_t offset, int64_t count, bool rows) {
    if (!out) return;
#pragma omp parallel for if (chunks * count > 65536)
    for (int64_t i = 0; i < count; ++i) {
      const int64_t at = offset + (rows ? i % H * F + i / H : i);  // (rows: element (k, m) of dW1 at m F + k)
      float acc = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) acc += parts[c * part_size + at];
      out[i] = acc;
    }
  };
  total(dw1, 0, F * H, w1_rows);
  total(dw2, F * H, H * F, false);
  total(db1, 2 * F * H, H, false);
  total(db2, 2 * F * H + H, F, false);
}

}  // namespace

// The workspace (squeeze_excite_cpu.cpp allocates it: no std containers in a file built for AVX-512,
// whose out-of-line copies of their inline functions the linker might pick for the whole program):
// forward b2row [F] (b2 or zeros) | each thread's z [32, F]; backward b2row | W1^T [16, F] | W2^T [F, 16] |
// the chunks' partial sums, zeros, [chunks][dW1 F*16 | dW2 16*F | db1 16 | db2 F] | each thread's z, g and
// dy s [32, F] and p [32, 16] (squeeze_excite_thread_floats each, a pad after each buffer).
void squeeze_excite_forward_avx512(float* y, float* h, const float* x, const float* w1, const float* b1,
                                   const float* w2, int64_t R, int64_t F, float* ws, float* amx_ws,
                                   SeProducts products) {
  const int64_t blocks = (R + RB - 1) / RB;
  const float* b2row = ws;
#pragma omp parallel if (R * F > 65536)
  {
    const Products pr(w1, b1, w2, nullptr, nullptr, F, amx_ws, products);
    float* z = ws + F + thread_index() * squeeze_excite_thread_floats(F, false);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t r0 = blk * RB, n = std::min<int64_t>(RB, R - r0);
      block_forward(pr, x + r0 * F, n, b2row, h + r0 * H, z, y + r0 * F);
    }
  }
}

void squeeze_excite_backward_avx512(float* dx, float* dw1, float* db1, float* dw2, float* db2, const float* dy,
                                    const float* x, const float* h, const float* w2, int64_t R, int64_t F,
                                    float* ws, float* amx_ws, SeProducts products) {
  const int64_t chunks = (R + kSqueezeExciteChunk - 1) / kSqueezeExciteChunk;
  const float *b2row = ws, *w1t = ws + F, *w2t = w1t + H * F;
  float* parts = ws + F + 2 * H * F;
  float* threads = parts + chunks * (2 * F * H + H + F);
#pragma omp parallel if (R * F > 65536)
  {
    const Products pr(nullptr, nullptr, w2, w1t, w2t, F, amx_ws, products);
    float* z = threads + thread_index() * squeeze_excite_thread_floats(F, true);
    const int64_t step = RB * F + kSqueezeExcitePad;
    float *g = z + step, *dys = g + step, *p = dys + step;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const Partials part(parts, c, F);
      const int64_t c1 = std::min(R, (c + 1) * kSqueezeExciteChunk);
      for (int64_t r0 = c * kSqueezeExciteChunk; r0 < c1; r0 += RB) {
        const int64_t n = std::min<int64_t>(RB, c1 - r0);
        const float* hb = h + r0 * H;
        pr.gate(hb, n, b2row, z);
        block_backward(pr, z, dy + r0 * F, x + r0 * F, hb, n, part, g, dys, p, dx ? dx + r0 * F : nullptr);
      }
    }
  }
  total_partials(dw1, db1, dw2, db2, parts, chunks, F, amx_ws && products != SeProducts::kF32);
}

// The fused SE + attention: one node's C rows at a time, in blocks of up to 32 rows (which never cross a
// chunk: nodes cover whole chunks, or chunks whole nodes, and a chunk is whole blocks). The backward's
// tasks are groups of nodes that fill whole chunks, so no two threads add to one chunk's partials.
void squeeze_excite_attention_forward_avx512(float* y, float* h, const float* x, const float* w1,
                                             const float* b1, const float* w2, const float* res, int64_t N, int64_t C,
                                             int64_t F, float beta, Act a, RowsDropout<float> drop, float* ws,
                                             float* amx_ws, SeProducts products) {
  const float* b2row = ws;
#pragma omp parallel if (N * C * F > 65536)
  {
    const Products pr(w1, b1, w2, nullptr, nullptr, F, amx_ws, products);
    float* z = ws + F + thread_index() * squeeze_excite_attention_thread_floats(C, F, false);
    float* xs = z + squeeze_excite_thread_floats(F, false);
    float* wn = xs + C * F + kSqueezeExcitePad;
    float *m = wn + C * F + kSqueezeExcitePad, *sum = m + F;
#pragma omp for schedule(static)
    for (int64_t node = 0; node < N; ++node) {
      const int64_t row = node * C;
      for (int64_t r0 = 0; r0 < C; r0 += RB) {
        const int64_t n = std::min<int64_t>(RB, C - r0);
        block_forward(pr, x + (row + r0) * F, n, b2row, h + (row + r0) * H, z, xs + r0 * F);
      }
      dispatch_act(a, [&](auto A) GNN_INLINE {
        config_attention_row(y + node * C * 2 * F, wn, xs, res ? res + node * C * 2 * F : nullptr, C, F, beta, A, m,
                             sum, drop, node);
      });
    }
  }
}

void squeeze_excite_attention_backward_avx512(float* dx, float* dres, double* dws, float* dw1, float* db1,
                                              float* dw2, float* db2, const float* dy, const float* x, const float* h,
                                              const float* res, const float* w2, int64_t N, int64_t C,
                                              int64_t F, float beta, Act a, RowsDropout<float> drop, float* ws,
                                              float* amx_ws, SeProducts products) {
  const int64_t R = N * C, chunks = (R + kSqueezeExciteChunk - 1) / kSqueezeExciteChunk;
  const int64_t group = std::max<int64_t>(1, kSqueezeExciteChunk / C), tasks = (N + group - 1) / group;
  const float *b2row = ws, *w1t = ws + F, *w2t = w1t + H * F;
  float* parts = ws + F + 2 * H * F;
  float* threads = parts + chunks * (2 * F * H + H + F);
  double* rows_dbeta = dws;
#pragma omp parallel if (R * F > 65536)
  {
    const Products pr(nullptr, nullptr, w2, w1t, w2t, F, amx_ws, products);
    const int64_t step = RB * F + kSqueezeExcitePad, node_step = C * F + kSqueezeExcitePad;
    float* g = threads + thread_index() * squeeze_excite_attention_thread_floats(C, F, true);
    float *dys = g + step, *p = dys + step;
    float* s = p + RB * H + kSqueezeExcitePad;
    float *xs = s + node_step, *dxs = xs + node_step, *scratch = dxs + node_step;
    float* wn = scratch + 2 * node_step;
    float *aw = wn + node_step, *wx = aw + F;
    double* db = dws + N + thread_index() * F;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t)
      for (int64_t node = t * group; node < std::min(N, (t + 1) * group); ++node) {
        const int64_t row = node * C, o = node * C * 2 * F;
        for (int64_t r0 = 0; r0 < C; r0 += RB) {  // s and the SE's output, as the forward computed them
          const int64_t n = std::min<int64_t>(RB, C - r0);
          float *sb = s + r0 * F, *xsb = xs + r0 * F;
          const float* xb = x + (row + r0) * F;
          pr.gate(h + (row + r0) * H, n, b2row, sb);
          for (int64_t i = 0; i < n * F; ++i) xsb[i] = xb[i] * sb[i];
        }
        config_attention_weights(wn, xs, C, F, beta, aw, wx);  // the forward's weights again
        rows_dbeta[node] = dispatch_act(a, [&](auto A) GNN_INLINE {
          return config_attention_row_backward_act(dxs, dres ? dres + o : nullptr, dy + o, xs, wn,
                                                   res ? res + o : nullptr, C, F, beta, A, scratch, aw, wx, db, drop,
                                                   node);
        });
        for (int64_t r0 = 0; r0 < C; r0 += RB) {
          const int64_t n = std::min<int64_t>(RB, C - r0), r = row + r0;
          block_backward(pr, s + r0 * F, dxs + r0 * F, x + r * F, h + r * H, n,
                         Partials(parts, r / kSqueezeExciteChunk, F), g, dys, p, dx ? dx + r * F : nullptr);
        }
      }
  }
  total_partials(dw1, db1, dw2, db2, parts, chunks, F, amx_ws && products != SeProducts::kF32);
}

}  // namespace gnn
