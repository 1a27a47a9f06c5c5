// SGEMM with AVX-512F: a 12 x 32 micro-tile (24 accumulators of the 32 zmm registers), 12 x 16 for a
// product at most 16 wide and 8 x 32 for one of at most 16 rows (gemm_detail::run_shaped). Compiled with
// -mavx512f (CMakeLists.txt); only called when the CPU has it. Same driver as the AVX2 path.
#include <immintrin.h>

#include "kernels/gemm.h"
#include "kernels/gemm_blocked.h"

namespace gnn {
namespace {
struct Avx512 {
  using T = __m512;
  static constexpr int W = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T bcast(const float* p) { return _mm512_set1_ps(*p); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
};
}  // namespace

void gemm_avx512(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                 GemmCat cat) {
  gemm_detail::run_shaped<Avx512, 12, 2>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias,
                                         gemm_detail::Cat{cat.a2, cat.lda2, cat.k1});
}

}  // namespace gnn
