// The squeeze-and-excitation block's row products on AMX tiles (kernels/squeeze_excite.h, SeAmx), for the
// AVX-512 kernels under --matmul-precision bf16: a block of up to 32 rows times a 16-wide operand, the
// operands rounded to bf16 (nearest, ties to even, denormals read as zero: VCVTNEPS2BF16, as the bf16 GEMM
// rounds them) and the products summed in f32 by TDPBF16PS in the tile's own order. A block's A rows past n
// are zeros, its C rows past n whatever the thread's buffer held; neither is read back, and the caller's
// rows past n are never written. The weight gradients' sums over a block's rows (squeeze_excite_amx_add_outer)
// take the rows as K instead: the small operand's row pairs transposed into an A tile, the large one's row
// pairs as B tiles, the rows past n zeros in both.
// Tiles (palette 1): C 0-1 [16 rows x 16 f32]; A over 32 k (16 pairs) 2-3, over 16 k (8 pairs) 4-5; B over
// 16 pairs 6, over 8 pairs 7. The weight gradients' sums over a block's 32 rows (K = the rows) use C 0-1,
// A 2 and B 6 and 3.
// Where the bf16 products run on AVX512-BF16 without AMX (squeeze_excite_dpbf16), the same four row
// products from the same packed weights on VDPBF16PS at the end of the file (a row's k pairs in order from
// zero, then the init row added, as the bf16 GEMM (Bf16Blocked) sums a row of up to its kKC k and the
// composed ops add a bias), and the weight sums from the same transposed and paired operands (the rows in
// pairs, in order).
// The compiler emits no tile instruction there: those functions run on CPUs without AMX, as gemm_bf16.cpp's
// Bf16Blocked does.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/squeeze_excite.h"

namespace gnn {
namespace {

constexpr int H = 16;
constexpr int64_t RB = kSqueezeExciteBlock;
static_assert(RB == 32, "a block is two 16-row tiles");

// 16 floats to 16 bf16 zero-extended into u32 lanes
__m512i bf16_lanes(const float* p) {
  return _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), __m256i(_mm512_cvtneps_pbh(_mm512_loadu_ps(p))));
}

// lane t = (bf16(r0[t]), bf16(r1[t])) for t < 16, the first in the low half (a null row: zeros)
__m512i pair_lanes(const float* r0, const float* r1) {
  const __m512i lo = r0 ? bf16_lanes(r0) : _mm512_setzero_si512(), hi = r1 ? bf16_lanes(r1) : _mm512_setzero_si512();
  return _mm512_or_si512(lo, _mm512_maskz_slli_epi32(__mmask16(0xffff), hi, 16));
}

// a pair row of a B tile
void pair_row(const float* r0, const float* r1, uint32_t* dst) { _mm512_storeu_si512(dst, pair_lanes(r0, r1)); }

// a [32, K] bf16 from n rows of src [n, K] (row stride K, K a multiple of 16), the rows past n zeros
void bf16_block(const float* src, int64_t n, int64_t K, uint16_t* a) {
  for (int64_t i = 0; i < n * K; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + i), __m256i(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
  for (int64_t i = n * K; i < RB * K; i += 16)  // through the vector type, which may alias the float storage
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + i), _mm256_setzero_si256());
}

// c [32, 16] = a [32, K] (bf16, K a multiple of 32) times b (K / 2 pair rows of 16)
void times_k(const uint16_t* a, int64_t K, const uint32_t* b, float* c) {
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t k = 0; k < K; k += 32) {
    _tile_loadd(2, a + k, K * 2);
    _tile_loadd(3, a + 16 * K + k, K * 2);
    _tile_loadd(6, b + k / 2 * H, H * 4);
    _tile_dpbf16ps(0, 2, 6);
    _tile_dpbf16ps(1, 3, 6);
  }
  _tile_stored(0, c, H * 4);
  _tile_stored(1, c + 16 * H, H * 4);
}

// K-major [K, 16] floats (K even) as K / 2 pair rows
void pack_k_by_16(const float* w, int64_t K, uint32_t* out) {
  for (int64_t q = 0; q < K / 2; ++q) pair_row(w + 2 * q * H, w + (2 * q + 1) * H, out + q * H);
}

// [16, F] floats as F / 16 tiles of 8 pair rows: tile j holds columns 16j..16j+15
void pack_16_by_f(const float* w, int64_t F, uint32_t* out) {
  for (int64_t j = 0; j < F / 16; ++j)
    for (int q = 0; q < 8; ++q) pair_row(w + 2 * q * F + 16 * j, w + (2 * q + 1) * F + 16 * j, out + (j * 8 + q) * H);
}

// u [n, 16]'s rows in pairs, transposed into an A tile: t[m * 16 + q] = (bf16(u[2q][m]), bf16(u[2q + 1][m])),
// the rows past n zeros
void pairs_transposed(const float* u, int64_t n, uint32_t* t) {
  __m512i r[16];
  for (int64_t q = 0; q < 16; ++q)
    r[q] = pair_lanes(2 * q < n ? u + 2 * q * H : nullptr, 2 * q + 1 < n ? u + (2 * q + 1) * H : nullptr);
  transpose16(r);
  for (int m = 0; m < 16; ++m) _mm512_storeu_si512(t + m * 16, r[m]);
}

// u [n, F]'s rows in pairs as 16 pair rows of B tiles: b[q * F + c] = (bf16(u[2q][c]), bf16(u[2q + 1][c])),
// the rows past n zeros
void pairs_over_rows(const float* u, int64_t n, int64_t F, uint32_t* b) {
  for (int64_t q = 0; q < 16; ++q)
    for (int64_t c = 0; c < F; c += 16) {
      const float* r0 = 2 * q < n ? u + 2 * q * F + c : nullptr;
      pair_row(r0, 2 * q + 1 < n ? r0 + F : nullptr, b + q * F + c);
    }
}

// h's row i from its sum v: relu(v + b1) as act_value's ReLU, x <= 0 ? 0 : x (a NaN stays NaN)
inline void store_squeezed(float* h, int64_t i, __m512 v, __m512 b1) {
  const __m512 z = _mm512_add_ps(v, b1), zero = _mm512_setzero_ps();
  _mm512_storeu_ps(h + i * H, _mm512_mask_mov_ps(z, _mm512_cmp_ps_mask(z, zero, _CMP_LE_OQ), zero));
}

// p's row i from its sum v: v where h's row is > 0, else 0
inline void store_gated(float* p, int64_t i, __m512 v, const float* h) {
  const __mmask16 on = _mm512_cmp_ps_mask(_mm512_loadu_ps(h + i * H), _mm512_setzero_ps(), _CMP_GT_OQ);
  _mm512_storeu_ps(p + i * H, _mm512_maskz_mov_ps(on, v));
}

}  // namespace

void squeeze_excite_amx_pack(uint32_t* packed, const float* w1, const float* w2, const float* w1t, const float* w2t,
                             int64_t F) {
  pack_k_by_16(w1, F, packed);
  pack_16_by_f(w2, F, packed + 8 * F);
  if (w1t) pack_16_by_f(w1t, F, packed + 16 * F);
  if (w2t) pack_k_by_16(w2t, F, packed + 24 * F);
}

void squeeze_excite_amx_begin() {
  AmxTileConfig cfg;
  for (int t : {0, 1, 2, 3, 6}) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  cfg.rows[4] = cfg.rows[5] = 16, cfg.colsb[4] = cfg.colsb[5] = 32;
  cfg.rows[7] = 8, cfg.colsb[7] = 64;
  amx_configure(cfg);
}

void squeeze_excite_amx_end() { _tile_release(); }

void squeeze_excite_amx_squeeze(const float* x, int64_t n, int64_t F, const SeAmx& amx, const float* b1, float* h) {
  bf16_block(x, n, F, amx.a);
  times_k(amx.a, F, amx.w1, amx.c);
  const __m512 b = b1 ? _mm512_loadu_ps(b1) : _mm512_setzero_ps();
  for (int64_t i = 0; i < n; ++i) store_squeezed(h, i, _mm512_loadu_ps(amx.c + i * H), b);
}

void squeeze_excite_amx_gate_grad(const float* g, int64_t n, int64_t F, const SeAmx& amx, const float* h, float* p) {
  bf16_block(g, n, F, amx.a);
  times_k(amx.a, F, amx.w2t, amx.c);
  for (int64_t i = 0; i < n; ++i) store_gated(p, i, _mm512_loadu_ps(amx.c + i * H), h);
}

// A whole block starts its C tiles from the init rows (a stride of 0 reads one row for all) and stores them
// into out; a block of fewer rows goes through the thread's c [32, 16] both ways, so that every row sums
// init and its products in the tile, in one order, wherever its block ends.
void squeeze_excite_amx_rows_from_16(const float* u, int64_t n, const uint32_t* w, int64_t F, const SeAmx& amx,
                                     const float* init, int64_t ld_init, float* out, int64_t ld_out) {
  bf16_block(u, n, H, amx.a);
  _tile_loadd(4, amx.a, H * 2);
  _tile_loadd(5, amx.a + 16 * H, H * 2);
  for (int64_t j = 0; j < F / 16; ++j) {
    if (n == RB) {
      _tile_loadd(0, init + 16 * j, ld_init * 4);
      _tile_loadd(1, init + 16 * ld_init + 16 * j, ld_init * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) _mm512_storeu_ps(amx.c + i * H, _mm512_loadu_ps(init + i * ld_init + 16 * j));
      _tile_loadd(0, amx.c, H * 4);
      _tile_loadd(1, amx.c + 16 * H, H * 4);
    }
    _tile_loadd(7, w + j * 8 * H, H * 4);
    _tile_dpbf16ps(0, 4, 7);
    _tile_dpbf16ps(1, 5, 7);
    if (n == RB) {
      _tile_stored(0, out + 16 * j, ld_out * 4);
      _tile_stored(1, out + 16 * ld_out + 16 * j, ld_out * 4);
    } else {
      _tile_stored(0, amx.c, H * 4);
      _tile_stored(1, amx.c + 16 * H, H * 4);
      for (int64_t i = 0; i < n; ++i) _mm512_storeu_ps(out + i * ld_out + 16 * j, _mm512_loadu_ps(amx.c + i * H));
    }
  }
}

// part [16, F] += a^T u over a block's rows (a [n, 16], u [n, F]): the A tile a^T in amx.c, u's pair rows
// in amx.a (as large as a bf16 [32, F] block); part's 16-column tiles loaded, summed into and stored back,
// two at a time (tiles 0 and 1 with B tiles 6 and 3).
void squeeze_excite_amx_add_outer(float* part, const float* a, const float* u, int64_t n, int64_t F,
                                  const SeAmx& amx) {
  uint32_t* at = reinterpret_cast<uint32_t*>(amx.c);
  uint32_t* b = reinterpret_cast<uint32_t*>(amx.a);
  pairs_transposed(a, n, at);
  pairs_over_rows(u, n, F, b);
  // (the tile loads' asm names no memory: the barrier keeps the stores above before them)
  __asm__ volatile("" : : : "memory");
  _tile_loadd(2, at, 64);
  for (int64_t c = 0; c < F; c += 32) {
    _tile_loadd(0, part + c, F * 4);
    _tile_loadd(1, part + c + 16, F * 4);
    _tile_loadd(6, b + c, F * 4);
    _tile_loadd(3, b + c + 16, F * 4);
    _tile_dpbf16ps(0, 2, 6);
    _tile_dpbf16ps(1, 2, 3);
    _tile_stored(0, part + c, F * 4);
    _tile_stored(1, part + c + 16, F * 4);
  }
}

// The VDPBF16PS row products. A block's rows are rounded into the thread's bf16 buffer (amx.a) and read
// back a pair of k (one u32) at a time, broadcast against a packed pair row of the weights.
namespace {

inline uint32_t pair_at(const uint16_t* a, int64_t i) {  // the i-th u32 pair of a bf16 buffer
  uint32_t v;
  std::memcpy(&v, a + 2 * i, sizeof v);
  return v;
}

inline __m512 dp(__m512 acc, uint32_t pair, __m512i w) {
  return _mm512_dpbf16_ps(acc, __m512bh(_mm512_set1_epi32(int(pair))), __m512bh(w));
}

// store(i, sum over the k pairs of a's row i times w) for N rows of a (bf16 [N, K]) and w (K / 2 pair rows
// of 16), the pairs in order from zero
template <int N, class Store>
inline void dp_rows_by_16(const uint16_t* a, int64_t K, const uint32_t* w, Store&& store) {
  __m512 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < K / 2; ++q) {
    const __m512i wq = _mm512_loadu_si512(w + q * H);
    for (int i = 0; i < N; ++i) acc[i] = dp(acc[i], pair_at(a, i * K / 2 + q), wq);
  }
  for (int i = 0; i < N; ++i) store(i, acc[i]);
}

template <class Store>
void dp_block_by_16(const uint16_t* a, int64_t n, int64_t K, const uint32_t* w, Store&& store) {
  constexpr int G = 8;  // rows a group: eight chains against one weight row
  int64_t i = 0;
  for (; i + G <= n; i += G) dp_rows_by_16<G>(a + i * K, K, w, [&](int r, __m512 v) { store(i + r, v); });
  for (; i < n; ++i) dp_rows_by_16<1>(a + i * K, K, w, [&](int, __m512 v) { store(i, v); });
}

// out[16 (j0 + v)] = init[16 (j0 + v)] + the sum over u's 8 pairs of u times w's tile j0 + v, for v < NV
// (w: tiles of 8 pair rows, one a 16-column block)
template <int NV>
inline void dp_row_from_16(const uint16_t* u, const uint32_t* w, int64_t j0, const float* init, float* out) {
  __m512i up[8];
  for (int q = 0; q < 8; ++q) up[q] = _mm512_set1_epi32(int(pair_at(u, q)));
  for (int v = 0; v < NV; ++v) {
    const uint32_t* wt = w + (j0 + v) * 8 * H;
    __m512 acc = _mm512_setzero_ps();
    for (int q = 0; q < 8; ++q) acc = _mm512_dpbf16_ps(acc, __m512bh(up[q]), __m512bh(_mm512_loadu_si512(wt + q * H)));
    _mm512_storeu_ps(out + 16 * (j0 + v), _mm512_add_ps(_mm512_loadu_ps(init + 16 * (j0 + v)), acc));
  }
}

// part[m, c0 + 16v] += sum over the pairs q of a^T's pair (m, q) times u's pair row q, for v < NV: at
// (pairs_transposed) and b (pairs_over_rows), pairs in order
template <int NV>
inline void dp_outer_cols(float* part, const uint32_t* at, const uint32_t* b, int64_t pairs, int64_t F, int m,
                          int64_t c0) {
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_loadu_ps(part + m * F + c0 + 16 * v);
  for (int64_t q = 0; q < pairs; ++q) {
    uint32_t pair;
    std::memcpy(&pair, at + m * 16 + q, sizeof pair);
    for (int v = 0; v < NV; ++v) acc[v] = dp(acc[v], pair, _mm512_loadu_si512(b + q * F + c0 + 16 * v));
  }
  for (int v = 0; v < NV; ++v) _mm512_storeu_ps(part + m * F + c0 + 16 * v, acc[v]);
}

}  // namespace

void squeeze_excite_dp_add_outer(float* part, const float* a, const float* u, int64_t n, int64_t F,
                                 const SeAmx& amx) {
  constexpr int VG = 8;
  uint32_t* at = reinterpret_cast<uint32_t*>(amx.c);
  uint32_t* b = reinterpret_cast<uint32_t*>(amx.a);
  pairs_transposed(a, n, at);
  pairs_over_rows(u, n, F, b);
  const int64_t pairs = (n + 1) / 2;  // a last odd row paired with zeros; no pair past it
  for (int m = 0; m < H; ++m) {
    int64_t c0 = 0;
    for (; c0 + 16 * VG <= F; c0 += 16 * VG) dp_outer_cols<VG>(part, at, b, pairs, F, m, c0);
    for (; c0 < F; c0 += 16) dp_outer_cols<1>(part, at, b, pairs, F, m, c0);
  }
}

void squeeze_excite_dp_squeeze(const float* x, int64_t n, int64_t F, const SeAmx& amx, const float* b1, float* h) {
  bf16_block(x, n, F, amx.a);
  const __m512 b = b1 ? _mm512_loadu_ps(b1) : _mm512_setzero_ps();
  dp_block_by_16(amx.a, n, F, amx.w1, [&](int64_t i, __m512 v) { store_squeezed(h, i, v, b); });
}

void squeeze_excite_dp_gate_grad(const float* g, int64_t n, int64_t F, const SeAmx& amx, const float* h, float* p) {
  bf16_block(g, n, F, amx.a);
  dp_block_by_16(amx.a, n, F, amx.w2t, [&](int64_t i, __m512 v) { store_gated(p, i, v, h); });
}

void squeeze_excite_dp_rows_from_16(const float* u, int64_t n, const uint32_t* w, int64_t F, const SeAmx& amx,
                                    const float* init, int64_t ld_init, float* out, int64_t ld_out) {
  constexpr int VG = 8;  // 16-column blocks a group
  bf16_block(u, n, H, amx.a);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* ui = amx.a + i * H;
    const float* in = init + i * ld_init;
    float* o = out + i * ld_out;
    int64_t j = 0;
    for (; (j + VG) * 16 <= F; j += VG) dp_row_from_16<VG>(ui, w, j, in, o);
    for (; j * 16 < F; ++j) dp_row_from_16<1>(ui, w, j, in, o);
  }
}

}  // namespace gnn
