// The blocked SGEMM driver shared by every ISA (kernels/gemm_{generic,avx2,avx512}.cpp instantiate it
// with their vector traits). BLIS-style loops:
//   for each KC block of k:            pack B[kc, N] into NR-wide column panels (all threads share it)
//     parallel for each MC block of M: A is read in place, row-major or transposed, by full MR-row
//                                      panels; packed (per thread): a partial last panel (zero-padded),
//                                      a transposed panel across [A | a2]'s parts, and a row-major k
//                                      block across them
//       for each NR panel, MR panel:   micro-kernel: an MR x NR tile of C in registers over kc
// (run_shaped, at the end, picks the tile for a shape: narrow products take a narrower one.)
// The TpuGraphs shapes are tall and skinny ((N*C) x F times F x F, F = 64..256): with KC = 256 the
// whole of B is packed once and stays in L2 while A streams through.
// V provides: using T (a register of W floats), W, zero(), load(p), bcast(p), fma(a, b, c), store(p, v),
// mul(a, b).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/common.h"
#include "base/error.h"
#include "kernels/gemm.h"

namespace gnn::gemm_detail {

constexpr int64_t kKC = 256, kMC = 96;
// The AMX driver's KC over the threads (gemm_bf16.cpp), twice the others'. C is read back and written
// again once per KC block past the first, and C is the product's largest stream when K is a few hundred:
// [aggregate | root] 512 wide (SAGE-6th's layer, [53040, 512] x [512, 256]) spent a quarter of its time in
// the second block's reads of C. Its packed A (96 rows of 256 pairs) and B (8 panels of 32 x 256 pairs)
// then take 96 and 256 KiB of L2. (Serial calls, split_k's chunks among them, keep kKC.)
constexpr int64_t kKCAmx = 2 * kKC;

// A micro-kernel's MR x NR tile of C asked for before its k loop, one prefetch a 64-byte line (16 floats),
// stored after it: the lines' fetch (for the stores, or beta's loads) runs beside the products instead of
// holding up the stores (docs/benchmarks.md, 2026-12-04, fiftieth session). Every driver's micro-kernel
// (f32, bf16 on AVX512-BF16) calls it; always inlined, so each ISA's kernel has its own copy.
GNN_INLINE inline void prefetch_c_tile(const float* c, int64_t ldc, int rows, int cols) {
  constexpr int kLineFloats = 16;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; j += kLineFloats) __builtin_prefetch(c + i * ldc + j, 1, 3);
}

// A stored as two row-major matrices side by side, [A | a2] (GemmCat, kernels/gemm.h): stored column t
// is A's for t < k1, a2's column t - k1 after. Without a2, A alone.
struct Cat {
  const float* a2 = nullptr;
  int64_t lda2 = 0, k1 = 0;
  // stored element (s, t)
  const float* at(const float* A, int64_t lda, int64_t s, int64_t t) const {
    return t < k1 || !a2 ? A + s * lda + t : a2 + s * lda2 + (t - k1);
  }
};

// Where C's element (i, j) lives: C [M, N] itself, or with a GemmOut (kernels/gemm.h) that splits it its
// columns j < n1 in C and the rest in c2; and what is added to it after the bias, if anything. A driver asks
// at a panel's first column j0 (n1 a multiple of the panel width nr, so a panel lies in one part). A split C
// never goes through split_k: gemm_split_bf16_on runs two products where K would be cut.
struct OutC {
  float* c;
  int64_t ldc;
  float* c2;
  int64_t ldc2, n1;
  const float *r, *r2;
  int64_t ldr, ldr2;
  OutC(float* c, int64_t ldc, const GemmOut& o, int64_t nr)
      : c(c),
        ldc(ldc),
        c2(o.c2),
        ldc2(o.ldc2),
        n1(o.c2 ? o.n1 : INT64_MAX),
        r(o.r),
        r2(o.r2),
        ldr(o.ldr),
        ldr2(o.ldr2) {
    GNN_CHECK(!c2 || (n1 > 0 && n1 % nr == 0), "gemm: C split at column ", n1, ", not a multiple of the ", nr,
              "-column panels");
  }
  float* at(int64_t i, int64_t j) const { return j < n1 ? c + i * ldc + j : c2 + i * ldc2 + (j - n1); }
  int64_t ld(int64_t j) const { return j < n1 ? ldc : ldc2; }
  // the addend of element (i, j), or null
  const float* add_at(int64_t i, int64_t j) const {
    if (j < n1) return r ? r + i * ldr + j : nullptr;
    return r2 ? r2 + i * ldr2 + (j - n1) : nullptr;
  }
  int64_t ld_add(int64_t j) const { return j < n1 ? ldr : ldr2; }
  bool adds() const { return r || r2; }
};

// Per-thread scratch that keeps its largest size, uninitialised: packed B, packed A and split-K
// partials are needed on every call, and a fresh zero-filled vector each time (the 128 KiB of packed
// B went through mmap) cost a memset and page faults: 3% of a fused SAGE layer's forward+backward.
// T is the packed element (float; the bf16 kernel's u32 pairs), each with its own buffers.
enum Slot { kPackB, kPackA, kPackAT, kPartials, kSlots };  // kPackAT: A before a re-layout (bf16 on AMX)
// 64-byte aligned: an AMX tile's rows and a vector's loads then each take one cache line, not two (with
// new[]'s 16-byte alignment every 64-byte row of a tile load spanned two lines).
struct FreeScratch {
  void operator()(void* p) const { std::free(p); }
};
template <class T = float>
T* scratch(Slot slot, int64_t n) {
  thread_local std::unique_ptr<void, FreeScratch> buf[kSlots];
  thread_local int64_t cap[kSlots] = {};
  if (cap[slot] < n) {
    buf[slot].reset();
    cap[slot] = 0;  // nothing held until the new buffer is
    const size_t bytes = (size_t(n) * sizeof(T) + 63) / 64 * 64;
    buf[slot].reset(std::aligned_alloc(64, bytes));
    GNN_CHECK(buf[slot], "gemm: no memory for ", bytes, " bytes of packing scratch");
    cap[slot] = n;
  }
  return static_cast<T*>(buf[slot].get());
}

// Whether a product cuts K into chunks (split_k): always with at most 4 row blocks, and with more where K is
// at least 8 M and C small (a layer of [aggregate | root] 512 wide: dW = [a | b]^T dy over 64k rows had
// 250 k blocks of two parallel regions each, and A^T packed block by block in 384-byte pieces). The choice
// reads the shape only, never the thread count: the same bits anywhere. Every driver (f32, bf16) uses it.
inline bool wants_split_k(int64_t M, int64_t N, int64_t K) {
  const int64_t blocks = (M + kMC - 1) / kMC;  // kMC is a multiple of every MR (96)
  return K >= 4096 && (blocks <= 4 || (K >= 8 * M && M * N <= (int64_t(1) << 19)));
}

// A small C over a long K (a weight gradient, h^T dz over all nodes) has too few row blocks to share
// out: K is cut instead, into chunks fixed by K alone, each multiplied serially into its own partial
// C by run_chunk(a, lda, b, kc, partial, cat) (the driver's serial run on op(A)[:, k0:] and op(B)[k0:, :],
// alpha 1, beta 0, no bias), and the partials are added in chunk order, so the thread count never
// changes the bits. dW = h^T dz at N = 10k, 2F = 256, O = 128: 64 -> 126 GFLOP/s.
template <class RunChunk>
void split_k(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias, const Cat& cat,
             const RunChunk& run_chunk) {
  const int64_t len = std::max<int64_t>(1024, (K + 15) / 16 + kKC - 1) / kKC * kKC;
  const int64_t chunks = (K + len - 1) / len;
  float* part = scratch(kPartials, chunks * M * N);  // the calling thread's; the chunks' threads write it
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = c * len, kc = std::min(len, K - k0);
    const float* b = tb ? B + k0 : B + k0 * ldb;  // op(B)[k0:, :]
    // op(A)[:, k0:]: rows k0.. of both parts (transposed), or columns k0.. of [A | a2], which may lie in a2
    const float* a = nullptr;
    int64_t la = lda;
    Cat ck = cat;
    if (ta) {
      a = A + k0 * lda;
      if (cat.a2) ck.a2 = cat.a2 + k0 * cat.lda2;
    } else if (cat.a2 && k0 >= cat.k1) {
      a = cat.a2 + (k0 - cat.k1), la = cat.lda2, ck = Cat{};
    } else {
      a = A + k0;
      ck.k1 = cat.k1 - k0;
    }
    run_chunk(a, la, b, kc, part + c * M * N, ck);
  }
  // Summed into chunk 0's row along j (vectorised; one element at a time, the dependent adds over
  // the chunks took 0.5 ms of a 4.5 ms dW), in chunk order as before.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    float* __restrict s = part + i * N;
    for (int64_t c = 1; c < chunks; ++c) {
      const float* __restrict pc = part + c * M * N + i * N;
      for (int64_t j = 0; j < N; ++j) s[j] += pc[j];
    }
    float* __restrict ci = C + i * ldc;
    if (beta == 0.0f)
      for (int64_t j = 0; j < N; ++j) ci[j] = alpha * s[j];
    else
      for (int64_t j = 0; j < N; ++j) ci[j] = alpha * s[j] + beta * ci[j];
    if (bias)
      for (int64_t j = 0; j < N; ++j) ci[j] += bias[j];
  }
}

template <class V, int MR, int NV>
struct Blocked {
  static constexpr int W = V::W, NR = NV * W;
  static_assert(kMC % MR == 0, "row blocks of kMC rows, as wants_split_k counts them");

  // MR x NR tile: c = alpha * (a_panel . b_panel) + beta * c, over kc. Packed: a is an MR-row panel
  // (a[p * MR + i]). Direct: a points at row-major A itself (a[i * lda + p]), which skips packing A:
  // the MR rows are MR sequential streams the prefetchers follow, and the same values are summed in
  // the same order, so both give the same bits.
  // With bias (the last k block of a product with a bias, alpha 1): c + bias[j] after the store's value,
  // the same bits as the product followed by a separate addition of the bias row.
  // DirectT: a points at stored (transposed) A, whose row p holds op(A)'s column p: a[p * lda + i].
  template <bool Direct = false, bool DirectT = false>
  static inline void micro(int64_t kc, const float* __restrict a, const float* __restrict b, float* c, int64_t ldc,
                           float alpha, float beta, int64_t lda = 0, const float* bias = nullptr) {
    typename V::T acc[MR][NV];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NV; ++j) acc[i][j] = V::zero();
    prefetch_c_tile(c, ldc, MR, NR);
    for (int64_t p = 0; p < kc; ++p) {
      typename V::T bv[NV];
      for (int j = 0; j < NV; ++j) bv[j] = V::load(b + p * NR + j * W);
      for (int i = 0; i < MR; ++i) {
        const typename V::T av = V::bcast(DirectT ? a + p * lda + i : Direct ? a + i * lda + p : a + p * MR + i);
        for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(av, bv[j], acc[i][j]);
      }
    }
    const typename V::T va = V::set1(alpha);
    if (alpha != 1.0f)  // times 1 is exact: skipped (a K of 16 spent a tenth of its tile on it)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NV; ++j) acc[i][j] = V::mul(va, acc[i][j]);
    if (beta != 0.0f) {
      const typename V::T vb = V::set1(beta);
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(vb, V::load(c + i * ldc + j * W), acc[i][j]);
    }
    if (bias) {  // fma(1, v, b) is v + b rounded once: the addition's bits
      const typename V::T one = V::set1(1.0f);
      for (int j = 0; j < NV; ++j) {
        const typename V::T bj = V::load(bias + j * W);
        for (int i = 0; i < MR; ++i) acc[i][j] = V::fma(one, acc[i][j], bj);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NV; ++j) V::store(c + i * ldc + j * W, acc[i][j]);
  }

  // A partial tile (rows < MR or cols < NR): computed into a scratch tile, then the valid part.
  // Direct and DirectT need all MR rows of op(A) to exist (rows == MR).
  template <bool Direct = false, bool DirectT = false>
  static void micro_edge(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
                         float alpha, float beta, int64_t lda = 0, const float* bias = nullptr) {
    alignas(64) float tile[MR * NR];
    micro<Direct, DirectT>(kc, a, b, tile, NR, 1.0f, 0.0f, lda);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const float v = beta == 0.0f ? alpha * tile[i * NR + j] : alpha * tile[i * NR + j] + beta * c[i * ldc + j];
        c[i * ldc + j] = bias ? v + bias[j] : v;  // alpha is 1 with a bias: nothing to contract into the add
      }
  }

  // op(B)[k0:k0+kc, :] into panels of NR columns, zero-padded: bp[panel][p][j]. Row-major B is walked
  // row by row (each row scattered over the panels), so it is read as one sequential stream: panel by
  // panel, it was read 8 times over with a 512-byte stride, and packing a weight gradient's dz chunks
  // from memory cost more than their multiply.
  static void pack_b(bool tb, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t N, float* bp,
                     bool parallel) {
    const int64_t panels = (N + NR - 1) / NR;
    if (tb) {
#pragma omp parallel for schedule(static) if (parallel && panels * kc > 4096)
      for (int64_t q = 0; q < panels; ++q) {
        float* dst = bp + q * kc * NR;
        const int64_t j0 = q * NR, cols = std::min<int64_t>(NR, N - j0);
        for (int64_t p = 0; p < kc; ++p) {
          for (int64_t j = 0; j < cols; ++j) dst[p * NR + j] = B[(j0 + j) * ldb + k0 + p];
          for (int64_t j = cols; j < NR; ++j) dst[p * NR + j] = 0.0f;
        }
      }
      return;
    }
#pragma omp parallel for schedule(static) if (parallel && panels * kc > 4096)
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = B + (k0 + p) * ldb;
      for (int64_t q = 0; q < panels; ++q) {
        float* dst = bp + q * kc * NR + p * NR;
        const int64_t j0 = q * NR, cols = std::min<int64_t>(NR, N - j0);
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[j0 + j];
        for (int64_t j = cols; j < NR; ++j) dst[j] = 0.0f;
      }
    }
  }

  // op(A)[i0:i0+mc, k0:k0+kc] into panels of MR rows, zero-padded: ap[panel][p][i]. Transposed A is
  // walked along its rows (p outer) for the same reason as B.
  static void pack_a(bool ta, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* ap,
                     const Cat& cat = {}) {
    if (ta) {
      for (int64_t p = 0; p < kc; ++p) {
        const float* s1 = A + (k0 + p) * lda;  // stored row k0 + p of each part
        const float* s2 = cat.a2 ? cat.a2 + (k0 + p) * cat.lda2 : nullptr;
        for (int64_t r = 0; r < mc; r += MR) {
          float* dst = ap + r * kc + p * MR;
          const int64_t rows = std::min<int64_t>(MR, mc - r), g = i0 + r;  // op(A) rows g.. = stored columns
          if (!s2 || g + rows <= cat.k1) {
            for (int64_t i = 0; i < rows; ++i) dst[i] = s1[g + i];
          } else if (g >= cat.k1) {
            for (int64_t i = 0; i < rows; ++i) dst[i] = s2[g - cat.k1 + i];
          } else {  // a panel across the parts
            for (int64_t i = 0; i < rows; ++i) dst[i] = g + i < cat.k1 ? s1[g + i] : s2[g + i - cat.k1];
          }
          for (int64_t i = rows; i < MR; ++i) dst[i] = 0.0f;
        }
      }
      return;
    }
    const bool across = cat.a2 && k0 < cat.k1 && k0 + kc > cat.k1, in_a2 = cat.a2 && k0 >= cat.k1;
    for (int64_t r = 0; r < mc; r += MR) {
      float* dst = ap + r * kc;
      const int64_t rows = std::min<int64_t>(MR, mc - r);
      for (int64_t i = 0; i < MR; ++i) {
        const int64_t row = i0 + r + i;
        if (i >= rows) {
          for (int64_t p = 0; p < kc; ++p) dst[p * MR + i] = 0.0f;
        } else if (across) {  // a k block across the parts
          for (int64_t p = 0; p < kc; ++p) dst[p * MR + i] = *cat.at(A, lda, row, k0 + p);
        } else {
          const float* src = in_a2 ? cat.a2 + row * cat.lda2 + (k0 - cat.k1) : A + row * lda + k0;
          for (int64_t p = 0; p < kc; ++p) dst[p * MR + i] = src[p];
        }
      }
    }
  }

  // bias (null, or N values, with alpha 1): C = op(A) op(B) + beta C + bias, the bias added to each
  // finished value, so the bits are those of the product and then the addition.
  // cat: A is [A | cat.a2] (Cat); each value is summed as from the one matrix they make.
  static void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel = true,
                  const float* bias = nullptr, const Cat& cat = {}) {
    if (M == 0 || N == 0) return;
    if (K == 0 || alpha == 0.0f) {  // C = beta * C (beta 0 writes zeros, never reading C)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const float v = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
          C[i * ldc + j] = bias ? v + bias[j] : v;
        }
      return;
    }
    const int64_t panels = (N + NR - 1) / NR;
    const int64_t mc_max = (kMC + MR - 1) / MR * MR;
    const int64_t blocks = (M + mc_max - 1) / mc_max;
    if (parallel && wants_split_k(M, N, K))
      return split_k(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, cat,
                     [&](const float* a, int64_t la, const float* b, int64_t kc, float* part, const Cat& ck) {
                       run(ta, tb, M, N, kc, 1.0f, a, la, b, ldb, 0.0f, part, N, /*parallel=*/false, nullptr, ck);
                     });
    float* bp = scratch(kPackB, panels * std::min(K, kKC) * NR);
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      const float beta_k = k0 == 0 ? beta : 1.0f;  // later k blocks accumulate
      const float* bias_k = k0 + kc == K ? bias : nullptr;  // onto the finished sums only
      pack_b(tb, B, ldb, k0, kc, N, bp, parallel);
      // Row-major A is read in place by full MR-row panels, from the part that holds this k block (a block
      // across both parts is packed); besides that only a partial last panel (zero-padded) is packed. (For
      // transposed A the parts split op(A)'s rows, not k: none of these four is used.)
      const bool in_a2 = !ta && cat.a2 && k0 >= cat.k1, across = !ta && cat.a2 && k0 < cat.k1 && k0 + kc > cat.k1;
      const bool direct = !ta && !across;
      const float* a_k = !direct ? nullptr : in_a2 ? cat.a2 + (k0 - cat.k1) : A + k0;  // row 0 of the block
      const int64_t la = in_a2 ? cat.lda2 : lda;
      // Transposed A (a weight gradient h^T dz) is read in place too: a full panel of op(A) is MR adjacent
      // columns of A's rows k0.., broadcast from where they lie. Packing them first wrote and read the
      // whole of A once more (21 MiB a layer of [aggregate | root] 512 wide over 10,752 rows): tgraph's dW
      // of that layer took 5.1 ms with it, 3.95 without. Only a partial panel and one across the parts are
      // packed. The same values in the same order: the same bits.
      auto t_panel = [&](int64_t g, int64_t rows, int64_t& lt) -> const float* {  // null: pack it
        if (rows < MR) return nullptr;
        if (!cat.a2 || g + MR <= cat.k1) return lt = lda, A + k0 * lda + g;
        if (g >= cat.k1) return lt = cat.lda2, cat.a2 + k0 * cat.lda2 + (g - cat.k1);
        return nullptr;
      };
#pragma omp parallel if (parallel)
      {
        float* ap = scratch(kPackA, mc_max * kc);
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * mc_max, mc = std::min(mc_max, M - i0), full = mc / MR * MR;
          int64_t lt = 0;
          if (ta) {
            for (int64_t r = 0; r < mc; r += MR)
              if (const int64_t rows = std::min<int64_t>(MR, mc - r); !t_panel(i0 + r, rows, lt))
                pack_a(ta, A, lda, i0 + r, rows, k0, kc, ap + r * kc, cat);
          } else if (!direct) {
            pack_a(ta, A, lda, i0, mc, k0, kc, ap, cat);
          } else if (full < mc) {
            pack_a(ta, A, lda, i0 + full, mc - full, k0, kc, ap + full * kc, cat);
          }
          for (int64_t q = 0; q < panels; ++q) {
            const int64_t j0 = q * NR, cols = std::min<int64_t>(NR, N - j0);
            const float* b = bp + q * kc * NR;
            for (int64_t r = 0; r < mc; r += MR) {
              const int64_t rows = std::min<int64_t>(MR, mc - r);
              float* c = C + (i0 + r) * ldc + j0;
              const float* bj = bias_k ? bias_k + j0 : nullptr;
              if (const float* at = ta ? t_panel(i0 + r, rows, lt) : nullptr) {
                if (cols == NR) micro<false, true>(kc, at, b, c, ldc, alpha, beta_k, lt, bj);
                else micro_edge<false, true>(kc, at, b, c, ldc, rows, cols, alpha, beta_k, lt, bj);
                continue;
              }
              const float* a = direct ? a_k + (i0 + r) * la : nullptr;
              if (direct && rows == MR && cols == NR) micro<true>(kc, a, b, c, ldc, alpha, beta_k, la, bj);
              else if (direct && rows == MR) micro_edge<true>(kc, a, b, c, ldc, rows, cols, alpha, beta_k, la, bj);
              else if (rows == MR && cols == NR) micro(kc, ap + r * kc, b, c, ldc, alpha, beta_k, 0, bj);
              else micro_edge(kc, ap + r * kc, b, c, ldc, rows, cols, alpha, beta_k, 0, bj);
            }
          }
        }
      }
    }
  }
};

// The tile for a shape. Narrow products (N within one vector: a squeeze-and-excitation gate's 128 -> 16,
// dh = dz W2^T) and few rows (M <= 16: its dW2 = h^T dz) ran mostly as edge tiles, half or more of the
// MR x NR tile computed and thrown away, then copied out element by element: 55-100 GFLOP/s against
// 160-180 for a wide product. They take a tile of one vector's width (MR x W) or of 8 rows. Every C
// element is the same chain of multiply-adds over k whatever the tile, and with alpha 1 and beta 0 or 1
// the full and edge tiles' stores round alike, so the bits are those of the MR x NR tile (the row
// blocks, and so the split-K choice, are unchanged: 96 rows for MR 8 and 12).
template <class V, int MR, int NV>
void run_shaped(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                const Cat& cat) {
  static_assert(MR <= 8 || (kMC + MR - 1) / MR * MR == (kMC + 7) / 8 * 8, "the 8-row tile must keep the row blocks");
  const bool plain_store = alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
  if constexpr (NV > 1)
    if (plain_store && N <= V::W)
      return Blocked<V, MR, 1>::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
  if constexpr (MR > 8)
    if (plain_store && M <= 16)
      return Blocked<V, 8, NV>::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
  Blocked<V, MR, NV>::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
}

}  // namespace gnn::gemm_detail
