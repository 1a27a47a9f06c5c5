// Segment softmax and GAT scores on the CPU: rows (segments) in dynamic blocks, heads in the inner
// loop; the backward of the source scores walks the CSC, so every sum has one owner and one order.
// A block of rows runs with H a compile-time constant where it is 1, 2 or 4, so the loops over the heads
// unroll (at run time GCC vectorised them for 8 heads or more, and left fewer to scalar code), and with H
// read at run time otherwise; the same operations in the same order either way (the same bits).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/segment_softmax.h"

namespace gnn {
namespace {
constexpr int64_t kRows = 64;

// Calls body(first row, end row, heads) over the rows [0, S) in blocks of kRows spread over the threads,
// heads a std::integral_constant for H = 1, 2, 4 (chosen once a block, not once a row) and the
// int64_t H otherwise. body (always inlined) and this expand inside each GNN_CPU_CLONES caller, so the
// OpenMP region is outlined from the caller (GCC clones it for each ISA too) and not from a lambda.
#define GNN_FOR_ROW_BLOCKS(S, H, body)                                                               \
  do {                                                                                               \
    const int64_t blocks_ = ((S) + kRows - 1) / kRows;                                               \
    _Pragma("omp parallel for schedule(dynamic, 1)") for (int64_t blk_ = 0; blk_ < blocks_; ++blk_) { \
      const int64_t r0_ = blk_ * kRows, r1_ = std::min<int64_t>((S), r0_ + kRows);                   \
      switch (H) {                                                                                   \
        case 1:                                                                                      \
          body(r0_, r1_, std::integral_constant<int64_t, 1>{});                                      \
          break;                                                                                     \
        case 2:                                                                                      \
          body(r0_, r1_, std::integral_constant<int64_t, 2>{});                                      \
          break;                                                                                     \
        case 4:                                                                                      \
          body(r0_, r1_, std::integral_constant<int64_t, 4>{});                                      \
          break;                                                                                     \
        default:                                                                                     \
          body(r0_, r1_, int64_t(H));                                                                \
      }                                                                                              \
    }                                                                                                \
  } while (0)

// c ? a : b as a bit mask, no branch: as a select the leaky slope's factor became a branch in scalar
// code (1 to 4 heads), mispredicted half the time on random scores; the mask made the scores 3-4x faster
// there (docs/benchmarks.md, fifty-ninth session) and vectorises as well as the select where GCC did.
GNN_INLINE inline float select(bool c, float a, float b) {
  const uint32_t m = -uint32_t(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}

// Per-row scratch of H floats: on the stack for the constant heads (so it stays in registers) and for
// up to 16 read at run time (a vector made once a block cost 8% at 8 heads), else a vector.
template <class Heads>
struct HeadScratch {
  static constexpr int64_t kN = std::is_integral_v<Heads> ? 16 : int64_t(Heads{});
  float fixed[kN];
  std::vector<float> grown;
  explicit HeadScratch(int64_t H) {
    if (H > kN) grown.resize(size_t(H));
  }
  float* data() { return grown.empty() ? fixed : grown.data(); }
};
}  // namespace

GNN_CPU_CLONES void segment_softmax_forward_cpu(float* __restrict y, const float* __restrict x,
                                                const int32_t* __restrict indptr, int64_t S, int64_t H) {
  auto rows = [&](int64_t r0, int64_t r1, auto heads) GNN_INLINE {
    const int64_t Hn = heads;
    HeadScratch<decltype(heads)> ms(Hn), sums(Hn);
    float* __restrict m = ms.data();
    float* __restrict sum = sums.data();
    for (int64_t s = r0; s < r1; ++s) {
      const int32_t b = indptr[s], e = indptr[s + 1];
      if (b == e) continue;
      for (int64_t h = 0; h < Hn; ++h) m[h] = x[int64_t(b) * Hn + h], sum[h] = 0.0f;
      for (int32_t p = b + 1; p < e; ++p)
        for (int64_t h = 0; h < Hn; ++h) m[h] = std::max(m[h], x[int64_t(p) * Hn + h]);
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < Hn; ++h) {
          const float v = vm::exp(x[int64_t(p) * Hn + h] - m[h]);
          y[int64_t(p) * Hn + h] = v;
          sum[h] += v;
        }
      for (int64_t h = 0; h < Hn; ++h) sum[h] = 1.0f / sum[h];
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < Hn; ++h) y[int64_t(p) * Hn + h] *= sum[h];
    }
  };
  GNN_FOR_ROW_BLOCKS(S, H, rows);
}

GNN_CPU_CLONES void segment_softmax_backward_cpu(float* __restrict dx, const float* __restrict y,
                                                 const float* __restrict dy, const int32_t* __restrict indptr,
                                                 int64_t S, int64_t H) {
  auto rows = [&](int64_t r0, int64_t r1, auto heads) GNN_INLINE {
    const int64_t Hn = heads;
    HeadScratch<decltype(heads)> dots(Hn);
    float* __restrict dot = dots.data();
    for (int64_t s = r0; s < r1; ++s) {
      const int32_t b = indptr[s], e = indptr[s + 1];
      for (int64_t h = 0; h < Hn; ++h) dot[h] = 0.0f;
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < Hn; ++h) dot[h] += y[int64_t(p) * Hn + h] * dy[int64_t(p) * Hn + h];
      for (int32_t p = b; p < e; ++p)
        for (int64_t h = 0; h < Hn; ++h) {
          const int64_t i = int64_t(p) * Hn + h;
          dx[i] = y[i] * (dy[i] - dot[h]);
        }
    }
  };
  GNN_FOR_ROW_BLOCKS(S, H, rows);
}

GNN_CPU_CLONES void gat_scores_forward_cpu(float* __restrict s, const float* __restrict a_src,
                                           const float* __restrict a_dst, const CsrView& g, int64_t H, float slope) {
  auto rows = [&](int64_t r0, int64_t r1, auto heads) GNN_INLINE {
    const int64_t Hn = heads;
    for (int64_t v = r0; v < r1; ++v)
      for (int32_t p = g.indptr[v]; p < g.indptr[v + 1]; ++p) {
        const float* as = a_src + int64_t(g.indices[p]) * Hn;
        const float* ad = a_dst + v * Hn;
        for (int64_t h = 0; h < Hn; ++h) {
          const float z = as[h] + ad[h];
          s[int64_t(p) * Hn + h] = select(z > 0.0f, z, slope * z);
        }
      }
  };
  GNN_FOR_ROW_BLOCKS(g.num_rows, H, rows);
}

GNN_CPU_CLONES void gat_scores_backward_cpu(float* __restrict da_src, float* __restrict da_dst,
                                            const float* __restrict ds, const float* __restrict a_src,
                                            const float* __restrict a_dst, const CsrView& g, int64_t H, float slope) {
  // One pass for each side: out's row v (da_dst over the CSR, da_src over the CSC) sums its edges' ds
  // times the slope at z = own[v] + other[neighbour], pos mapping a CSC position to the edge's CSR one.
  // (On the CSR side that is a_dst + a_src, the reference's a_src + a_dst the other way round: the same
  // float, addition being commutative.)
  auto side = [&](float* __restrict out, const int32_t* ptr, const int32_t* nbr, const int32_t* pos,
                  const float* __restrict own, const float* __restrict other) {
    return [=](int64_t r0, int64_t r1, auto heads) GNN_INLINE {
      const int64_t Hn = heads;
      for (int64_t v = r0; v < r1; ++v) {
        float* o = out + v * Hn;
        const float* a = own + v * Hn;
        for (int64_t h = 0; h < Hn; ++h) o[h] = 0.0f;
        for (int32_t q = ptr[v]; q < ptr[v + 1]; ++q) {
          const float* b = other + int64_t(nbr[q]) * Hn;
          const float* d = ds + int64_t(pos ? pos[q] : q) * Hn;
          for (int64_t h = 0; h < Hn; ++h) o[h] += d[h] * select(a[h] + b[h] > 0.0f, 1.0f, slope);
        }
      }
    };
  };
  const auto dst_rows = side(da_dst, g.indptr, g.indices, nullptr, a_dst, a_src);
  GNN_FOR_ROW_BLOCKS(g.num_rows, H, dst_rows);
  const auto src_rows = side(da_src, g.csc_indptr, g.csc_indices, g.csc_to_csr, a_src, a_dst);
  GNN_FOR_ROW_BLOCKS(g.num_cols, H, src_rows);
}

#undef GNN_FOR_ROW_BLOCKS

}  // namespace gnn
