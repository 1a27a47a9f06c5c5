// Mixed-precision GEMM on AVX512-BF16 (kernels/gemm.h, GemmPrecision::kBf16): op(A) and op(B) are
// rounded to bfloat16 (nearest, ties to even) as they are packed, and VDPBF16PS sums each pair of
// exact products into f32 accumulators: the tensor-core recipe of torch's bf16 autocast and of
// torch.set_float32_matmul_precision("medium") on CPUs with AMX or AVX512-BF16, here with f32 outputs.
// Twice the f32 micro-kernel's multiply-adds per instruction (a 12 x 32 tile of 24 accumulators, as the
// f32 one, each instruction covering two k).
//
// The driver is gemm_blocked.h's, in bf16 pairs: for each KC block, op(B) is packed into 32-column
// panels of k pairs (bp[panel][k/2][j], the two bf16 of one u32), shared by the threads; each thread
// converts its MC block of op(A) (row-major A into rows of bf16, so a row's k pairs are adjacent; A^T
// into k pairs over the rows) and runs the tiles. The row blocks and the split-K chunks are those of
// the f32 driver (they read the shape only), so the bits do not depend on the thread count.
// VDPBF16PS treats denormal inputs as zero and flushes denormal results (Intel SDM); an odd K is padded
// with a zero pair element on both sides.
// AmxBlocked, at the end, is the same product on AMX tiles (gemm.h's Bf16Kernel::kAmx).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/amx_tiles.h"
#include "kernels/gemm.h"
#include "kernels/gemm_blocked.h"

namespace gnn {
namespace {

constexpr int MR = 12, W = 16;
constexpr int64_t kKC = gemm_detail::kKC, kMC = gemm_detail::kMC, kKCAmx = gemm_detail::kKCAmx;
static_assert(kMC % 48 == 0, "pack_a pads a block's rows to a multiple of 48 (MR and the vector) within kMC");

__mmask16 first(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// n floats (n <= 16) to n bf16, zero-extended to u32 lanes (the low halves of pairs).
__m512i bf16_lanes(const float* p, int64_t n) {
  const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first(n), p));
  return _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), __m256i(h));  // maskz: GCC 12 warns on the unmasked form
}

// dst[t] = (bf16(r0[t]), bf16(r1[t])) for t < n, the first in the low half; r1 null: a zero pair element.
void pairs_of_rows(const float* r0, const float* r1, int64_t n, uint32_t* dst) {
  for (int64_t t = 0; t < n; t += W) {
    const int64_t m = std::min<int64_t>(W, n - t);
    __m512i v = bf16_lanes(r0 + t, m);
    if (r1) v = _mm512_or_si512(v, _mm512_maskz_slli_epi32(__mmask16(0xffff), bf16_lanes(r1 + t, m), 16));
    _mm512_mask_storeu_epi32(dst + t, first(m), v);
  }
}

// dst[t] = bf16(src[t]) for t < n: consecutive k of one row, so dst read as u32 holds k pairs.
void bf16_row(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t t = 0; t < n; t += W) {
    const int64_t m = std::min<int64_t>(W, n - t);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first(m), src + t));
    _mm256_mask_storeu_epi16(dst + t, first(m), __m256i(h));
  }
}

template <int NV>
struct Bf16Blocked {
  static constexpr int NR = NV * W;

  // An MR x NR tile over k2 pairs: a pair of row i at a[i * sa_i + p * sa_p] (one of the two strides is 1:
  // Rows says which, so the addressing is the compiler's to hoist), b[p * NR + j]; then alpha, beta and
  // bias as the f32 micro-kernel, and last the addend r (row stride ldr) when given.
  template <bool Rows>
  static void micro(int64_t k2, const uint32_t* __restrict a, int64_t sa_i, int64_t sa_p, const uint32_t* __restrict b,
                    float* c, int64_t ldc, float alpha, float beta, const float* bias, const float* r = nullptr,
                    int64_t ldr = 0) {
    if constexpr (Rows) sa_p = 1;
    else sa_i = 1;
    __m512 acc[MR][NV];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
    gemm_detail::prefetch_c_tile(c, ldc, MR, NR);
    for (int64_t p = 0; p < k2; ++p) {
      __m512bh bv[NV];
      for (int j = 0; j < NV; ++j) bv[j] = __m512bh(_mm512_loadu_si512(b + p * NR + j * W));
      for (int i = 0; i < MR; ++i) {
        const __m512bh av = __m512bh(_mm512_set1_epi32(int(a[i * sa_i + p * sa_p])));
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
      }
    }
    if (alpha != 1.0f)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_mul_ps(_mm512_set1_ps(alpha), acc[i][j]);
    if (beta != 0.0f)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NV; ++j)
          acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c + i * ldc + j * W), acc[i][j]);
    if (bias)
      for (int j = 0; j < NV; ++j) {
        const __m512 bj = _mm512_loadu_ps(bias + j * W);
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_add_ps(acc[i][j], bj);
      }
    if (r)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_loadu_ps(r + i * ldr + j * W));
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NV; ++j) _mm512_storeu_ps(c + i * ldc + j * W, acc[i][j]);
  }

  template <bool Rows>
  static void micro_edge(int64_t k2, const uint32_t* a, int64_t sa_i, int64_t sa_p, const uint32_t* b, float* c,
                         int64_t ldc, int64_t rows, int64_t cols, float alpha, float beta, const float* bias,
                         const float* r = nullptr, int64_t ldr = 0) {
    alignas(64) float tile[MR * NR];
    micro<Rows>(k2, a, sa_i, sa_p, b, tile, NR, 1.0f, 0.0f, nullptr);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const float v = beta == 0.0f ? alpha * tile[i * NR + j] : alpha * tile[i * NR + j] + beta * c[i * ldc + j];
        const float vb = bias ? v + bias[j] : v;
        c[i * ldc + j] = r ? vb + r[i * ldr + j] : vb;
      }
  }

  // op(B)[k0:k0+kc, :] into panels bp[q][p][j] of k pairs, zero-padded to NR columns and to an even kc; a
  // panel holds k2s >= kc / 2 pairs, those past kc zero (the AMX kernel's whole tiles of 16 pairs).
  static void pack_b(bool tb, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t N, uint32_t* bp,
                     bool parallel, int64_t k2s = 0) {
    const int64_t panels = (N + NR - 1) / NR, k2 = (kc + 1) / 2;
    k2s = std::max(k2s, k2);
    if (k2s > k2)
      for (int64_t q = 0; q < panels; ++q) std::fill(bp + q * k2s * NR + k2 * NR, bp + (q + 1) * k2s * NR, 0u);
    if (tb) {  // B stored [N, K]: each column j's k run converted, then spread over the pairs
#pragma omp parallel for schedule(static) if (parallel && panels * kc > 4096)
      for (int64_t q = 0; q < panels; ++q) {
        uint32_t* dst = bp + q * k2s * NR;
        alignas(64) uint16_t run[kKCAmx + 2];  // either driver's KC
        for (int64_t j = 0; j < NR; ++j) {
          const int64_t col = q * NR + j;
          if (col < N) bf16_row(B + col * ldb + k0, kc, run);
          else std::fill(run, run + kc, uint16_t(0));
          run[kc] = 0;
          for (int64_t p = 0; p < k2; ++p) dst[p * NR + j] = uint32_t(run[2 * p]) | uint32_t(run[2 * p + 1]) << 16;
        }
      }
      return;
    }
#pragma omp parallel for schedule(static) if (parallel && panels * kc > 4096)
    for (int64_t p = 0; p < k2; ++p) {
      const float* r0 = B + (k0 + 2 * p) * ldb;
      const float* r1 = 2 * p + 1 < kc ? r0 + ldb : nullptr;
      for (int64_t q = 0; q < panels; ++q) {
        uint32_t* dst = bp + q * k2s * NR + p * NR;
        const int64_t j0 = q * NR, cols = std::min<int64_t>(NR, N - j0);
        pairs_of_rows(r0 + j0, r1 ? r1 + j0 : nullptr, cols, dst);
        std::fill(dst + cols, dst + NR, 0u);
      }
    }
  }

  // op(A)[i0:i0+mc, k0:k0+kc] of [A | a2] in bf16, the pair of row i at ap[i * sa_i + p * sa_p], the rows
  // past mc up to a multiple of MR zero. Row-major A: rows of bf16 in k order (sa_i = k2 pairs, sa_p = 1).
  // Transposed A: pairs of its stored rows k0 + 2p, k0 + 2p + 1 over the columns (sa_i = 1, sa_p = the
  // block's padded height).
  // Row-major A's rows may be k2s >= k2 pairs apart, the pairs past k2 zero (the AMX kernel's whole tiles).
  static void pack_a(bool ta, const float* A, int64_t lda, const gemm_detail::Cat& cat, int64_t i0, int64_t mc,
                     int64_t k0, int64_t kc, uint32_t* ap, int64_t& sa_i, int64_t& sa_p, int64_t k2s = 0) {
    const int64_t k2 = (kc + 1) / 2, rows = (mc + 47) / 48 * 48;
    if (ta) {
      sa_i = 1, sa_p = rows;
      // op(A) row t = stored column t: A's for t < k1, a2's (column t - k1) after
      const int64_t k1 = cat.a2 ? cat.k1 : INT64_MAX, split = std::clamp(k1 - i0, int64_t(0), mc);
      for (int64_t p = 0; p < k2; ++p) {
        uint32_t* dst = ap + p * rows;
        const int64_t s = k0 + 2 * p;
        const bool two = 2 * p + 1 < kc;
        if (split > 0) {
          const float* r0 = A + s * lda + i0;
          pairs_of_rows(r0, two ? r0 + lda : nullptr, split, dst);
        }
        if (split < mc) {
          const float* r0 = cat.a2 + s * cat.lda2 + (i0 + split - k1);
          pairs_of_rows(r0, two ? r0 + cat.lda2 : nullptr, mc - split, dst + split);
        }
        std::fill(dst + mc, dst + rows, 0u);
      }
      return;
    }
    sa_i = std::max(k2, k2s), sa_p = 1;
    const int64_t k1 = cat.a2 ? cat.k1 : INT64_MAX, split = std::clamp(k1 - k0, int64_t(0), kc);
    for (int64_t i = 0; i < rows; ++i) {
      uint32_t* dst = ap + i * sa_i;
      if (i >= mc) {
        std::fill(dst, dst + sa_i, 0u);
        continue;
      }
      std::fill(dst + k2, dst + sa_i, 0u);
      // the row's bf16 in k order, written by bf16_row's vector stores (which may alias any type), so its
      // u32 pairs hold k pairs; the odd tail's upper half is cleared through the u32 itself
      uint16_t* h = reinterpret_cast<uint16_t*>(dst);
      const int64_t row = i0 + i;
      if (split > 0) bf16_row(A + row * lda + k0, split, h);
      if (split < kc) bf16_row(cat.a2 + row * cat.lda2 + (k0 + split - k1), kc - split, h + split);
      if (kc % 2) dst[kc / 2] &= 0xffffu;
    }
  }

  static void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                  const gemm_detail::Cat& cat, const GemmOut& sc = {}) {
    const int64_t panels = (N + NR - 1) / NR, blocks = (M + kMC - 1) / kMC;
    const gemm_detail::OutC out_c(C, ldc, sc, NR);
    GNN_CHECK(!(parallel && out_c.adds() && gemm_detail::wants_split_k(M, N, K)),
              "gemm: an addend does not go through split-K's chunks (gemm_cpu_bf16_on adds it after)");
    if (parallel && !sc.c2 && gemm_detail::wants_split_k(M, N, K))  // the f32 driver's chunks (gemm_blocked.h)
      return gemm_detail::split_k(
          ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, cat,
          [&](const float* a, int64_t la, const float* b, int64_t kc, float* part, const gemm_detail::Cat& ck) {
            run(ta, tb, M, N, kc, 1.0f, a, la, b, ldb, 0.0f, part, N, /*parallel=*/false, nullptr, ck);
          });
    const int64_t k2_max = (std::min(K, kKC) + 1) / 2;
    uint32_t* bp = gemm_detail::scratch<uint32_t>(gemm_detail::kPackB, panels * k2_max * NR);
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0), k2 = (kc + 1) / 2;
      const float beta_k = k0 == 0 ? beta : 1.0f;
      const bool last = k0 + kc == K;  // the bias and the addend go into the last k block's store
      const float* bias_k = last ? bias : nullptr;
      pack_b(tb, B, ldb, k0, kc, N, bp, parallel);
#pragma omp parallel if (parallel)
      {
        uint32_t* ap = gemm_detail::scratch<uint32_t>(gemm_detail::kPackA, kMC * k2);
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * kMC, mc = std::min(kMC, M - i0);
          int64_t sa_i = 0, sa_p = 0;
          pack_a(ta, A, lda, cat, i0, mc, k0, kc, ap, sa_i, sa_p);
          for (int64_t q = 0; q < panels; ++q) {
            const int64_t j0 = q * NR, cols = std::min<int64_t>(NR, N - j0);
            const uint32_t* b = bp + q * k2 * NR;
            const float* bj = bias_k ? bias_k + j0 : nullptr;
            const int64_t ldc_q = out_c.ld(j0), ldr_q = out_c.ld_add(j0);
            for (int64_t r = 0; r < mc; r += MR) {
              const int64_t rows = std::min<int64_t>(MR, mc - r);
              float* c = out_c.at(i0 + r, j0);
              const float* ra = last ? out_c.add_at(i0 + r, j0) : nullptr;
              const uint32_t* a = ap + r * sa_i;
              const bool full = rows == MR && cols == NR;
              if (full && !ta) micro<true>(k2, a, sa_i, sa_p, b, c, ldc_q, alpha, beta_k, bj, ra, ldr_q);
              else if (full) micro<false>(k2, a, sa_i, sa_p, b, c, ldc_q, alpha, beta_k, bj, ra, ldr_q);
              else if (!ta) micro_edge<true>(k2, a, sa_i, sa_p, b, c, ldc_q, rows, cols, alpha, beta_k, bj, ra, ldr_q);
              else micro_edge<false>(k2, a, sa_i, sa_p, b, c, ldc_q, rows, cols, alpha, beta_k, bj, ra, ldr_q);
            }
          }
        }
      }
    }
  }
};

// The same product on AMX (TDPBF16PS: a 16 x 16 f32 tile += a 16 x 32 bf16 tile times a 32 x 16 one, 16 k
// pairs a row). The operands are packed as above, op(B) into the same panels of k pairs (the tiles'
// "VNNI" layout: a B tile is 16 pair rows of one panel, stride NR), op(A) into rows of k pairs (an A
// tile is 16 of them), each with whole tiles of 16 pairs, the pairs past kc zero. A 32 x NR block of C
// is held in 2 NT tiles over a KC block; then alpha, beta and the bias as the micro-kernel above. The
// tile sums each (row, column)'s products in an order and with internal rounding of the hardware's
// own, which is not VDPBF16PS's one pair at a time: the two kernels' results differ in the last bits
// (within the f32 summation's bound), and each is the same for any thread count.
template <int NT>
struct AmxBlocked {
  static constexpr int NR = NT * W, MB = 32, KT = 16;  // KT: k pairs a tile
  using Pack = Bf16Blocked<NT>;
  static_assert(kMC % MB == 0, "row blocks of whole 32-row tiles");

  static void configure() {  // every tile 16 rows of 64 bytes: C 0-3, A 4-5, B 6-7
    AmxTileConfig cfg;
    for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    amx_configure(cfg);
  }

  // The 32 x NR block of C over k2s pairs (a multiple of KT): a row-major pairs with stride lda (in u32), b
  // a panel; out [32, NR].
  static void tiles(int64_t k2s, const uint32_t* a, int64_t lda, const uint32_t* b, float* out) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (NT == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int64_t p = 0; p < k2s; p += KT) {
      _tile_loadd(4, a + p, lda * 4);
      _tile_loadd(5, a + 16 * lda + p, lda * 4);
      _tile_loadd(6, b + p * NR, NR * 4);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 5, 6);
      if constexpr (NT == 2) {
        _tile_loadd(7, b + p * NR + W, NR * 4);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, out, NR * 4);
    _tile_stored(1, out + 16 * NR, NR * 4);
    if constexpr (NT == 2) {
      _tile_stored(2, out + W, NR * 4);
      _tile_stored(3, out + 16 * NR + W, NR * 4);
    }
  }

  // C[rows, cols] from the block: alpha, then beta C, then the bias, then the addend r (row stride ldr), as
  // Bf16Blocked::micro. Streamed: a full NR columns with beta 0 into a C that is not read back soon, written
  // with streaming stores, which do not fetch C's lines first (c 64-byte aligned).
  template <bool Streamed = false>
  static void finish(const float* out, float* c, int64_t ldc, int64_t rows, int64_t cols, float alpha, float beta,
                     const float* bias, const float* r = nullptr, int64_t ldr = 0) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; j += W) {
        const __mmask16 m = first(cols - j);
        __m512 v = _mm512_loadu_ps(out + i * NR + j);
        if (alpha != 1.0f) v = _mm512_mul_ps(_mm512_set1_ps(alpha), v);
        if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m, c + i * ldc + j), v);
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
        if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r + i * ldr + j));
        if constexpr (Streamed) _mm512_stream_ps(c + i * ldc + j, v);
        else _mm512_mask_storeu_ps(c + i * ldc + j, m, v);
      }
  }

  // op(A)[i0:i0+mc, k0:k0+kc] as rows of k pairs, ap[i * k2s + p], the rows past mc up to a multiple of 32
  // and the pairs past kc zero. Transposed A is packed first as Bf16Blocked's pairs over the rows, then
  // turned 16 x 16 at a time.
  static void pack_a(bool ta, const float* A, int64_t lda, const gemm_detail::Cat& cat, int64_t i0, int64_t mc,
                     int64_t k0, int64_t kc, int64_t k2s, uint32_t* ap) {
    const int64_t k2 = (kc + 1) / 2, rows = (mc + MB - 1) / MB * MB;
    int64_t sa_i = 0, sa_p = 0;
    const int64_t rows48 = (mc + 47) / 48 * 48;  // Bf16Blocked's padding
    if (!ta) {
      Pack::pack_a(false, A, lda, cat, i0, mc, k0, kc, ap, sa_i, sa_p, k2s);  // rows k2s pairs apart
      if (rows > rows48) std::fill(ap + rows48 * k2s, ap + rows * k2s, 0u);
      return;
    }
    uint32_t* cm = gemm_detail::scratch<uint32_t>(gemm_detail::kPackAT, rows48 * k2);
    Pack::pack_a(true, A, lda, cat, i0, mc, k0, kc, cm, sa_i, sa_p);  // cm[p * rows48 + i]
    for (int64_t ib = 0; ib < rows; ib += 16)
      for (int64_t pb = 0; pb < k2s; pb += 16) {
        __m512i r[16];
        for (int64_t t = 0; t < 16; ++t)
          r[t] = pb + t < k2 && ib < rows48 ? _mm512_loadu_si512(cm + (pb + t) * rows48 + ib) : _mm512_setzero_si512();
        transpose16(r);
        for (int64_t t = 0; t < 16; ++t) _mm512_storeu_si512(ap + (ib + t) * k2s + pb, r[t]);
      }
  }

  static void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                  const gemm_detail::Cat& cat, const GemmOut& sc = {}) {
    const int64_t panels = (N + NR - 1) / NR, blocks = (M + kMC - 1) / kMC;
    const gemm_detail::OutC out_c(C, ldc, sc, NR);
    GNN_CHECK(!(parallel && out_c.adds() && gemm_detail::wants_split_k(M, N, K)),
              "gemm: an addend does not go through split-K's chunks (gemm_cpu_bf16_on adds it after)");
    if (parallel && !sc.c2 && gemm_detail::wants_split_k(M, N, K))  // the f32 driver's chunks, as Bf16Blocked
      return gemm_detail::split_k(
          ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, cat,
          [&](const float* a, int64_t la, const float* b, int64_t kc, float* part, const gemm_detail::Cat& ck) {
            run(ta, tb, M, N, kc, 1.0f, a, la, b, ldb, 0.0f, part, N, /*parallel=*/false, nullptr, ck);
          });
    // KC: 512 for the product over the threads, whose C may be far larger than the caches (gemm_blocked.h's
    // kKCAmx); 256 for a serial call (split_k's chunks, whose partial C stays in L2 and whose transposed A
    // packed 512 deep ran 2-5% slower on layout-tgraph's dW, [512, 10752] x [10752, 128]; gemm_cpu_serial,
    // the fused SAGE layer's rows). So with K over 256 a serial call and a threaded one differ in last bits.
    const int64_t kcb = parallel ? kKCAmx : kKC;
    const int64_t k2s_max = ((std::min(K, kcb) + 1) / 2 + KT - 1) / KT * KT;
    uint32_t* bp = gemm_detail::scratch<uint32_t>(gemm_detail::kPackB, panels * k2s_max * NR);
    // A large C written once (one KC block, beta 0) goes out with streaming stores: without them each of
    // its lines is first read in to be overwritten. From 16 MiB, well past the threads' L2, where the op
    // that reads C next would find little of it in cache anyway: [53040, 256] x [256, 256] (GIN-6th's MLP)
    // 5.0 -> 4.2 ms on 2 threads, GIN-6th's step 3-6% faster; layout-tgraph's outputs (up to 11 MB) were
    // slower to read back when streamed, so they are not (docs/benchmarks.md, 2026-12-02).
    // (With C in two parts, each part as if it were a product of its own: the bits and stores of two calls.)
    const int64_t n1 = std::min(N, out_c.n1);
    const bool stream1 = gemm_amx_streams_c(M, n1, K, beta, C, ldc, parallel),
               stream2 = n1 < N && gemm_amx_streams_c(M, N - n1, K, beta, sc.c2, sc.ldc2, parallel);
    for (int64_t k0 = 0; k0 < K; k0 += kcb) {
      const int64_t kc = std::min(kcb, K - k0), k2s = ((kc + 1) / 2 + KT - 1) / KT * KT;
      const float beta_k = k0 == 0 ? beta : 1.0f;
      const bool last = k0 + kc == K;  // the bias and the addend go into the last k block's store
      const float* bias_k = last ? bias : nullptr;
      Pack::pack_b(tb, B, ldb, k0, kc, N, bp, parallel, k2s);
#pragma omp parallel if (parallel)
      {
        configure();
        uint32_t* ap = gemm_detail::scratch<uint32_t>(gemm_detail::kPackA, kMC * k2s);
        alignas(64) float out[MB * NR];
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * kMC, mc = std::min(kMC, M - i0);
          pack_a(ta, A, lda, cat, i0, mc, k0, kc, k2s, ap);
          for (int64_t q = 0; q < panels; ++q) {
            const int64_t j0 = q * NR, cols = std::min<int64_t>(NR, N - j0);
            const int64_t ldc_q = out_c.ld(j0), ldr_q = out_c.ld_add(j0);
            const bool stream = j0 < n1 ? stream1 : stream2;
            for (int64_t r = 0; r < mc; r += MB) {
              tiles(k2s, ap + r * k2s, k2s, bp + q * k2s * NR, out);
              float* c = out_c.at(i0 + r, j0);
              const float* ra = last ? out_c.add_at(i0 + r, j0) : nullptr;
              const int64_t rows = std::min<int64_t>(MB, mc - r);
              const float* bias_j = bias_k ? bias_k + j0 : nullptr;
              if (stream && cols == NR) finish<true>(out, c, ldc_q, rows, cols, alpha, beta_k, bias_j, ra, ldr_q);
              else finish(out, c, ldc_q, rows, cols, alpha, beta_k, bias_j, ra, ldr_q);
            }
          }
        }
        _tile_release();
        if (stream1 || stream2) _mm_sfence();  // this thread's streamed lines ordered before the region ends
      }
    }
  }
};

// One vector of columns for N <= 16, two otherwise: Driver<1> or Driver<2>.
// (A split C, sc.c2 set, takes Driver<2>: its n1 is a positive multiple of 32 below N.)
template <template <int> class Driver>
void by_width(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
              GemmCat cat, const GemmOut& sc) {
  const gemm_detail::Cat c{cat.a2, cat.lda2, cat.k1};
  if (N <= W && !sc.c2)
    return Driver<1>::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, c, sc);
  Driver<2>::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, c, sc);
}

}  // namespace

void gemm_bf16_amx(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                   GemmCat cat, GemmOut sc) {
  by_width<AmxBlocked>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat, sc);
}

void gemm_bf16_avx512(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                      GemmCat cat, GemmOut sc) {
  by_width<Bf16Blocked>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat, sc);
}

}  // namespace gnn
